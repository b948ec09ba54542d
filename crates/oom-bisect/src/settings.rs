//! Settings: what the program runs on, resolved from the arguments and the config file in exactly one
//! place and passed down. Flags override the file; every problem becomes a `UserError` with its exit
//! code. Nothing here prints: what a user should hear is returned as notes.

use crate::cli::{BackendArg, BisectArgs, CeilingArgs, CeilingByArg, ConfigArgs, DeviceArgs, Step};
use crate::dispatch::{Dispatch, Placement};
use crate::exit_codes::{self as code, user};
use crate::gpus;
use anyhow::Result;
use deeplab::config::MemoryModel;
use deeplab::{Architecture, Config};
use oom_search::{Budget, SearchOptions};
use oom_trial::{fmt_bytes, parse_size, BackendKind, Ceiling, CeilingBy, Engine, Switches};
use std::path::PathBuf;
use std::time::Duration;

/// The largest config file read: far above any real one (a long `identity` list is a few KiB).
const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// A workload read from its file, overrides applied and validated.
#[derive(Debug, Clone)]
pub struct Workload {
    pub path: PathBuf,
    pub config: Config,
}

impl Workload {
    pub fn load(args: &ConfigArgs) -> Result<Workload> {
        let path = args.config.clone();
        let unreadable = |e: String| {
            user(
                code::CONFIG_UNREADABLE,
                format!("cannot read config {}: {e}", path.display()),
            )
        };
        let bytes = crate::files::read_bounded(&path, MAX_CONFIG_BYTES).map_err(unreadable)?;
        let text = String::from_utf8(bytes).map_err(|_| unreadable("not UTF-8 text".into()))?;
        let invalid = |e: deeplab::ConfigError, with: &str| {
            user(
                code::CONFIG_INVALID,
                format!("{}{with}: {e}", path.display()),
            )
        };
        let base = Config::from_toml_str(&text).map_err(|e| invalid(e, ""))?;
        let config = base
            .with_overrides(&args.sets)
            .map_err(|e| invalid(e, " (with --set)"))?;
        // Module ids and stages depend on the architecture; check them now, not in the first trial.
        Architecture::new(&config).map_err(|e| invalid(e, ""))?;
        Ok(Workload { path, config })
    }

    /// The file's stem, for output names.
    pub fn stem(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "config".into())
    }
}

/// The device side of a run.
#[derive(Debug, Clone)]
pub struct DeviceSettings {
    pub backend: BackendKind,
    pub ceiling: Ceiling,
    /// The ceiling in bytes where it is known before a trial runs (a size, or a fraction of a known
    /// device); trials report the effective one.
    pub ceiling_bytes: Option<u64>,
    /// How the ceiling was given, for the report and the "Reproduce with" line.
    pub ceiling_arg: Option<String>,
    pub device_name: Option<String>,
    pub trial_timeout: Duration,
    /// What answers trials: training, or the estimate (`--fake-trials`, for tests).
    pub engine: Engine,
    /// Environment switches that change kernels or memory.
    pub switches: Switches,
    /// How a CUDA ceiling is held (`--ceiling-by`); it decides how many trials share a GPU.
    pub ceiling_by: CeilingBy,
    /// The `--exec` command serves trials in one process per worker (`--serve`).
    pub serve: bool,
    /// What the user should hear about how this was resolved (a fallback to the CPU, no ceiling).
    pub notes: Vec<String>,
}

