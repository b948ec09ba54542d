//! The parent/child protocol and the trial report. The child prints one JSON event per line on stdout
//! as it goes, so that a child that dies still leaves behind where it was; the parent assembles the
//! report from those events, the exit status and stderr, and classifies the outcome exactly once.

use crate::classify::{classify_message, MessageKind};
use deeplab::Phase;
use serde::{Deserialize, Serialize};

/// Exit codes of the `__trial` child, in `git bisect run` style. The parent never trusts them alone.
pub mod exit {
    /// The configuration fits.
    pub const FITS: i32 = 0;
    /// The configuration ran out of memory.
    pub const OOM: i32 = 3;
    /// Anything else went wrong: the trial is inconclusive (`git bisect skip`).
    pub const INCONCLUSIVE: i32 = 125;
}

/// Which backend a trial runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Cuda,
    Cpu,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cuda => "cuda",
            BackendKind::Cpu => "cpu",
        }
    }
}

/// The memory ceiling a trial runs under.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ceiling {
    /// No ceiling: the whole device (or host).
    None,
    /// A card of this many bytes.
    Bytes(u64),
    /// This fraction of the card.
    Fraction(f64),
}

/// Deliberate faults for tests of the classification (hidden; never set by a user).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// Sleep past any limit, with a grandchild process that must die too.
    Sleep,
    /// A module that panics in the forward pass on the main thread.
    BrokenModule,
    /// An out-of-memory panic on a device-runner thread while the main thread carries on, as
    /// burn-cuda 0.21 does.
    DeviceThreadOom,
}

/// What the parent sends the child on stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The resolved config, as TOML.
    pub config: String,
    pub backend: BackendKind,
    pub ceiling: Ceiling,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
}

/// Where in a step a reading was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    pub step: usize,
    pub phase: Phase,
    /// A forward stage id, or `loss`, `backward`, `optimizer`, `setup`.
    pub stage: String,
}

/// One line of the child's stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ChildEvent {
    /// The device is ready and the ceiling in force.
    Start {
        backend: BackendKind,
        device: String,
        /// The ceiling the trial really runs under, in bytes.
        ceiling_bytes: u64,
        /// Memory the device (context, runtime) held before the model existed.
        context_bytes: u64,
        total_bytes: u64,
        /// Seconds since the child started (process start, CUDA context, ceiling).
        #[serde(default)]
        seconds: f64,
    },
    /// The model, optimizer and batch exist; nothing has run yet.
    Built {
        in_use_bytes: u64,
        params: usize,
        #[serde(default)]
        seconds: f64,
    },
    /// A measuring point was reached.
    Mark {
        #[serde(flatten)]
        at: Location,
        in_use_bytes: u64,
        device_bytes: u64,
        /// Seconds since the child started.
        #[serde(default)]
        seconds: f64,
    },
    /// A training step finished.
    Step {
        step: usize,
        seconds: f64,
        in_use_bytes: u64,
        loss: f32,
    },
    /// A panic on any thread.
    Panic { thread: String, message: String },
    /// All steps ran and the check value was read back.
    Done {
        check: f64,
        peak_bytes: u64,
        peak_in_use_bytes: u64,
    },
}

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
    pub loss: f32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomInfo {
    /// Where the last reading before the failure was taken: the failure happened after it.
    pub phase: Option<Phase>,
    pub stage: Option<String>,
    pub step: Option<usize>,
    /// The allocation that failed, when the message says.
    pub bytes: Option<u64>,
    pub message: String,
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
}

