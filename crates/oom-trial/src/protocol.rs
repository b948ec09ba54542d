//! The parent/child protocol: the hidden subcommand, the request the parent writes to the child's
//! stdin, and the events the child prints on stdout, one JSON object a line as it goes, so that a
//! child that dies still leaves behind where it was. Both sides live in this crate.

use deeplab::Phase;
use serde::{Deserialize, Serialize};

/// The hidden subcommand that runs the child side of a trial: the binary re-runs itself with it.
pub const SUBCOMMAND: &str = "__trial";

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

/// How a CUDA trial's ceiling is enforced. Each refuses a page that would take the trial past the
/// ceiling, its CUDA context counted; `docs/performance.md` compares their verdicts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CeilingBy {
    /// Ballast fills the rest of the card, so the driver itself refuses at the ceiling: one trial
    /// per GPU.
    #[default]
    Ballast,
    /// The vendored allocator refuses a page when the device memory the process uses (NVML's
    /// per-process figure) plus the page would pass the ceiling: trials share a GPU.
    Cap,
    /// A `--exec` command holds the ceiling itself (`$OOM_BISECT_MEMORY_LIMIT`, its context
    /// counted; PyTorch: `set_per_process_memory_fraction`); the holder reads the device memory of
    /// the command's processes from NVML, and a run past the ceiling is an error: trials share a
    /// GPU.
    Command,
}

impl CeilingBy {
    pub fn name(self) -> &'static str {
        match self {
            CeilingBy::Ballast => "ballast",
            CeilingBy::Cap => "cap",
            CeilingBy::Command => "command",
        }
    }

    /// Whether trials under this ceiling share a GPU (nothing fills the rest of the card).
    pub fn shares_gpu(self) -> bool {
        self != CeilingBy::Ballast
    }
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

/// What answers a trial inside the child.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// Real training steps of the burn model on the backend.
    #[default]
    Train,
    /// The model's own memory estimate, no tensor computed: for testing the search and the whole
    /// trial path (spawn, protocol, classification) in seconds. Never the real thing.
    Estimate,
    /// The user's own command (`--exec`), run through `sh -c` with the candidate's config; the child
    /// holds the ceiling and watches it ([`crate::exec`]).
    Exec { command: String },
    /// The built-in training issued on a virtual `card` (`cubecl::cuda::oom_bisect`): every buffer
    /// asked for as on that card, no kernel compiled or run, no device memory taken. Its verdict
    /// and need are its stream's replay; the values it reads back were not computed.
    Stream { card: crate::card::CardProps },
    /// Not a trial: this host's card, read by a child of its own ([`crate::card_probe::probe`]).
    Card,
}

/// What the parent sends the child on stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The resolved config, as TOML.
    pub config: String,
    pub backend: BackendKind,
    pub ceiling: Ceiling,
    #[serde(default)]
    pub engine: Engine,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// The trial's time limit, set by the runner: a `--exec` holder stops its command at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    /// The switches the parent resolved (`switches.rs`): the child reads no switch from its
    /// environment.
    #[serde(default)]
    pub switches: crate::switches::Switches,
    /// How a CUDA ceiling is enforced (ignored on the CPU, where the allocator enforces it).
    #[serde(default)]
    pub ceiling_by: CeilingBy,
    /// A `--exec --serve` holder, set by the runner: it keeps its command for the next request
    /// on its stdin ([`crate::served`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub serve: bool,
    /// A served holder whose command has not yet shown that it serves (`--serve auto`): a command
    /// that ends its trial instead of answering it ran the trial as a process of its own would
    /// (its config is also on its command line), and its exit is the verdict.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub probe: bool,
    /// A re-run (confirmation): measured in a process of its own, never by a served command that
    /// has run other trials before, so that a confirmed boundary holds for a fresh start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fresh: bool,
    /// A served holder started ahead of its first trial (a worker's spare, [`crate::served`]):
    /// it starts the command and waits; its first trial is the next request on its stdin, and
    /// this request's config is only the one named on the command line.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ahead: bool,
}

impl Request {
    /// The request of the card probe ([`Engine::Card`]).
    pub fn probe() -> Request {
        Request {
            config: String::new(),
            backend: BackendKind::Cuda,
            ceiling: Ceiling::None,
            engine: Engine::Card,
            fault: None,
            timeout_seconds: None,
            switches: Default::default(),
            ceiling_by: Default::default(),
            serve: false,
            probe: false,
            fresh: false,
            ahead: false,
        }
    }
}