impl DeviceSettings {
    pub fn resolve(args: &DeviceArgs, config: &Config) -> Result<DeviceSettings> {
        let engine = match (&args.exec, args.estimate) {
            (Some(command), _) => Engine::Exec {
                command: check_exec(command)?,
            },
            (None, true) => Engine::Estimate,
            (None, false) => Engine::Train,
        };
        let switches = Switches::from_config(&config.device).map_err(|e| user(code::USAGE, e))?;
        let mut notes = vec![];
        let (backend, device_name) = resolve_backend(args, config, &engine, &mut notes)?;
        let (ceiling, given) = choose_ceiling(&args.ceiling, config)?;
        if let (Ceiling::Bytes(b), Some((CeilingKind::Limit, arg))) = (ceiling, &given) {
            notes.extend(gpus::decimal_warning(arg, b));
        }
        let card = matches!(given, Some((CeilingKind::Gpu, _)));
        let ceiling_arg = given.map(|(_, arg)| arg);
        let (ceiling, ceiling_bytes) = check_ceiling(
            ceiling,
            card,
            backend,
            &engine,
            device_name.as_deref(),
            &mut notes,
        )?;
        if backend == BackendKind::Cpu && ceiling == Ceiling::None {
            notes.push(
                "no memory ceiling given; the CPU backend will use all host memory \
                 (give one with --memory-limit, e.g. --memory-limit 2GiB)"
                    .into(),
            );
        }
        let ceiling_by = ceiling_by(args.ceiling_by, &engine, config.device.memory_model())?;
        Ok(DeviceSettings {
            backend,
            ceiling,
            ceiling_bytes,
            ceiling_arg,
            device_name,
            trial_timeout: Duration::from_secs(args.trial_timeout.max(1)),
            ceiling_by,
            serve: args.serve,
            engine,
            switches,
            notes,
        })
    }

    /// The ceiling of a trial that measures what a configuration needs: the whole card on CUDA; on
    /// the CPU nine tenths of the memory now available, so that the measurement cannot push the
    /// host into swap or its OOM killer.
    /// The estimate (`--fake-trials`) allocates nothing, so no machine's memory limits it: its
    /// answer must not depend on what the host has free.
    pub fn unbounded_ceiling(&self) -> Ceiling {
        match (&self.engine, self.backend) {
            (Engine::Estimate, _) => Ceiling::Bytes(u64::MAX / 4),
            (_, BackendKind::Cuda) => Ceiling::None,
            (_, BackendKind::Cpu) => Ceiling::Bytes(oom_trial::host_available() / 10 * 9),
        }
    }

    /// The flags that reproduce this device setting on the command line.
    pub fn reproduce_flags(&self) -> String {
        // The estimate runs no backend: naming one beside a card's ceiling would only puzzle.
        let mut parts = match self.engine {
            Engine::Estimate => vec![],
            _ => vec![format!("--backend {}", self.backend.name())],
        };
        parts.extend(self.ceiling_arg.clone());
        if self.trial_timeout != Duration::from_secs(crate::cli::DEFAULT_TRIAL_TIMEOUT) {
            parts.push(format!("--trial-timeout {}", self.trial_timeout.as_secs()));
        }
        if self.backend == BackendKind::Cuda && self.ceiling_by.shares_gpu() {
            parts.push(format!("--ceiling-by {}", self.ceiling_by.name()));
        }
        match &self.engine {
            Engine::Estimate => parts.push("--estimate".into()),
            Engine::Exec { command } => {
                parts.push(format!("--exec {}", crate::output::shell_word(command)))
            }
            Engine::Train => {}
        }
        if self.serve {
            parts.push("--serve".into());
        }
        parts.join(" ")
    }

    /// The user's command when it answers the trials (`--exec`).
    pub fn exec_command(&self) -> Option<String> {
        match &self.engine {
            Engine::Exec { command } => Some(command.clone()),
            _ => None,
        }
    }

    /// The backend as reports show it.
    pub fn label(&self) -> String {
        match (&self.engine, self.backend, &self.device_name) {
            (Engine::Estimate, _, _) => oom_trial::estimated::DEVICE.into(),
            (Engine::Exec { .. }, BackendKind::Cpu, _) => "cpu (your command)".into(),
            (Engine::Exec { .. }, BackendKind::Cuda, Some(n)) => {
                format!("cuda ({n}, your command)")
            }
            (_, BackendKind::Cuda, Some(n)) => format!("cuda ({n})"),
            (_, BackendKind::Cpu, _) => "cpu (burn-flex)".into(),
            (_, b, None) => b.name().into(),
        }
    }
}

