//! What one trial measured and how it ended: the report the parent assembles (`outcome.rs`), the
//! journal keeps and the search reads.

use crate::protocol::{BackendKind, Replayed, Stage};
use deeplab::Phase;
use serde::{Deserialize, Serialize};

/// The outcome of a trial: exactly one of four.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialOutcome {
    Fits,
    Oom,
    Error,
    Timeout,
}

impl TrialOutcome {
    pub fn name(self) -> &'static str {
        match self {
            TrialOutcome::Fits => "fits",
            TrialOutcome::Oom => "oom",
            TrialOutcome::Error => "error",
            TrialOutcome::Timeout => "timeout",
        }
    }
}

/// What decided a trial's verdict: where its fit or its out-of-memory comes from. Only a fit or an
/// out-of-memory has one ([`Verdict`]); an error or a timeout is no verdict.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Evidence {
    /// It ran on the device under the ceiling, which the device held (a GPU's allocator capped or
    /// the card filled with ballast; the CPU's counting allocator): the device's own verdict.
    Device,
    /// It ran to its end where nothing held the ceiling (the CPU's allocator counts live bytes, not
    /// what PyTorch's holds; a run without the ceiling): its stream of requests, replayed through
    /// PyTorch's caching allocator under the ceiling, decided.
    Replayed,
    /// A stream-only trial: the training issued for a virtual `card`, nothing computed, no device
    /// memory taken; its stream replayed under the ceiling decided.
    Stream { card: String },
    /// A `--exec` command in a process of its own: how it ended.
    Exit,
    /// A `--exec` command that serves trials: its answer to this one.
    Served,
    /// The model's memory estimate (`--estimate`): nothing ran.
    Estimate,
}

impl Evidence {
    /// How a report says where a verdict comes from.
    pub fn label(&self) -> String {
        match self {
            Evidence::Device => "on the device under the ceiling".into(),
            Evidence::Replayed => "its stream replayed under the ceiling".into(),
            Evidence::Stream { card } => format!("its stream replayed (stream only, {card})"),
            Evidence::Exit => "the command's exit".into(),
            Evidence::Served => "the served command's answer".into(),
            Evidence::Estimate => "the model's estimate".into(),
        }
    }

    /// The evidence as the engine that ran the trial makes it: a replay of a virtual card's stream
    /// is a stream-only trial's, and anything the estimate answered is the estimate.
    pub fn under(self, engine: &crate::protocol::Engine) -> Evidence {
        use crate::protocol::Engine;
        match (self, engine) {
            (_, Engine::Estimate) => Evidence::Estimate,
            (_, Engine::Stream { card }) => Evidence::Stream {
                card: card.name.clone(),
            },
            (e, _) => e,
        }
    }

    /// Whether a GPU ran the trial under the real ceiling: a certificate.
    pub fn is_device(&self) -> bool {
        matches!(self, Evidence::Device)
    }
}

/// A trial's verdict with what it rests on. A fit or an out-of-memory cannot be made without the
/// evidence that decided it; an out-of-memory carries its failure (where, what was in use, the
/// message), an error or a timeout its reason. In JSON the variant is the `outcome` key, beside
/// `evidence`, `oom` or `error` (the journal's first format, which reads back as this).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Verdict {
    Fits {
        evidence: Evidence,
        /// The steps ran and were measured, but their numbers left the float range (a loss or the
        /// value read back was NaN or infinite, as pure f16 does): how. Still the memory's
        /// verdict; the report says the training itself would not have learned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diverged: Option<String>,
    },
    Oom {
        #[serde(rename = "oom")]
        failure: OomInfo,
        evidence: Evidence,
    },
    Error {
        #[serde(rename = "error")]
        reason: String,
    },
    Timeout {
        #[serde(rename = "error")]
        reason: String,
    },
}

impl Verdict {
    /// The verdict's kind, for what reads only that (the search, exit codes).
    pub fn outcome(&self) -> TrialOutcome {
        match self {
            Verdict::Fits { .. } => TrialOutcome::Fits,
            Verdict::Oom { .. } => TrialOutcome::Oom,
            Verdict::Error { .. } => TrialOutcome::Error,
            Verdict::Timeout { .. } => TrialOutcome::Timeout,
        }
    }