impl Ceiling {
    /// The ceiling in bytes on a device (or host) of `total` bytes.
    pub fn bytes(self, total: u64) -> u64 {
        match self {
            Ceiling::None => total,
            Ceiling::Bytes(b) => b,
            Ceiling::Fraction(f) => (total as f64 * f) as u64,
        }
    }
}

/// Where in a step a reading was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    pub step: usize,
    pub phase: Phase,
    pub stage: Stage,
}

/// Where a reading was taken: before the first step, after a stage of the forward pass, after the
/// loss, backward or the optimizer step. Written as its name (`setup`, a stage id, `loss`,
/// `backward`, `optimizer`), so that a command under `--exec` can name its own stages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Stage {
    /// The model built, before the first forward pass.
    Setup,
    /// A stage of the forward pass: an id of `deeplab::ids`, or a command's own name.
    Module(String),
    Loss,
    Backward,
    Optimizer,
}

impl Stage {
    pub fn name(&self) -> &str {
        match self {
            Stage::Setup => "setup",
            Stage::Module(id) => id,
            Stage::Loss => "loss",
            Stage::Backward => "backward",
            Stage::Optimizer => "optimizer",
        }
    }

    /// The phase that runs after this reading: the loss ends the forward pass, backward ends with
    /// its reading and the optimizer step follows; elsewhere `phase`, the reading's own.
    pub fn phase_after(&self, phase: Phase) -> Phase {
        match self {
            Stage::Loss => Phase::Backward,
            Stage::Backward => Phase::Step,
            _ => phase,
        }
    }
}

impl From<String> for Stage {
    fn from(name: String) -> Stage {
        match name.as_str() {
            "setup" => Stage::Setup,
            "loss" => Stage::Loss,
            "backward" => Stage::Backward,
            "optimizer" => Stage::Optimizer,
            _ => Stage::Module(name),
        }
    }
}

impl From<&str> for Stage {
    fn from(name: &str) -> Stage {
        Stage::from(name.to_string())
    }
}

impl From<Stage> for String {
    fn from(s: Stage) -> String {
        s.name().to_string()
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a child ran: its host, and the Slurm job step when a launcher started it as one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub host: String,
    /// `JOB.STEP`, from `SLURM_JOB_ID` and `SLURM_STEP_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_step: Option<String>,
    /// `CUDA_VISIBLE_DEVICES` as the child saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
}

impl Place {
    /// This process's place, from its host name and environment.
    pub fn here() -> Place {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let slurm_step = match (env("SLURM_JOB_ID"), env("SLURM_STEP_ID")) {
            (Some(j), Some(s)) => Some(format!("{j}.{s}")),
            _ => None,
        };
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most `len` bytes into the buffer it is given.
        let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        Place {
            host: if ok {
                String::from_utf8_lossy(&buf[..end]).into_owned()
            } else {
                String::new()
            },
            slurm_step,
            cuda_visible_devices: env("CUDA_VISIBLE_DEVICES"),
        }
    }
}

/// One line of the child's stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ChildEvent {
    /// Where the child runs; its first line.
    Place(Place),
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
        /// Requests and releases noted in the trial's stream so far: where in the stream this
        /// reading stands ([`Replayed::fails_at`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        events: Option<usize>,
    },
    /// A training step finished.
    Step {
        step: usize,
        seconds: f64,
        in_use_bytes: u64,
        /// NaN or infinite when the step diverged (f16 overflows): still a measured step.
        #[serde(with = "any_float")]
        loss: f64,
    },
    /// A panic on any thread.
    Panic { thread: String, message: String },
    /// `--exec`: the user's command ended; the holder's last line.
    Exited(Exited),
    /// The trial's stream, replayed (after its steps, before [`ChildEvent::Done`]).
    Replayed(Replayed),
    /// All steps ran and the check value was read back.
    Done {
        #[serde(with = "any_float")]
        check: f64,
        peak_bytes: u64,
        peak_in_use_bytes: u64,
    },
}