/// A `--exec` command: one that is not empty. (It need not name `{config}`: a script may read
/// `$OOM_BISECT_CONFIG` itself.)
fn check_exec(command: &str) -> Result<String> {
    if command.trim().is_empty() {
        return Err(user(code::USAGE, "--exec: the command is empty"));
    }
    // Where its config files will go, checked before the first trial rather than failing each.
    oom_trial::exec::temp_dir().map_err(|e| user(code::UNWRITABLE, format!("--exec: {e:#}")))?;
    Ok(command.to_string())
}

/// The backend: the flag, else the file, else CUDA when a device answers (else the CPU, saying so).
fn resolve_backend(
    args: &DeviceArgs,
    config: &Config,
    engine: &Engine,
    notes: &mut Vec<String>,
) -> Result<(BackendKind, Option<String>)> {
    let wanted = match (args.backend, config.device.backend.as_deref()) {
        (Some(BackendArg::Cuda), _) | (None, Some("cuda")) => Some(BackendKind::Cuda),
        (Some(BackendArg::Cpu), _) | (None, Some("cpu")) => Some(BackendKind::Cpu),
        _ => None,
    };
    if *engine == Engine::Estimate {
        // The estimate runs nowhere: no device to find.
        return Ok((wanted.unwrap_or(BackendKind::Cpu), None));
    }
    match (wanted, oom_trial::cuda_device()) {
        (Some(BackendKind::Cpu), _) => Ok((BackendKind::Cpu, None)),
        (_, Ok(name)) => Ok((BackendKind::Cuda, Some(name))),
        (Some(BackendKind::Cuda), Err(e)) => Err(user(
            code::NO_DEVICE,
            format!("no CUDA device available ({e}); run on the CPU backend with --backend cpu"),
        )),
        (None, Err(e)) => {
            notes.push(format!("no CUDA device ({e}); using the CPU backend"));
            Ok((BackendKind::Cpu, None))
        }
    }
}

/// The three ways to give a ceiling, with their flag and their config key.
#[derive(Clone, Copy)]
enum CeilingKind {
    Limit,
    Fraction,
    Gpu,
}

impl CeilingKind {
    const ALL: [CeilingKind; 3] = [CeilingKind::Limit, CeilingKind::Fraction, CeilingKind::Gpu];

    fn flag(self) -> &'static str {
        match self {
            CeilingKind::Limit => "--memory-limit",
            CeilingKind::Fraction => "--memory-fraction",
            CeilingKind::Gpu => "--gpu",
        }
    }

    fn key(self) -> &'static str {
        match self {
            CeilingKind::Limit => "device.memory_limit",
            CeilingKind::Fraction => "device.memory_fraction",
            CeilingKind::Gpu => "device.gpu",
        }
    }

    /// What the flags and the file say for this kind.
    fn given(self, args: &CeilingArgs, file: &deeplab::DeviceConfig) -> [Option<String>; 2] {
        match self {
            CeilingKind::Limit => [args.memory_limit.clone(), file.memory_limit.clone()],
            CeilingKind::Fraction => [
                args.memory_fraction.map(|f| f.to_string()),
                file.memory_fraction.map(|f| f.to_string()),
            ],
            CeilingKind::Gpu => [args.gpu.clone(), file.gpu.clone()],
        }
    }
}

/// Checks the config's `[device]` ceiling keys as a trial would (without looking for a device), so
/// that `inspect` refuses what `trial` refuses; the ceiling they give, or the one `memory_limit`
/// or `gpu` (inspect's flags) give instead, with the notes a trial would print about it.
pub fn check_device_section(
    config: &Config,
    flags: &CeilingArgs,
) -> Result<(Ceiling, Vec<String>)> {
    let (ceiling, given) = choose_ceiling(flags, config)?;
    let notes = match (ceiling, &given) {
        (Ceiling::Bytes(b), Some((CeilingKind::Limit, arg))) => {
            gpus::decimal_warning(arg, b).into_iter().collect()
        }
        _ => vec![],
    };
    Ok((ceiling, notes))
}

