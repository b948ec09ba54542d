//! Settings: what the program runs on, resolved from the arguments and the config file in exactly one
//! place and passed down. Flags override the file; every problem becomes a `UserError` with its exit
//! code. Nothing here prints: what a user should hear is returned as notes.

mod ceiling;

use crate::cli::{BackendArg, BisectArgs, ConfigArgs, DeviceArgs, EvidenceArg, ServeArg, Step};
use crate::dispatch::{Dispatch, Placement};
use crate::exit_codes::{self as code, user};
use anyhow::Result;
pub use ceiling::check_device_section;
use ceiling::{ceiling_by, check_ceiling, choose_ceiling};
use deeplab::config::MemoryModel;
use deeplab::{Architecture, Config};
use oom_search::{Budget, SearchOptions};
use oom_trial::{BackendKind, Ceiling, CeilingBy, Engine, Serves, Switches};
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
    /// The card the ceiling is (`--gpu`, `device.gpu`): `crate::gpus::by_name` knows what it computes in.
    pub card: Option<&'static str>,
    pub device_name: Option<String>,
    pub trial_timeout: Duration,
    /// What answers trials: training, or the estimate (`--fake-trials`, for tests).
    pub engine: Engine,
    /// Environment switches that change kernels or memory.
    pub switches: Switches,
    /// How a CUDA ceiling is held (`--ceiling-by`); it decides how many trials share a GPU.
    pub ceiling_by: CeilingBy,
    /// Whether the `--exec` command serves trials in one process per worker (`--serve`).
    pub serve: Serves,
    /// The search on stream-only trials (`--evidence certified|stream`), or `None`: every trial
    /// runs as `engine` says.
    pub streams: Option<Streams>,
    /// What the user should hear about how this was resolved (a fallback to the CPU, no ceiling).
    pub notes: Vec<String>,
}

/// The search on stream-only trials: the card they are issued for (this host's, probed, or the
/// one `--gpu` names where there is no GPU), and whether the GPU certifies the verdicts the report
/// rests on.
#[derive(Debug, Clone)]
pub struct Streams {
    pub card: oom_trial::card::CardProps,
    pub certify: bool,
    /// What runs the certificates: the built-in training on the GPU; in the tests without a GPU,
    /// the model's estimate (`--certify-with-estimate`).
    pub certifier: Engine,
}