/// The trial's stream of buffer requests and releases, replayed through PyTorch's caching
/// allocator (`pytorch-allocator`): what the trial needs as PyTorch would hold those buffers, and
/// whether it fits under its ceiling. Bytes "before the stream" are what the device held before
/// the first request was noted: the CUDA context, or on the CPU the process's own heap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replayed {
    /// Requests and releases replayed.
    pub events: usize,
    /// The smallest ceiling the stream fits under: the smallest cap on reserved bytes (a whole
    /// number of 2 MiB granules) plus the bytes before the stream.
    pub need_bytes: u64,
    /// Under that cap, the most bytes allocated at once: the rest of the need is held in segments
    /// that earlier requests split, which the allocator cannot give back.
    pub allocated_bytes: u64,
    /// Under that cap, how often the allocator released its cached segments to retry.
    pub retries: u64,
    /// Without a cap, the most bytes reserved at once, plus the bytes before the stream.
    pub reserved_bytes: u64,
    /// The bytes held before the stream (on CUDA the device's context): the part of every need
    /// that no setting moves.
    #[serde(default)]
    pub before_bytes: u64,
    /// Under the trial's own ceiling: the request that cannot be served (its place in the stream
    /// and its size), or `None` where the stream fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fails_at: Option<FailedRequest>,
    /// Under the trial's own ceiling, the allocator's retries.
    pub retries_at_ceiling: u64,
    /// Whether the device itself ran under the ceiling the replay judges (a CUDA trial under its
    /// ceiling): where the device fits and the replay does not, the device's verdict stands and
    /// the report says they disagree.
    pub device_held_ceiling: bool,
    /// Device streams that made requests (cubecl makes one per thread); several are replayed as
    /// one, which PyTorch would not do.
    #[serde(default = "one")]
    pub streams: u32,
    /// Where the stream comes from, where it is not the built-in trial's own pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The smallest ceiling the same stream fits under with `PYTORCH_CUDA_ALLOC_CONF=
    /// expandable_segments:True` (replayed, not run), plus the bytes before the stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expandable_need_bytes: Option<u64>,
    /// The stream was replayed with expandable segments throughout (a `--exec` command that set
    /// them): every figure above is under them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expandable_segments: bool,
    /// Convolution workspace requests in the stream (PyTorch's cuDNN path, asked of this
    /// machine's cuDNN: `crate::cudnn`); 0 where none was asked (no cuDNN, the CPU, `--exec`).
    #[serde(default)]
    pub workspaces: u64,
}

fn one() -> u32 {
    1
}

/// The request PyTorch's allocator cannot serve under a ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedRequest {
    /// Its place in the stream (events before it).
    pub index: usize,
    pub bytes: u64,
    /// Bytes allocated when it was asked.
    pub allocated_bytes: u64,
}

/// How a `--exec` command ended, and what the holder measured while it ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exited {
    /// The exit code, or the signal that killed the shell. A shell's 128 + n is an exit code: its
    /// command may have been killed, or may have exited so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The kernel's OOM killer killed one of the command's own processes (`exec::contain`).
    #[serde(default)]
    pub oom_killer: bool,
    /// How that was checked; `None` where it could not be (no cgroup of its own, no kernel log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kill_check: Option<String>,
    /// The holder stopped the command at the time limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// A served command broke the protocol (answered no request, answered twice, or ended
    /// without answering): how. Never a fit, never an out-of-memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broke: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// Where the peak comes from: the command's own figure, device memory sampled, or the largest
    /// resident set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_source: Option<String>,
    /// Under `--ceiling-by command`: why the holder cannot vouch that the command kept to its
    /// ceiling (it went past it, or NVML never listed its processes). Such a run measured nothing
    /// a card of that size allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unheld: Option<String>,
    /// A served command (`--serve`) finished this trial and lives on for the next: `code` is 0
    /// where it said the trial fitted, 1 where it said it failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub served: bool,
    /// A served command's output since this trial began, its failure message last: what is
    /// classified, instead of the holder's stderr, which holds every trial's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The failure its output tells, read stream by stream: the last failure line of its stderr
    /// (tracebacks, panics, `terminate`), else of its stdout. A line a program prints to stdout
    /// (a caught out-of-memory it logged) arrives when its buffer is flushed, after a traceback
    /// printed later; by stream it cannot take the traceback's place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A float that may be NaN or infinite: JSON has no such numbers (serde_json writes `null`, which
/// then fails to read back as a float and cost a measured trial its result), so they travel as
/// `null` and come back as NaN.
pub(crate) mod any_float {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        match v.is_finite() {
            true => s.serialize_f64(*v),
            false => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

#[cfg(test)]
mod float_tests {
    use super::ChildEvent;

    /// A diverged step (NaN loss) is still a step: its event reads back.
    #[test]
    fn a_nan_loss_travels() {
        let e = ChildEvent::Step {
            step: 1,
            seconds: 0.5,
            in_use_bytes: 7,
            loss: f64::NAN,
        };
        let line = serde_json::to_string(&e).unwrap();
        match serde_json::from_str::<ChildEvent>(&line).unwrap() {
            ChildEvent::Step { loss, .. } => assert!(loss.is_nan()),
            other => panic!("{other:?}"),
        }
    }
}