/// The ceiling the user asked for: a flag (they exclude each other) over the file's one key; how
/// it was given, and the flag that gives it again.
fn choose_ceiling(
    args: &CeilingArgs,
    config: &Config,
) -> Result<(Ceiling, Option<(CeilingKind, String)>)> {
    let given = |from: usize| -> Vec<(CeilingKind, String, &'static str)> {
        CeilingKind::ALL
            .into_iter()
            .filter_map(|k| {
                let name = if from == 0 { k.flag() } else { k.key() };
                k.given(args, &config.device)[from]
                    .clone()
                    .map(|v| (k, v, name))
            })
            .collect()
    };
    let (flags, file) = (given(0), given(1));
    if flags.is_empty() && file.len() > 1 {
        let keys: Vec<&str> = file.iter().map(|s| s.2).collect();
        return Err(user(
            code::CONFIG_INVALID,
            format!(
                "the config sets {} at once; set only one ceiling",
                keys.join(" and ")
            ),
        ));
    }
    match flags.into_iter().next().or(file.into_iter().next()) {
        None => Ok((Ceiling::None, None)),
        Some((kind, value, name)) => {
            let c = parse_ceiling(kind, &value, name)?;
            let word = crate::output::shell_word(&value);
            Ok((c, Some((kind, format!("{} {word}", kind.flag())))))
        }
    }
}

/// The smallest and largest ceilings taken: below a MiB nothing trains, and no device has a PiB.
const MIN_CEILING: u64 = 1 << 20;
const MAX_CEILING: u64 = 1 << 50;
/// The smallest share of a device taken as a ceiling.
const MIN_FRACTION: f64 = 1e-4;

/// One ceiling parsed; errors name where it came from (`name`: the flag or the config key).
fn parse_ceiling(kind: CeilingKind, value: &str, name: &str) -> Result<Ceiling> {
    let bad = |m: String| user(code::BAD_CEILING, format!("{name}: {m}"));
    let shown = deeplab::config::cut_line(value, 80);
    match kind {
        // `none` removes a ceiling the config sets (the flag wins over the file).
        CeilingKind::Limit if value.trim().eq_ignore_ascii_case("none") => Ok(Ceiling::None),
        CeilingKind::Limit if value.trim().chars().all(|c| c.is_ascii_digit() || c == '.') => {
            Err(bad(format!(
                "`{shown}` has no unit: write {0}GiB, {0}MiB or {0}GB (decimal), or {0}B for \
                 bytes",
                shown.trim()
            )))
        }
        CeilingKind::Limit => {
            let size = parse_size(value).map_err(|m| bad(m.replace(value, &shown)))?;
            match size {
                MIN_CEILING..=MAX_CEILING => Ok(Ceiling::Bytes(size)),
                _ => Err(bad(format!(
                    "{shown} is outside what a device can be ({} to {})",
                    fmt_bytes(MIN_CEILING),
                    fmt_bytes(MAX_CEILING)
                ))),
            }
        }
        CeilingKind::Fraction => match value.parse::<f64>() {
            Ok(f) if (MIN_FRACTION..=1.0).contains(&f) => Ok(Ceiling::Fraction(f)),
            _ => Err(bad(format!("{shown} is not in [{MIN_FRACTION}, 1]"))),
        },
        CeilingKind::Gpu => match gpus::lookup(value) {
            Some((b, _)) => Ok(Ceiling::Bytes(b)),
            None => Err(bad(format!("unknown card `{shown}`\n{}", gpus::table()))),
        },
    }
}

/// A card's memory as sold is a little more than what CUDA counts of it (an H200's "141 GB" is
/// 139.8 GiB to CUDA): a `--gpu` card up to this share larger than the device is the device itself.
const SAME_CARD_MARGIN: u64 = 50;

