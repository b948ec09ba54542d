//! The search's vocabulary: outcomes, measurements, candidates (overrides of the original
//! configuration), axes and their values, the oracle that answers trials, and the events the search
//! tells of. Every other file of the search speaks in these words.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The three outcomes of a trial. An infrastructure failure is `Inconclusive`, never a guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Fits,
    Oom,
    Inconclusive,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Fits => "fits",
            Outcome::Oom => "oom",
            Outcome::Inconclusive => "inconclusive",
        })
    }
}

/// What a trial measured, as the search needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub outcome: Outcome,
    /// Peak device memory of the trial, when it ran far enough to have one. For a trial that ran
    /// out of memory, the peak of what succeeded before: see `failed_at_bytes` for what a user reads.
    pub peak_bytes: Option<u64>,
    /// A trial that ran out of memory: what was in use when it failed plus the request that failed,
    /// where the failure says (else the last reading before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at_bytes: Option<u64>,
    /// Most memory held by live tensors at a measuring point (the device peak less pool slack and
    /// context), when known. Smoother than `peak_bytes`; used to predict boundaries.
    #[serde(default)]
    pub peak_in_use_bytes: Option<u64>,
    /// Memory held before the first forward pass (parameters, buffers, context): the part of the peak
    /// that does not scale with batch or input size. Used to predict boundaries.
    pub base_bytes: Option<u64>,
    /// The smallest ceiling the trial fits under, where its run was replayed through the caching
    /// allocator (a run that reached its end): the trial's verdict is `need <= ceiling`, and the
    /// figure predicts boundaries on both sides of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub need_bytes: Option<u64>,
    /// The trial stopped after its first step, far below its ceiling (`train.one_step_below`):
    /// its need is that step's, a lower bound of the whole run's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub need_at_least: bool,
    /// The need with nothing in it that scales (the bytes before the trial's stream, such as the
    /// device's context, and what outlives a step), where the need is known: the line through a
    /// single need and this floor predicts a boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub need_floor_bytes: Option<u64>,
    /// The device fitted where the replay of its stream did not: the verdict is the device's, and
    /// a boundary it stands on is re-run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replay_disagrees: bool,
    /// Why the trial was inconclusive, or where it ran out of memory; free text for the report.
    pub note: String,
    /// A fit whose numbers diverged (a loss not finite): how, in words. Still a memory verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged: Option<String>,
    /// Answered from the record of an earlier run (the journal), not run now: costs no budget.
    #[serde(default)]
    pub replayed: bool,
}

impl Measurement {
    pub fn new(outcome: Outcome) -> Self {
        Measurement {
            outcome,
            peak_bytes: None,
            failed_at_bytes: None,
            peak_in_use_bytes: None,
            base_bytes: None,
            need_bytes: None,
            need_at_least: false,
            need_floor_bytes: None,
            replay_disagrees: false,
            note: String::new(),
            diverged: None,
            replayed: false,
        }
    }
}

/// A configuration to try: overrides of the original, `key → TOML value`. Empty is the original.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Candidate {
    pub sets: BTreeMap<String, String>,
    /// Run without the ceiling, on all the memory the machine has: what the configuration needs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unbounded: bool,
    /// Run every training step, where a trial far below its ceiling would stop after the first:
    /// its need is the whole run's, not a lower bound (a fix's need says which cards it fits on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub every_step: bool,
}

impl Candidate {
    pub fn original() -> Self {
        Candidate::default()
    }

    /// This candidate without the ceiling (see [`Candidate::unbounded`]).
    pub fn without_ceiling(&self) -> Candidate {
        Candidate {
            unbounded: true,
            ..self.clone()
        }
    }

    /// This candidate run for its need over every step (see [`Candidate::every_step`]).
    pub fn every_step(&self) -> Candidate {
        Candidate {
            every_step: true,
            ..self.clone()
        }
    }

    /// This candidate with one more override (replacing any earlier value of the key).
    pub fn with(&self, key: &str, value: &str) -> Candidate {
        let mut c = self.clone();
        c.sets.insert(key.to_string(), value.to_string());
        c
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.sets.get(key).map(String::as_str)
    }

    /// `key=value` strings, as `--set` takes them.
    pub fn to_sets(&self) -> Vec<String> {
        self.sets.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sets.is_empty() {
            true => f.write_str("original")?,
            false => f.write_str(&self.to_sets().join(" "))?,
        }
        match self.unbounded {
            true => f.write_str(" without the ceiling"),
            false => Ok(()),
        }
    }
}

/// One value along an axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AxisValue {
    /// The TOML value set for the axis key, e.g. `4`, `[512, 512]` or a quoted stage id.
    pub value: String,
    /// How the value is shown: `4`, `512×512`, `layer3.5`.
    pub label: String,
    /// The quantity memory scales with (batch, pixels), for boundary prediction; `None` where no
    /// simple law holds (depth, phase, output stride).
    pub x: Option<f64>,
}

/// The caller's kind of an axis or a fix, carried through the search untouched (the search never
/// reads it), so that the report gets the kind back typed instead of from a name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tag(pub u16);

/// A monotone axis: memory grows with the index of the value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    /// `batch`, `size`, `stride`, `depth`, `phase`.
    pub name: String,
    /// The caller's kind of this axis.
    #[serde(default)]
    pub tag: Tag,
    /// What the axis varies, in words for "… is not the cause": `batch dimension`, `input size`.
    pub noun: String,
    /// When the axis's last fitting value is itself a change a user would make, how the fix reads
    /// (`largest batch that fits`); `None` for axes that only locate memory (depth, phase).
    pub fix: Option<String>,
    /// The config key the values are set on.
    pub key: String,
    /// Values in order of growing memory.
    pub values: Vec<AxisValue>,
    /// Index of the original configuration's value.
    pub original: usize,
    /// Every value at the model's own granularity, in order, the coarse `values` among them (empty:
    /// `values` are already the finest). A boundary found on `values` is narrowed on these, at the
    /// original configuration only: the coarse values stay valid when other axes change (an input
    /// size that is a multiple of 32 suits every output stride; one that is a multiple of 8 does
    /// not).
    #[serde(default)]
    pub fine: Vec<AxisValue>,
}

