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

/// What decided a trial's verdict: where its fit or its out-of-memory comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// No verdict: the trial ended in an error or a timeout.
    #[default]
    None,
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
            Evidence::None => "no verdict".into(),
        }
    }

    /// The evidence as the engine that ran the trial makes it: a replay of a virtual card's stream
    /// is a stream-only trial's, and anything the estimate answered is the estimate.
    pub fn under(self, engine: &crate::protocol::Engine) -> Evidence {
        use crate::protocol::Engine;
        match (self, engine) {
            (Evidence::None, _) => Evidence::None,
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

/// Everything one trial measured, as JSON for `--json` and the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialReport {
    pub outcome: TrialOutcome,
    pub backend: Option<BackendKind>,
    pub device: Option<String>,
    pub ceiling_bytes: Option<u64>,
    pub context_bytes: Option<u64>,
    /// Most device memory handed out at once (CUDA: used device memory incl. the context; CPU: the
    /// counting allocator's peak).
    pub peak_bytes: Option<u64>,
    /// Most memory held by live tensors at a measuring point.
    pub peak_in_use_bytes: Option<u64>,
    /// Memory held once the model, optimizer and batch exist, before the first step.
    pub base_bytes: Option<u64>,
    pub params: Option<usize>,
    pub stages: Vec<StageMemory>,
    pub steps: Vec<StepRecord>,
    /// Growth of in-use memory from the second step to the last; a possible leak when positive.
    pub leak_bytes_per_step: Option<i64>,
    pub oom: Option<OomInfo>,
    pub error: Option<String>,
    pub exit: ChildExit,
    pub wall_seconds: f64,
    /// Seconds from the child's start until the device was ready under its ceiling (process start,
    /// CUDA context, ballast), and until the model, optimizer and batch existed.
    #[serde(default)]
    pub ready_seconds: Option<f64>,
    #[serde(default)]
    pub built_seconds: Option<f64>,
    /// Where the child ran (host, Slurm step), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<crate::protocol::Place>,
    /// `--exec`: where the peak comes from (the command's own figure, sampled device memory, the
    /// largest resident set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_source: Option<String>,
    /// The steps ran and were measured, but their numbers left the float range (a loss or the
    /// value read back was NaN or infinite, as pure f16 does): how. The outcome is still the
    /// memory's verdict; the report says the training itself would not have learned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged: Option<String>,
    /// `--exec`: a command that serves trials answered this one (it did not run in a process of
    /// its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub served: bool,
    /// A built-in trial that ran to its end: its stream replayed through PyTorch's allocator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<Replayed>,
    /// What decided the verdict.
    #[serde(default)]
    pub evidence: Evidence,
}

impl TrialReport {
    /// What was in use when it ran out of memory: the failure's own figure (`true`), else the last
    /// reading before it (`false`, a lower bound).
    pub fn in_use_at_oom(&self) -> Option<(u64, bool)> {
        let oom = self.oom.as_ref()?;
        match oom.in_use_bytes {
            Some(b) => Some((b, true)),
            None => self.stages.last().map(|s| (s.in_use_bytes, false)),
        }
    }

    /// In use at an out-of-memory failure plus the request that failed, where known.
    pub fn failed_at(&self) -> Option<u64> {
        let (in_use, _) = self.in_use_at_oom()?;
        Some(in_use + self.oom.as_ref().and_then(|o| o.bytes).unwrap_or(0))
    }

    /// A report with nothing measured yet.
    pub(crate) fn empty(exit: ChildExit, wall_seconds: f64) -> TrialReport {
        TrialReport {
            outcome: TrialOutcome::Error,
            backend: None,
            device: None,
            ceiling_bytes: None,
            context_bytes: None,
            peak_bytes: None,
            peak_in_use_bytes: None,
            base_bytes: None,
            params: None,
            stages: vec![],
            steps: vec![],
            leak_bytes_per_step: None,
            oom: None,
            error: None,
            exit,
            wall_seconds,
            ready_seconds: None,
            built_seconds: None,
            place: None,
            peak_source: None,
            diverged: None,
            served: false,
            allocator: None,
            evidence: Evidence::None,
        }
    }

    /// The smallest ceiling the trial fits under, as PyTorch's allocator holds its stream.
    pub fn need_bytes(&self) -> Option<u64> {
        self.allocator.as_ref().map(|a| a.need_bytes)
    }

    /// What the need would be with nothing in it that scales with the batch, the input or the
    /// model's depth: the bytes before the stream and what outlives a step (parameters, gradients'
    /// buffers, optimizer state). Where only one need is known, the line through it and this
    /// floor predicts a boundary.
    pub fn need_floor_bytes(&self) -> Option<u64> {
        let before = self.allocator.as_ref()?.before_bytes;
        self.base_bytes.map(|base| before + base)
    }

    /// The device fitted under the ceiling where the replay of its stream does not: the device's
    /// verdict stands, and the report says so.
    pub fn replay_disagrees(&self) -> bool {
        self.outcome == TrialOutcome::Fits
            && self
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