/// The ceiling, and its bytes where they can be known now, refusing one larger than the device or
/// host. A `--gpu` card (`card`) a little larger than the device is taken as the whole device.
fn check_ceiling(
    ceiling: Ceiling,
    card: bool,
    backend: BackendKind,
    engine: &Engine,
    device_name: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<(Ceiling, Option<u64>)> {
    let as_given = |ceiling: Ceiling| {
        let bytes = match ceiling {
            Ceiling::Bytes(b) => Some(b),
            _ => None,
        };
        Ok((ceiling, bytes))
    };
    let (total, what) = match (engine, backend) {
        (Engine::Estimate, _) => return as_given(ceiling),
        // A command on the CPU gets the ceiling to honour ($OOM_BISECT_MEMORY_LIMIT); nothing here
        // enforces it, so it may be any size, a GPU's on a smaller host included.
        (Engine::Exec { .. }, BackendKind::Cpu) => {
            notes.push(
                "--exec on the CPU: the ceiling is passed on to your command \
                 ($OOM_BISECT_MEMORY_LIMIT), not enforced"
                    .to_string(),
            );
            return as_given(ceiling);
        }
        (_, BackendKind::Cuda) => {
            let total = oom_trial::cuda_total_bytes().map_err(|e| {
                user(
                    code::NO_DEVICE,
                    format!("cannot read the device's memory: {e}"),
                )
            })?;
            (
                total,
                format!("the device ({})", device_name.unwrap_or("CUDA device 0")),
            )
        }
        (_, BackendKind::Cpu) => (oom_trial::host_total(), "this host's memory".to_string()),
    };
    if let Ceiling::Bytes(b) = ceiling {
        let same_card = card && backend == BackendKind::Cuda;
        if same_card && b > total && b - total <= total / SAME_CARD_MARGIN {
            notes.push(format!(
                "the card's {} as sold are {} as CUDA counts this device: the ceiling is the whole \
                 device",
                fmt_bytes(b),
                fmt_bytes(total)
            ));
            return Ok((Ceiling::None, Some(total)));
        }
        if b > total {
            // A GPU-sized ceiling on a machine without one: what can answer here instead.
            let instead = match backend {
                BackendKind::Cpu => {
                    ". Without a GPU, --estimate answers every trial from the model's own \
                     estimate in seconds, and --exec runs your own training command"
                }
                BackendKind::Cuda => "",
            };
            return Err(user(
                code::BAD_CEILING,
                format!(
                    "the ceiling {} is larger than {what} ({}); choose at most {}{instead}",
                    fmt_bytes(b),
                    fmt_bytes(total),
                    fmt_bytes(total)
                ),
            ));
        }
    }
    Ok((ceiling, Some(ceiling.bytes(total))))
}

/// `--ceiling-by`, or its default, ballast: the cap lets trials share a GPU but does not yet give
/// the ballast's boundaries everywhere (docs/performance.md); a command run by `--exec` is a
/// process the holder cannot cap, so it is held by ballast unless it holds its ceiling itself.
fn ceiling_by(arg: Option<CeilingByArg>, engine: &Engine, model: MemoryModel) -> Result<CeilingBy> {
    let exec = matches!(engine, Engine::Exec { .. });
    match arg {
        Some(CeilingByArg::Cap) if model == MemoryModel::Burn => Err(user(
            code::USAGE,
            "--ceiling-by cap caps PyTorch's caching allocator, which the `burn` memory model \
             does not use (cubecl's own pools hold no cap): use the ballast, or \
             `device.memory_model = \"pytorch\"`"
                .to_string(),
        )),
        Some(CeilingByArg::Cap) if exec => Err(user(
            code::USAGE,
            "--ceiling-by cap: a command run by --exec is a process of its own, which the \
             allocator's cap cannot reach. Where the command keeps to $OOM_BISECT_MEMORY_LIMIT \
             itself, use --ceiling-by command; else the ballast holds it (one trial per GPU)"
                .to_string(),
        )),
        Some(CeilingByArg::Command) if !exec => Err(user(
            code::USAGE,
            "--ceiling-by command is for a command run by --exec that holds its ceiling itself; \
             the built-in trial is held by `ballast` or `cap`"
                .to_string(),
        )),
        Some(CeilingByArg::Cap) => Ok(CeilingBy::Cap),
        Some(CeilingByArg::Ballast) => Ok(CeilingBy::Ballast),
        Some(CeilingByArg::Command) => Ok(CeilingBy::Command),
        None => Ok(CeilingBy::Ballast),
    }
}

/// Where a side of a boundary is re-run (`AxisOptions::rerun_within`): under the `pytorch` memory
/// model a built-in trial's verdict is the replay of a run that repeats (fixed shapes, one
/// deterministic allocator), so only a side whose need lies within 0.5% of the ceiling is. A
/// `--exec` command may vary its inputs run to run, and burn's own pools are not replayed: both
/// sides are; so for the estimate (instant), whose re-runs the tests use.
fn rerun_within(device: &DeviceSettings, config: &Config) -> Option<f64> {
    const NEAR: f64 = 0.005;
    replayed(device, config).then_some(NEAR)
}

/// Whether the built-in trials' runs are replayed through PyTorch's caching allocator (the
/// `pytorch` memory model): a run that reaches its end then says what it needs.
fn replayed(device: &DeviceSettings, config: &Config) -> bool {
    device.engine == Engine::Train && config.device.memory_model() == MemoryModel::Pytorch
}

/// Everything a diagnosis runs on.
pub struct BisectSettings {
    pub workload: Workload,
    pub device: DeviceSettings,
    pub search: SearchOptions,
    /// The steps to run (all when empty).
    pub steps: Vec<Step>,
    /// The experiment's identity (`experiment.rs`) and its journal file, in `--journal`'s directory.
    pub experiment: String,
    pub journal: PathBuf,
    pub json: Option<PathBuf>,
    pub html: Option<PathBuf>,
    pub fresh: bool,
    pub quiet: bool,
    /// `--verbose`: developer detail in the progress and the report.
    pub verbose: bool,
    /// The `--set`s given, for the line that reproduces the run.
    pub sets: Vec<String>,
    /// Where the trials run (`--devices`, `--jobs`, `--launcher`).
    pub dispatch: Dispatch,
}

impl BisectSettings {
    pub fn resolve(args: &BisectArgs) -> Result<BisectSettings> {
        let workload = Workload::load(&args.config)?;
        let device = DeviceSettings::resolve(&args.device, &workload.config)?;
        let on = |s: Step| args.axes.is_empty() || args.axes.contains(&s);
        let search = SearchOptions {
            ceiling: device.ceiling_bytes,
            confirm_runs: if args.no_confirm {
                0
            } else {
                args.confirm_runs
            },
            predict: !args.no_predict,
            rerun_within: rerun_within(&device, &workload.config),
            budget: Budget {
                max_trials: args.max_trials,
                max_time: args.max_time,
            },
            fixes: on(Step::Fixes),
            modules: on(Step::Modules),
            minimise: on(Step::Minimal),
            need: on(Step::Need),
            // On the CPU the original reaches its end (its replay is the verdict) unless its
            // live bytes alone pass the ceiling.
            need_from_original: device.backend == BackendKind::Cpu
                && replayed(&device, &workload.config),
        };
        let d = &device;
        let experiment = crate::experiment::id(
            &workload.config,
            d.backend,
            d.ceiling,
            &d.engine,
            &d.switches,
            d.ceiling_by,
        );
        let journal = args.journal.join(format!(
            "{}-{}.jsonl",
            workload.stem(),
            crate::experiment::short_hash(&experiment)
        ));
        let dispatch = Dispatch::resolve(&placement(args, &device))?;
        Ok(BisectSettings {
            workload,
            device,
            dispatch,
            search,
            steps: args.axes.clone(),
            journal,
            experiment,
            verbose: args.verbose,
            sets: args.config.sets.clone(),
            json: args.json.clone(),
            html: args.html.clone(),
            fresh: args.fresh,
            quiet: args.quiet,
        })
    }
}

/// The flags and device facts that place trials (`dispatch.rs`).
fn placement(args: &BisectArgs, device: &DeviceSettings) -> Placement {
    Placement {
        devices: args.devices.clone(),
        jobs: args.jobs.map(usize::from),
        launcher: args.launcher.clone(),
        guesses: args.guesses.map(|t| t.on()),
        spares: args.spares.map(|t| t.on()),
        backend: device.backend,
        ceiling_by: device.ceiling_by,
        ceiling_bytes: device.ceiling_bytes,
        engine: device.engine.clone(),
    }
}