    /// What decided a fit or an out-of-memory.
    pub fn evidence(&self) -> Option<&Evidence> {
        match self {
            Verdict::Fits { evidence, .. } | Verdict::Oom { evidence, .. } => Some(evidence),
            _ => None,
        }
    }

    /// The verdict with its evidence as the engine that ran the trial makes it ([`Evidence::under`]).
    pub fn under(self, engine: &crate::protocol::Engine) -> Verdict {
        match self {
            Verdict::Fits { evidence, diverged } => Verdict::Fits {
                evidence: evidence.under(engine),
                diverged,
            },
            Verdict::Oom { failure, evidence } => Verdict::Oom {
                failure,
                evidence: evidence.under(engine),
            },
            other => other,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageMemory {
    pub step: usize,
    pub phase: Phase,
    pub name: String,
    pub in_use_bytes: u64,
    pub device_bytes: u64,
    /// When the reading was taken, in seconds since the trial's process started.
    #[serde(default)]
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: usize,
    pub seconds: f64,
    pub in_use_after_bytes: u64,
    /// NaN when the step diverged (written as `null`).
    #[serde(with = "crate::protocol::any_float")]
    pub loss: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomInfo {
    /// The phase the failing allocation came in: the one that follows the last reading (after
    /// the loss comes backward; after backward, the optimizer step).
    pub phase: Option<Phase>,
    /// Where the last reading before the failure was taken: the failure happened after it.
    pub stage: Option<Stage>,
    pub step: Option<usize>,
    /// The allocation that failed, when the message says.
    pub bytes: Option<u64>,
    /// What was in use when it failed, when the message says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_use_bytes: Option<u64>,
    pub message: String,
    /// The request PyTorch's allocator could not serve in the replay of a run that reached its
    /// end (nothing refused it on the device).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

/// How the child process ended, as the parent saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildExit {
    Code(i32),
    Signal(i32),
    /// Killed by the parent after the time limit.
    TimedOut,
    /// Could not be started at all.
    NotStarted(String),
}

/// The device a trial's child made ready under its ceiling, as it said when it started: all four
/// or none (a child that never started).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Started {
    pub backend: BackendKind,
    pub device: String,
    pub ceiling_bytes: u64,
    pub context_bytes: u64,
}

/// What a trial measured of memory: its peaks, what it held between steps, each stage's and step's
/// readings, and its stream replayed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Most device memory handed out at once (CUDA: used device memory incl. the context; CPU: the
    /// counting allocator's peak).
    pub peak_bytes: Option<u64>,
    /// `--exec`: where the peak comes from (the command's own figure, sampled device memory, the
    /// largest resident set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_source: Option<String>,
    /// Most memory held by live tensors at a measuring point.
    pub peak_in_use_bytes: Option<u64>,
    /// Memory held once the model, optimizer and batch exist, before the first step; after the
    /// last step where steps ran (what does not scale with the batch).
    pub base_bytes: Option<u64>,
    pub params: Option<usize>,
    pub stages: Vec<StageMemory>,
    pub steps: Vec<StepRecord>,
    /// Growth of in-use memory a step, from the second step to the last (from the first in a run
    /// of two); a leak from [`LEAK_BYTES`] up. `None` with fewer than two steps.
    pub leak_bytes_per_step: Option<i64>,
    /// A built-in trial that ran to its end: its stream replayed through PyTorch's allocator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<Replayed>,
}

/// Growth a step from which a report calls it a leak: a leak keeps a step's tensors (a loss kept
/// with its graph, a list of outputs), megabytes a step; less is the runtime's own bookkeeping
/// (the CPU backend's caches).
pub const LEAK_BYTES: i64 = 1 << 20;

/// How long a trial took: in all, and from its child's start until the device was ready under its
/// ceiling (process start, CUDA context, ballast) and until the model, optimizer and batch existed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub wall_seconds: f64,
    #[serde(default)]
    pub ready_seconds: Option<f64>,
    #[serde(default)]
    pub built_seconds: Option<f64>,
}

/// One trial, from the child to the report: its verdict with the evidence and payload it rests on,
/// the device it started on, what it measured of memory, its timing, and how its process ended.
/// As JSON (`--json`, the journal) the groups are flattened into one object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialReport {
    #[serde(flatten)]
    pub verdict: Verdict,
    #[serde(flatten)]
    pub started: Option<Started>,
    #[serde(flatten)]
    pub memory: Memory,
    #[serde(flatten)]
    pub timing: Timing,
    pub exit: ChildExit,
    /// Where the child ran (host, Slurm step), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<crate::protocol::Place>,
}