/// Assembles and classifies a trial from what the child left behind.
pub fn assemble(
    events: &[ChildEvent],
    exit: ChildExit,
    stderr: &str,
    wall_seconds: f64,
) -> TrialReport {
    let mut r = TrialReport {
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
        exit: exit.clone(),
        wall_seconds,
        ready_seconds: None,
        built_seconds: None,
    };
    let mut last_at: Option<Location> = None;
    let mut panics: Vec<(String, String)> = vec![];
    let mut done: Option<f64> = None;
    for e in events {
        match e {
            ChildEvent::Start {
                backend,
                device,
                ceiling_bytes,
                context_bytes,
                seconds,
                ..
            } => {
                r.ready_seconds = Some(*seconds);
                r.backend = Some(*backend);
                r.device = Some(device.clone());
                r.ceiling_bytes = Some(*ceiling_bytes);
                r.context_bytes = Some(*context_bytes);
            }
            ChildEvent::Built {
                in_use_bytes,
                params,
                seconds,
            } => {
                r.built_seconds = Some(*seconds);
                r.base_bytes = Some(*in_use_bytes);
                r.params = Some(*params);
                last_at = Some(Location {
                    step: 0,
                    phase: Phase::Forward,
                    stage: "setup".into(),
                });
            }
            ChildEvent::Mark {
                at,
                in_use_bytes,
                device_bytes,
                seconds,
            } => {
                r.stages.push(StageMemory {
                    step: at.step,
                    phase: at.phase,
                    name: at.stage.clone(),
                    in_use_bytes: *in_use_bytes,
                    device_bytes: *device_bytes,
                    seconds: *seconds,
                });
                r.peak_in_use_bytes = r.peak_in_use_bytes.max(Some(*in_use_bytes));
                last_at = Some(at.clone());
            }
            ChildEvent::Step {
                step,
                seconds,
                in_use_bytes,
                loss,
            } => r.steps.push(StepRecord {
                step: *step,
                seconds: *seconds,
                in_use_after_bytes: *in_use_bytes,
                loss: *loss,
            }),
            ChildEvent::Panic { thread, message } => panics.push((thread.clone(), message.clone())),
            ChildEvent::Done {
                check,
                peak_bytes,
                peak_in_use_bytes,
            } => {
                done = Some(*check);
                r.peak_bytes = Some(*peak_bytes);
                r.peak_in_use_bytes = r.peak_in_use_bytes.max(Some(*peak_in_use_bytes));
            }
        }
    }
    if r.peak_bytes.is_none() {
        // A trial that did not finish still says how far memory got.
        r.peak_bytes = r.stages.iter().map(|s| s.device_bytes).max();
    }
    // What does not scale with the batch: parameters, gradients' buffers and optimizer state, read
    // after the last step, when the activations are gone.
    if let Some(last) = r.steps.last() {
        r.base_bytes = Some(last.in_use_after_bytes);
    }
    if r.steps.len() >= 3 {
        let second = r.steps[1].in_use_after_bytes as i64;
        let last = r.steps[r.steps.len() - 1].in_use_after_bytes as i64;
        r.leak_bytes_per_step = Some((last - second) / (r.steps.len() as i64 - 2));
    }

    let oom_at = |bytes: Option<u64>, message: String, last_at: &Option<Location>| OomInfo {
        phase: last_at.as_ref().map(|l| l.phase),
        stage: last_at.as_ref().map(|l| l.stage.clone()),
        step: last_at.as_ref().map(|l| l.step),
        bytes,
        message,
    };

    // 1. An allocation failure anywhere (a panic on any thread, or the allocator's refusal) is an OOM.
    let allocation_failure = panics
        .iter()
        .map(|(t, m)| (format!("panic on thread '{t}': {m}"), classify_message(m)))
        .chain(stderr.lines().map(|l| (l.to_string(), classify_message(l))))
        .find(|(_, k)| matches!(k, MessageKind::AllocationFailure { .. }));
    if let Some((message, MessageKind::AllocationFailure { bytes })) = allocation_failure {
        r.outcome = TrialOutcome::Oom;
        r.oom = Some(oom_at(bytes, message, &last_at));
        return r;
    }
    // 2. Any other panic: the trial did not fit, and it is not an OOM either.
    if let Some((thread, message)) = panics.first() {
        r.outcome = TrialOutcome::Error;
        r.error = Some(format!("panic on thread '{thread}': {message}"));
        return r;
    }
    match exit {
        ChildExit::TimedOut => {
            r.outcome = TrialOutcome::Timeout;
            r.error = Some(format!(
                "killed after the time limit ({wall_seconds:.0} s), last at {}",
                last_at
                    .map(|l| format!("step {} {}", l.step, l.stage))
                    .unwrap_or_else(|| "start".into())
            ));
        }
        ChildExit::NotStarted(why) => {
            r.outcome = TrialOutcome::Error;
            r.error = Some(format!("the trial process could not start: {why}"));
        }
        ChildExit::Signal(sig) => {
            r.outcome = TrialOutcome::Error;
            r.error = Some(format!(
                "the trial process was killed by signal {sig}{}",
                tail(stderr)
            ));
        }
        ChildExit::Code(code) => match done {
            Some(check) if code == exit::FITS && check.is_finite() => {
                r.outcome = TrialOutcome::Fits
            }
            Some(check) if code == exit::FITS => {
                r.outcome = TrialOutcome::Error;
                r.error = Some(format!("the step read back a non-finite value ({check})"));
            }
            _ => {
                r.outcome = TrialOutcome::Error;
                r.error = Some(format!(
                    "the trial process exited with code {code} without a result{}",
                    tail(stderr)
                ));
            }
        },
    }
    r
}

fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let from = lines.len().saturating_sub(5);
    format!(": {}", lines[from..].join(" | "))
}

/// Parses the child's stdout: one event per line; other lines are ignored (a library may print).
pub fn parse_events(stdout: &str) -> Vec<ChildEvent> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<ChildEvent>(l.trim()).ok())
        .collect()
}