impl Axis {
    /// The candidate that sets this axis to `values[i]` on top of `base`. The original value of the
    /// axis is written as no override, so that the cache sees one candidate, not two.
    pub fn at(&self, base: &Candidate, i: usize) -> Candidate {
        if i == self.original {
            let mut c = base.clone();
            c.sets.remove(&self.key);
            c
        } else {
            base.with(&self.key, &self.values[i].value)
        }
    }
}

/// The one seam to the world: runs a candidate and says what happened.
///
/// `attempt` is 0 for a first run, 1 and up for deliberate re-runs (a retry after an inconclusive
/// result, a confirmation of a boundary); a journal keys results on it so a resumed search replays the
/// same sequence.
pub trait Oracle {
    fn run(&mut self, candidate: &Candidate, attempt: u32) -> Measurement;

    /// Trials the search will ask for soon, most urgent first, as `(candidate, attempt)`: an oracle
    /// with idle workers may start them now (on other GPUs, other nodes). `sure` ones will be asked
    /// for; guesses may not be, and each list of guesses replaces the guesses not yet started.
    /// Never changes an answer: the search still asks for every result it uses through `run`, in
    /// its own order, so its outcome does not depend on how many trials run at once.
    fn prefetch(&mut self, _asks: &[(Candidate, u32)], _sure: bool) {}

    /// Whether the result of `candidate`'s `attempt` is already there (from an earlier run, or
    /// finished ahead): asking for it will not wait. `false` when not known.
    fn ready(&self, _candidate: &Candidate, _attempt: u32) -> bool {
        false
    }

    /// Another handle on the same trials, for a step of the search run on a thread of its own (the
    /// axes, which share no candidate but the original, are searched at once when trials can run
    /// at once). What a fork learns must reach this oracle by itself (shared state). `None`, the
    /// default, keeps the search sequential.
    fn fork(&self) -> Option<Box<dyn Oracle + Send + '_>> {
        None
    }
}

/// Why a trial was asked for; shown by the progress display.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Purpose {
    Original,
    /// The original without the ceiling: how much it needs.
    Need,
    /// Searching an axis; the interval of indices still open.
    Axis {
        axis: String,
        lo: String,
        hi: String,
    },
    Confirm {
        axis: String,
    },
    Capacity {
        axis: String,
    },
    Fix {
        change: String,
    },
    Modules,
    Minimise,
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Purpose::Original => f.write_str("original"),
            Purpose::Need => f.write_str("how much it needs"),
            Purpose::Axis { axis, lo, hi } => write!(f, "{axis} in ({lo}, {hi}]"),
            Purpose::Confirm { axis } => write!(f, "{axis}: confirm boundary"),
            Purpose::Capacity { axis } => write!(f, "{axis}: capacity"),
            Purpose::Fix { change } => write!(f, "fix: {change}"),
            Purpose::Modules => f.write_str("modules"),
            Purpose::Minimise => f.write_str("minimal failing configuration"),
        }
    }
}

/// What the search tells the display. Only the reporter draws.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    TrialStarted {
        candidate: Candidate,
        purpose: Purpose,
        attempt: u32,
    },
    TrialFinished {
        candidate: Candidate,
        purpose: Purpose,
        attempt: u32,
        measurement: Measurement,
    },
    /// A step of the diagnosis begins: `axis batch`, `fixes`, `modules`, `minimal failing`.
    Step { name: String },
    /// Verdicts the report will rest on are settled (an axis's two sides, the minimal failing
    /// configuration): a caller that certifies them may start now, before the search ends.
    Settled { candidates: Vec<Candidate> },
}

/// How one axis is searched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AxisOptions {
    /// The memory ceiling in bytes; `None` when it is not known before a trial says (a fraction of
    /// a device not yet seen): the search then bisects without predictions.
    pub ceiling: Option<u64>,
    /// Probe where measured peaks predict the boundary before bisecting.
    pub predict: bool,
    /// Re-run the sides of the boundary this many times (0: no re-runs).
    pub confirm_runs: u32,
    /// Where a trial's verdict is a replay of its run, and its run repeats (the built-in model's
    /// trials: fixed shapes, one deterministic allocator): a side is re-run only where its need
    /// lies within this share of the ceiling, or the device and the replay disagreed; a side
    /// without a need (the device's own out-of-memory) is not re-run. `None`: both sides are
    /// re-run (a command whose runs may differ).
    pub rerun_within: Option<f64>,
    /// Probes inside the interval run without the ceiling, their verdict the replay's need against
    /// it, so that one past the boundary says its need too; the two sides found then run under the
    /// ceiling (the device's certificate). For trials whose needs are replayed: one that runs out
    /// of memory under the ceiling stops there without saying its need.
    pub probe_without_ceiling: bool,
}

/// Bytes as a note says them: `2.93 GiB`, or `3.1 MiB` below a GiB. (The report's own figures are
/// the caller's to format; this is for the search's notes alone.)
pub(crate) fn human_bytes(bytes: u64) -> String {
    let mib = bytes as f64 / f64::from(1 << 20);
    match mib >= 1024.0 {
        true => format!("{:.2} GiB", mib / 1024.0),
        false => format!("{mib:.1} MiB"),
    }
}
