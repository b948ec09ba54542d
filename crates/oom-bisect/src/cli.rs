//! What the user typed (`*Args`), parsed by clap. Resolved into settings in `settings.rs`, nowhere else.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "oom-bisect",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("OOM_BISECT_COMMIT"), ")"),
    about = "Find out, by measurement, why a DeepLabV3+ training run goes out of GPU memory",
    long_about = "Find out, by measurement, why a DeepLabV3+ training run goes out of GPU memory.\n\n\
        oom-bisect runs real training steps (forward, loss, backward, optimizer) of a burn DeepLabV3+ \
        under a memory ceiling, each in its own process, and binary-searches batch, input size, output \
        stride, depth and phase for the first configuration that runs out of memory; delta debugging \
        finds the modules that carry the memory. It prints the boundaries with measured peaks, the \
        fixes that fit, and the smallest configuration that still fails.",
    after_help = crate::exit_codes::help()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Diagnose a configuration: boundaries per axis, modules, fixes, minimal failing configuration
    Bisect(BisectArgs),
    /// Run one measured trial and print its per-stage memory
    Trial(TrialArgs),
    /// Print the module tree with ids, shapes, parameters and an activation estimate
    Inspect(InspectArgs),
    /// Time a diagnosis: trials per axis, per-trial overhead against the training steps
    Bench(BenchArgs),
    /// Print a shell completion script, e.g. `oom-bisect completions bash > ~/.local/share/bash-completion/completions/oom-bisect`
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The child side of a trial (internal: the binary re-runs itself)
    #[command(name = oom_trial::SUBCOMMAND, hide = true)]
    ChildTrial,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Cuda,
    Cpu,
}

/// The workload: a config file and overrides.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The workload, a TOML file (see configs/)
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: PathBuf,
    /// Override any config key, e.g. --set model.output_stride=16 (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

/// Seconds a trial may run before it is killed, unless `--trial-timeout` says otherwise.
pub const DEFAULT_TRIAL_TIMEOUT: u64 = 600;

/// The ceiling flags (one at most), shared by the commands that run trials and `inspect`.
#[derive(Debug, Args, Default)]
pub struct CeilingArgs {
    /// Ceiling as a size with its unit: 24GiB, 24000MiB, 24GB (decimal), 25769803776B; `none`
    /// removes the config's ceiling
    #[arg(
        long,
        value_name = "SIZE",
        group = "ceiling",
        allow_hyphen_values = true
    )]
    pub memory_limit: Option<String>,
    /// Ceiling as a fraction of the device (CUDA) or host (CPU) memory, e.g. 0.17
    #[arg(
        long,
        value_name = "F",
        group = "ceiling",
        allow_negative_numbers = true
    )]
    pub memory_fraction: Option<f64>,
    /// Ceiling of a known card, e.g. rtx3090; `--gpu help` lists them
    #[arg(long, value_name = "NAME", group = "ceiling", value_parser = CardName,
          hide_possible_values = true)]
    pub gpu: Option<String>,
}