impl TrialReport {
    /// The verdict's kind.
    pub fn outcome(&self) -> TrialOutcome {
        self.verdict.outcome()
    }

    /// An out-of-memory's failure.
    pub fn oom(&self) -> Option<&OomInfo> {
        match &self.verdict {
            Verdict::Oom { failure, .. } => Some(failure),
            _ => None,
        }
    }

    /// Why a trial is no verdict (an error or a timeout).
    pub fn error(&self) -> Option<&str> {
        match &self.verdict {
            Verdict::Error { reason } | Verdict::Timeout { reason } => Some(reason),
            _ => None,
        }
    }

    /// How a fit's numbers diverged, if they did.
    pub fn diverged(&self) -> Option<&str> {
        match &self.verdict {
            Verdict::Fits { diverged, .. } => diverged.as_deref(),
            _ => None,
        }
    }

    /// What decided a fit or an out-of-memory.
    pub fn evidence(&self) -> Option<&Evidence> {
        self.verdict.evidence()
    }

    /// A served command answered this trial (it did not run in a process of its own).
    pub fn served(&self) -> bool {
        self.evidence() == Some(&Evidence::Served)
    }

    pub fn backend(&self) -> Option<BackendKind> {
        self.started.as_ref().map(|s| s.backend)
    }

    pub fn device(&self) -> Option<&str> {
        self.started.as_ref().map(|s| s.device.as_str())
    }

    pub fn ceiling_bytes(&self) -> Option<u64> {
        self.started.as_ref().map(|s| s.ceiling_bytes)
    }

    pub fn context_bytes(&self) -> Option<u64> {
        self.started.as_ref().map(|s| s.context_bytes)
    }

    /// What was in use when it ran out of memory: the failure's own figure (`true`), else the last
    /// reading before it (`false`, a lower bound).
    pub fn in_use_at_oom(&self) -> Option<(u64, bool)> {
        let oom = self.oom()?;
        match oom.in_use_bytes {
            Some(b) => Some((b, true)),
            None => self.memory.stages.last().map(|s| (s.in_use_bytes, false)),
        }
    }

    /// In use at an out-of-memory failure plus the request that failed, where known.
    pub fn failed_at(&self) -> Option<u64> {
        let (in_use, _) = self.in_use_at_oom()?;
        Some(in_use + self.oom().and_then(|o| o.bytes).unwrap_or(0))
    }

    /// A report with nothing measured yet: no verdict until the trial is classified.
    pub(crate) fn empty(exit: ChildExit, wall_seconds: f64) -> TrialReport {
        TrialReport {
            verdict: Verdict::Error {
                reason: "nothing measured".into(),
            },
            started: None,
            memory: Memory::default(),
            timing: Timing {
                wall_seconds,
                ready_seconds: None,
                built_seconds: None,
            },
            exit,
            place: None,
        }
    }

    /// The smallest ceiling the trial fits under, as PyTorch's allocator holds its stream.
    pub fn need_bytes(&self) -> Option<u64> {
        self.memory.allocator.as_ref().map(|a| a.need_bytes)
    }

    /// What the need would be with nothing in it that scales with the batch, the input or the
    /// model's depth: the bytes before the stream and what outlives a step (parameters, gradients'
    /// buffers, optimizer state). Where only one need is known, the line through it and this
    /// floor predicts a boundary.
    pub fn need_floor_bytes(&self) -> Option<u64> {
        let before = self.memory.allocator.as_ref()?.before_bytes;
        self.memory.base_bytes.map(|base| before + base)
    }

    /// The device fitted under the ceiling where the replay of its stream does not: the device's
    /// verdict stands, and the report says so.
    pub fn replay_disagrees(&self) -> bool {
        self.outcome() == TrialOutcome::Fits
            && self
                .memory
                .allocator
                .as_ref()
                .is_some_and(|a| a.fails_at.is_some())
    }
}

/// `at aspp allocating 1.1 MiB`: where, and how large the refused allocation was.
impl std::fmt::Display for OomInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at {}", self.stage.as_ref().map_or("start", Stage::name))?;
        if let Some(b) = self.bytes {
            write!(f, " allocating {}", crate::units::fmt_bytes(b))?;
        }
        Ok(())
    }
}