impl DeviceSettings {
    pub fn resolve(args: &DeviceArgs, config: &Config) -> Result<DeviceSettings> {
        oom_trial::estimated::fake_seconds().map_err(|e| user(code::USAGE, e))?;
        let engine = match (&args.exec, args.estimate) {
            (Some(command), _) => Engine::Exec {
                command: check_exec(command)?,
            },
            (None, true) => Engine::Estimate,
            (None, false) => Engine::Train,
        };
        let switches = Switches::from_config(&config.device).map_err(|e| user(code::USAGE, e))?;
        let mut notes = vec![];
        let (ceiling, given) = choose_ceiling(&args.ceiling, config)?;
        notes.extend(given.as_ref().and_then(|g| g.decimal_warning(ceiling)));
        let card = given.as_ref().and_then(|g| g.card());
        let ceiling_arg = given.map(|g| g.arg);
        // The card a virtual device copies: the ceiling's, else the file's `device.gpu` (a flag's
        // ceiling overrides the file's card as a ceiling, not as the card).
        let virtual_card =
            card.or_else(|| config.device.gpu.as_deref().and_then(crate::gpus::by_name));
        let (backend, device_name) =
            resolve_backend(args, config, &engine, virtual_card, &mut notes)?;
        let mut streams = resolve_streams(
            args.evidence,
            config,
            &engine,
            backend,
            &device_name,
            virtual_card,
        )?;
        if let (Some(s), true) = (&mut streams, args.certify_with_estimate) {
            s.certify = true;
            s.certifier = Engine::Estimate;
        }
        let virtual_total = streams
            .as_ref()
            .filter(|_| device_name.is_none())
            .map(|s| s.card.total_bytes);
        let (ceiling, ceiling_bytes) = check_ceiling(
            ceiling,
            card.is_some(),
            backend,
            &engine,
            (device_name.as_deref(), virtual_total),
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
            card: card.map(|c| c.name),
            device_name,
            trial_timeout: Duration::from_secs(args.trial_timeout.max(1)),
            ceiling_by,
            serve: serves(args.serve, &engine),
            engine,
            switches,
            streams,
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
        // Said whichever it is: its default depends on the engine and the memory model.
        if self.backend == BackendKind::Cuda {
            parts.push(format!("--ceiling-by {}", self.ceiling_by.name()));
        }
        if self.streams.as_ref().is_some_and(|s| !s.certify) {
            parts.push("--evidence stream".into());
        }
        match &self.engine {
            Engine::Estimate => parts.push("--estimate".into()),
            Engine::Exec { command } => {
                parts.push(format!("--exec {}", crate::output::shell_word(command)))
            }
            Engine::Train | Engine::Stream { .. } | Engine::Card => {}
        }
        match self.serve {
            Serves::Yes => parts.push("--serve on".into()),
            Serves::No if self.exec_command().is_some() => parts.push("--serve off".into()),
            _ => {}
        }
        parts.join(" ")
    }

    /// What answers the search's trials: stream-only trials where `--evidence` asks for them,
    /// else the engine.
    pub fn search_engine(&self) -> Engine {
        match &self.streams {
            Some(s) => Engine::Stream {
                card: s.card.clone(),
            },
            None => self.engine.clone(),
        }
    }

    /// What answers `trial`'s one trial: the device where it would certify, else as the search.
    pub fn trial_engine(&self) -> Engine {
        match &self.streams {
            Some(s) if s.certify => self.engine.clone(),
            _ => self.search_engine(),
        }
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
        if let (Some(s), None) = (&self.streams, &self.device_name) {
            return format!("cuda, {}", s.card.label());
        }
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
/// `--serve` for the engine: only a `--exec` command serves; left out, whether it does is found
/// out from its first trial.
fn serves(arg: Option<ServeArg>, engine: &Engine) -> Serves {
    match (engine, arg) {
        (Engine::Exec { .. }, None | Some(ServeArg::Auto)) => Serves::Unknown,
        (Engine::Exec { .. }, Some(ServeArg::On)) => Serves::Yes,
        _ => Serves::No,
    }
}

fn check_exec(command: &str) -> Result<String> {
    if command.trim().is_empty() {
        return Err(user(code::USAGE, "--exec: the command is empty"));
    }
    // Where its config files will go, checked before the first trial rather than failing each.
    oom_trial::exec::temp_dir().map_err(|e| user(code::UNWRITABLE, format!("--exec: {e:#}")))?;
    Ok(command.to_string())
}

/// The backend: the flag, else the file, else CUDA when a device answers (else the CPU, saying so).
/// CUDA without a device is a virtual card: the one `card` names, for stream-only trials.
fn resolve_backend(
    args: &DeviceArgs,
    config: &Config,
    engine: &Engine,
    card: Option<&'static crate::gpus::Card>,
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
    let streams_wanted = args.evidence != Some(EvidenceArg::Device) && *engine == Engine::Train;
    match (wanted, oom_trial::cuda_device()) {
        (Some(BackendKind::Cpu), _) => Ok((BackendKind::Cpu, None)),
        (_, Ok(name)) => Ok((BackendKind::Cuda, Some(name))),
        (Some(BackendKind::Cuda), Err(e)) if streams_wanted && card.is_some() => {
            notes.push(format!(
                "no CUDA device ({e}): every trial is issued for a virtual {} (stream only: \
                 nothing is computed, each verdict is its stream of requests replayed through \
                 PyTorch's caching allocator, none is certified on a GPU)",
                card.map(|c| c.desc).unwrap_or_default()
            ));
            Ok((BackendKind::Cuda, None))
        }
        (Some(BackendKind::Cuda), Err(e)) => Err(user(
            code::NO_DEVICE,
            format!(
                "no CUDA device available ({e}); run on the CPU backend with --backend cpu, or \
                 name a card with --gpu NAME to issue the trials for a virtual card of it \
                 (stream only)"
            ),
        )),
        (None, Err(e)) => {
            notes.push(format!("no CUDA device ({e}); using the CPU backend"));
            Ok((BackendKind::Cpu, None))
        }
    }
}

/// Whether the search runs on stream-only trials (`--evidence`), for which card, and whether the
/// GPU certifies: on a GPU this host's card (read by a probe), without one the card `--gpu`
/// names. Only built-in CUDA trials under the `pytorch` memory model have a stream to replay.
fn resolve_streams(
    arg: Option<EvidenceArg>,
    config: &Config,
    engine: &Engine,
    backend: BackendKind,
    device_name: &Option<String>,
    card: Option<&'static crate::gpus::Card>,
) -> Result<Option<Streams>> {
    let eligible = *engine == Engine::Train
        && backend == BackendKind::Cuda
        && config.device.memory_model() == MemoryModel::Pytorch;
    let wanted = arg.unwrap_or(EvidenceArg::Certified);
    match (wanted, eligible, device_name) {
        (EvidenceArg::Device, _, _) => Ok(None),
        (_, false, _) if arg.is_none() => Ok(None),
        (_, false, _) => Err(user(
            code::USAGE,
            "--evidence certified|stream: stream-only trials are the built-in trials on the cuda \
             backend under the pytorch memory model (the stream they replay is PyTorch's \
             allocator's); this run has none"
                .to_string(),
        )),
        (EvidenceArg::Certified, true, None) if arg.is_some() => Err(user(
            code::NO_DEVICE,
            "--evidence certified runs the report's verdicts on a GPU, and none is here; \
             --evidence stream issues every trial for the card --gpu names"
                .to_string(),
        )),
        (_, true, None) => {
            let card = card.ok_or_else(|| {
                user(
                    code::NO_DEVICE,
                    "stream-only trials without a GPU are issued for a card: name it with --gpu \
                     NAME (--gpu help lists them)"
                        .to_string(),
                )
            })?;
            Ok(Some(Streams {
                card: card.props(),
                certify: false,
                certifier: Engine::Train,
            }))
        }
        (_, true, Some(_)) => {
            let exe = std::env::current_exe()
                .map_err(|e| user(code::NO_DEVICE, format!("cannot find this program: {e}")))?;
            let card = oom_trial::card_probe::probe(&exe, None).map_err(|e| {
                user(
                    code::NO_DEVICE,
                    format!("{e:#}; --evidence device runs every trial on the GPU without it"),
                )
            })?;
            Ok(Some(Streams {
                card,
                certify: wanted == EvidenceArg::Certified,
                certifier: Engine::Train,
            }))
        }
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
        // A stream-only trial repeats to the byte and runs to its end under any ceiling: it says
        // its need every time, a re-run says nothing new, and the GPU's certificates confirm.
        let streams = device.streams.is_some();
        let search = SearchOptions {
            ceiling: device.ceiling_bytes,
            confirm_runs: if args.no_confirm || streams {
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
            need_from_original: (device.backend == BackendKind::Cpu || streams)
                && replayed(&device, &workload.config),
            // A run under the ceiling stops at an out-of-memory without a need (on the CPU too,
            // where its live bytes pass the ceiling): where needs are replayed, the axes probe
            // without it, and the sides found run under it.
            probe_without_ceiling: replayed(&device, &workload.config) && !streams,
        };
        let d = &device;
        let experiment = crate::experiment::id(
            &workload.config,
            d.backend,
            d.ceiling,
            &d.engine,
            &d.switches,
            d.ceiling_by,
            d.streams.as_ref().map(|s| s.card.name.as_str()),
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
        // Nothing runs on a GPU: stream-only trials alone, or certified by the estimate (tests).
        streams_only: device
            .streams
            .as_ref()
            .is_some_and(|s| !s.certify || s.certifier == Engine::Estimate),
    }
}