/// The device and its ceiling.
#[derive(Debug, Args)]
pub struct DeviceArgs {
    /// Backend: cuda or cpu [default: cuda when a device is found, else cpu]
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    #[command(flatten)]
    pub ceiling: CeilingArgs,
    /// Seconds before a trial is killed and counted as a timeout (at most a week)
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_TRIAL_TIMEOUT,
          value_parser = clap::value_parser!(u64).range(1..=7 * 24 * 3600))]
    pub trial_timeout: u64,
    /// Your own training command as the trial, run through `sh -c`: `{config}` becomes the
    /// candidate's config file (also $OOM_BISECT_CONFIG), the ceiling is $OOM_BISECT_MEMORY_LIMIT
    /// (held on CUDA, only passed on on the CPU). Exit 0 fits; a framework's out-of-memory message
    /// is an OOM; anything else an error. See docs/guide.md, "Your own training command"
    #[arg(long, value_name = "COMMAND", conflicts_with = "estimate")]
    pub exec: Option<String>,
    /// With --exec: whether your command serves trials, one after another in one process per
    /// worker (it reads `{"config": PATH}` lines on its stdin and ends each trial with a
    /// `trial_done` line; guide, "Served trials"), so that a trial does not pay its start; re-runs
    /// that confirm a boundary still run in a command that served no trial before. `auto` finds
    /// out from the first trial (a command that ends it instead of answering runs one trial per
    /// process from then on); `--serve` alone is `on` [default: auto; `trial` runs its one trial
    /// in a process of its own unless `on`]
    #[arg(long, value_enum, value_name = "auto|on|off", num_args = 0..=1,
          default_missing_value = "on", requires = "exec")]
    pub serve: Option<ServeArg>,
    /// How a CUDA ceiling is held: `cap` (PyTorch's caching allocator refuses past it, as
    /// set_per_process_memory_fraction does; trials share a GPU, five 24 GiB ceilings on an H200),
    /// `ballast` (the rest of the card is filled; one trial per GPU) or, with --exec, `command`
    /// (your command holds $OOM_BISECT_MEMORY_LIMIT itself, e.g. PyTorch's
    /// set_per_process_memory_fraction; oom-bisect checks its processes' device memory and trials
    /// share a GPU) [default: cap for built-in trials under the pytorch memory model, else
    /// ballast]
    #[arg(long, value_enum, value_name = "HOW")]
    pub ceiling_by: Option<CeilingByArg>,
    /// What decides the built-in CUDA trials' verdicts: `certified` (the search runs on
    /// stream-only trials: each issues the training exactly as on the GPU, with nothing computed
    /// and no device memory taken, and its stream of requests is replayed through PyTorch's
    /// caching allocator; then the GPU runs, under the real ceiling, every verdict the report
    /// rests on), `stream` (stream-only trials alone; without a GPU, for the card --gpu names)
    /// or `device` (every trial on the GPU) [default: certified on a GPU; stream without one when
    /// --gpu names a card]
    #[arg(long, value_enum, value_name = "certified|stream|device", conflicts_with_all = ["exec", "estimate"])]
    pub evidence: Option<EvidenceArg>,
    /// Internal (tests): without a GPU, certify the stream-only trials' verdicts with the model's
    /// estimate, so that certificates and their disagreements run on any machine
    #[arg(long, hide = true)]
    pub certify_with_estimate: bool,
    /// Answer every trial from the model's memory estimate instead of training it: the whole
    /// diagnosis in seconds on any machine, under any ceiling, labelled as an estimate (its
    /// accuracy against an H200: docs/estimate.md). Confirm it on a GPU without this flag
    #[arg(long, alias = "fake-trials")]
    pub estimate: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EvidenceArg {
    Certified,
    Stream,
    Device,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CeilingByArg {
    Cap,
    Ballast,
    Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Step {
    /// The original once more without the ceiling: how much it needs.
    Need,
    Batch,
    Size,
    Stride,
    Depth,
    Phase,
    Fixes,
    Modules,
    Minimal,
}

#[derive(Debug, Args)]
pub struct BisectArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Which steps to run (comma-separated) [default: all]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub axes: Vec<Step>,
    /// Stop after this many trials; what is not measured is reported as inconclusive
    #[arg(long, value_name = "N")]
    pub max_trials: Option<usize>,
    /// Start no trial after this long (90s, 15m, 1h, or plain seconds); what is not measured by then
    /// is reported as inconclusive. The running trial finishes; the journal keeps everything.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_time: Option<std::time::Duration>,
    /// Re-run both sides of each boundary N more times before reporting it (a boundary whose
    /// re-runs disagree is reported as unstable)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        conflicts_with = "no_confirm",
        value_parser = clap::value_parser!(u32).range(0..=100)
    )]
    pub confirm_runs: u32,
    /// Do not re-run boundaries (same as --confirm-runs 0)
    #[arg(long)]
    pub no_confirm: bool,
    /// Do not use measured peaks to predict boundaries (plain bisection)
    #[arg(long)]
    pub no_predict: bool,
    /// Also write the report as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page with SVG plots to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Journal directory: every finished trial is appended there, and a re-run resumes from it
    #[arg(long, value_name = "DIR", default_value = "oom-bisect-out")]
    pub journal: PathBuf,
    /// Ignore the journal's earlier results (they are still appended to)
    #[arg(long)]
    pub fresh: bool,
    /// No progress on stderr
    #[arg(long, short)]
    pub quiet: bool,
    /// Developer detail in the report and progress: plain-bisection counts, the intervals the
    /// search narrows, 1-minimality (the JSON always has them)
    #[arg(long, short)]
    pub verbose: bool,
    /// CUDA devices to run trials on (one trial per device at a time; several with --ceiling-by
    /// cap): `all`, or indices of the visible devices (an inherited CUDA_VISIBLE_DEVICES is
    /// respected), e.g. 0,1 [default: all]
    #[arg(long, value_name = "LIST")]
    pub devices: Option<String>,
    /// Trials at once [default: one per device on CUDA (with --ceiling-by cap, as many ceilings as
    /// fit); on the CPU one per core as memory allows (1 for --estimate and --exec); with
    /// --launcher, $SLURM_NTASKS or 1]. The report does not depend on it.
    // A negative count reaches the range check, which names the flag, instead of reading as a flag.
    #[arg(long, value_name = "N", allow_hyphen_values = true,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub jobs: Option<u16>,
    /// Start every trial through this command, e.g. 'srun -N1 -n1 --gpus-per-task=1 --exact'
    /// inside a Slurm allocation (salloc/sbatch): trials then run as job steps on its nodes
    #[arg(long, value_name = "COMMAND")]
    pub launcher: Option<String>,
    /// Start trials the search may ask for (guesses) on idle workers [default: on where each trial
    /// has a device of its own or the command holds its ceiling; off where trials share a device].
    /// Timing only: the report does not depend on it
    #[arg(long, value_enum, value_name = "on|off", env = "OOM_BISECT_GUESSES")]
    pub guesses: Option<Toggle>,
    /// Keep a started spare of a served command for its re-runs [default: on where the command
    /// holds its own ceiling and its card has room]. Timing only
    #[arg(long, value_enum, value_name = "on|off", env = "OOM_BISECT_SPARES")]
    pub spares: Option<Toggle>,
}

/// `--serve`: whether the `--exec` command serves trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ServeArg {
    Auto,
    On,
    Off,
}

/// A timing switch given on the command line or in its environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Toggle {
    On,
    Off,
}

impl Toggle {
    pub fn on(self) -> bool {
        self == Toggle::On
    }
}

#[derive(Debug, Args)]
pub struct TrialArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Also write the trial report as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Internal: inject a fault into the child (tests)
    #[arg(long, hide = true, value_enum, value_name = "FAULT")]
    pub fault: Option<FaultArg>,
}

/// Deliberate faults for tests of the classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultArg {
    Sleep,
    BrokenModule,
    DeviceThreadOom,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The ceiling the estimate is compared with, instead of the config's
    #[command(flatten)]
    pub ceiling: CeilingArgs,
    /// Also write modules, stages and the estimate as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub bisect: BisectArgs,
}

/// `90`, `90s`, `15m`, `1h`, `1.5h`: a duration for `--max-time`.
pub fn parse_duration(v: &str) -> Result<std::time::Duration, String> {
    let t = v.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {v:?}: use s, m or h (e.g. 90s, 15m, 1h)"
            ))
        }
    };
    let n = num
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0);
    let Some(n) = n else {
        return Err(format!(
            "{v:?} is not a duration: use e.g. 90s, 15m, 1h or plain seconds"
        ));
    };
    // A week is more than any diagnosis needs, and far from where durations overflow.
    match std::time::Duration::try_from_secs_f64(n * scale) {
        Ok(d) if d.as_secs() <= 7 * 24 * 3600 => Ok(d),
        _ => Err(format!(
            "{v:?} is too long (allowed: at most 7 days, e.g. 168h)"
        )),
    }
}

/// `--gpu`'s values: any text (a name it does not know gets the error that lists the cards), with
/// the known cards as the values a shell completes.
#[derive(Clone)]
struct CardName;

impl clap::builder::TypedValueParser for CardName {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let cards = crate::gpus::GPUS
            .iter()
            .map(|c| clap::builder::PossibleValue::new(c.name).help(c.desc));
        Some(Box::new(cards.chain([
            clap::builder::PossibleValue::new("help").help("list the cards"),
        ])))
    }
}
