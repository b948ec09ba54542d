//! Settings: what the program runs on, resolved from the arguments and the config file in exactly one
//! place. Flags override the file; every problem becomes a `UserError` with its exit code.

use crate::cli::{BackendArg, ConfigArgs, DeviceArgs};
use crate::exit_codes::{self as code, user};
use crate::gpus;
use anyhow::Result;
use deeplab::{Architecture, Config};
use oom_trial::{fmt_bytes, parse_size, BackendKind, Ceiling};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A workload read from its file, overrides applied and validated.
#[derive(Debug, Clone)]
pub struct Workload {
    pub path: PathBuf,
    pub config: Config,
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
    pub fake: bool,
}

impl Workload {
    pub fn load(args: &ConfigArgs) -> Result<Workload> {
        let path = args.config.clone();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            user(
                code::CONFIG_UNREADABLE,
                format!("cannot read config {}: {e}", path.display()),
            )
        })?;
        let base = Config::from_toml_str(&text)
            .map_err(|e| user(code::CONFIG_INVALID, format!("{}: {e}", path.display())))?;
        let config = base.with_overrides(&args.sets).map_err(|e| {
            user(
                code::CONFIG_INVALID,
                format!("{} (with --set): {e}", path.display()),
            )
        })?;
        // Module ids and stages depend on the architecture; check them now, not in the first trial.
        Architecture::new(&config)
            .map_err(|e| user(code::CONFIG_INVALID, format!("{}: {e}", path.display())))?;
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

impl DeviceSettings {
    pub fn resolve(args: &DeviceArgs, config: &Config, quiet: bool) -> Result<DeviceSettings> {
        let file = &config.device;
        let backend = match args.backend {
            Some(BackendArg::Cuda) => Some(BackendKind::Cuda),
            Some(BackendArg::Cpu) => Some(BackendKind::Cpu),
            None => match file.backend.as_deref() {
                Some("cuda") => Some(BackendKind::Cuda),
                Some("cpu") => Some(BackendKind::Cpu),
                _ => None,
            },
        };
        let (backend, device_name) = match backend {
            _ if args.fake_trials => (
                backend.unwrap_or(BackendKind::Cpu),
                Some("fake (analytic estimate)".to_string()),
            ),
            Some(BackendKind::Cuda) => match oom_trial::cuda_device() {
                Ok(name) => (BackendKind::Cuda, Some(name)),
                Err(e) => {
                    return Err(user(
                        code::NO_DEVICE,
                        format!(
                        "no CUDA device available ({e}); run on the CPU backend with --backend cpu"
                    ),
                    ))
                }
            },
            Some(BackendKind::Cpu) => (BackendKind::Cpu, None),
            None => match oom_trial::cuda_device() {
                Ok(name) => (BackendKind::Cuda, Some(name)),
                Err(e) => {
                    if !quiet {
                        eprintln!("oom-bisect: no CUDA device ({e}); using the CPU backend");
                    }
                    (BackendKind::Cpu, None)
                }
            },
        };

        // Flags override the file; the flags are mutually exclusive (clap), the file's keys too.
        let given: Vec<(&str, String)> = [
            ("--memory-limit", args.memory_limit.clone()),
            (
                "--memory-fraction",
                args.memory_fraction.map(|f| f.to_string()),
            ),
            ("--gpu", args.gpu.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        let from_file: Vec<(&str, String)> = [
            ("device.memory_limit", file.memory_limit.clone()),
            (
                "device.memory_fraction",
                file.memory_fraction.map(|f| f.to_string()),
            ),
            ("device.gpu", file.gpu.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        if given.is_empty() && from_file.len() > 1 {
            return Err(user(
                code::CONFIG_INVALID,
                format!(
                    "the config sets {} at once; set only one ceiling",
                    from_file
                        .iter()
                        .map(|(k, _)| *k)
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            ));
        }
        let chosen = given.first().or(from_file.first()).cloned();
        let (ceiling, ceiling_arg) = match chosen {
            None => (Ceiling::None, None),
            Some((k, v)) if k.ends_with("memory_limit") || k.ends_with("memory-limit") => {
                let b = parse_size(&v).map_err(|e| user(code::BAD_CEILING, format!("{k}: {e}")))?;
                (Ceiling::Bytes(b), Some(format!("--memory-limit {v}")))
            }
            Some((k, v)) if k.ends_with("fraction") => {
                let f: f64 = v.parse().unwrap_or(f64::NAN);
                if !(f > 0.0 && f <= 1.0) {
                    return Err(user(
                        code::BAD_CEILING,
                        format!("{k}: {v} is not in (0, 1]"),
                    ));
                }
                (Ceiling::Fraction(f), Some(format!("--memory-fraction {v}")))
            }
            Some((k, v)) => {
                let (b, _) = gpus::lookup(&v).ok_or_else(|| {
                    user(
                        code::BAD_CEILING,
                        format!("{k}: unknown card `{v}`\n{}", gpus::table()),
                    )
                })?;
                (Ceiling::Bytes(b), Some(format!("--gpu {v}")))
            }
        };

        let mut ceiling_bytes = match ceiling {
            Ceiling::Bytes(b) => Some(b),
            _ => None,
        };
        if backend == BackendKind::Cuda && !args.fake_trials {
            let total = oom_trial::cuda_total_bytes().map_err(|e| {
                user(
                    code::NO_DEVICE,
                    format!("cannot read the device's memory: {e}"),
                )
            })?;
            match ceiling {
                Ceiling::Bytes(b) if b > total => {
                    return Err(user(
                        code::BAD_CEILING,
                        format!(
                            "the ceiling {} is larger than the device ({}, {}); choose at most {}",
                            fmt_bytes(b),
                            device_name.as_deref().unwrap_or("CUDA device 0"),
                            fmt_bytes(total),
                            fmt_bytes(total)
                        ),
                    ))
                }
                Ceiling::Fraction(f) => ceiling_bytes = Some((total as f64 * f) as u64),
                Ceiling::None => ceiling_bytes = Some(total),
                _ => {}
            }
        }
        if backend == BackendKind::Cpu && !args.fake_trials {
            let host = oom_trial::host_total();
            if let Ceiling::Bytes(b) = ceiling {
                if b > host {
                    return Err(user(
                        code::BAD_CEILING,
                        format!(
                            "the ceiling {} is larger than this host's memory ({}); the CPU backend's ceiling must fit in RAM",
                            fmt_bytes(b),
                            fmt_bytes(host)
                        ),
                    ));
                }
            }
            if let Ceiling::Fraction(f) = ceiling {
                ceiling_bytes = Some((host as f64 * f) as u64);
            }
        }
        if backend == BackendKind::Cpu && ceiling == Ceiling::None && !quiet {
            eprintln!(
                "oom-bisect: no memory ceiling given; the CPU backend will use all host memory \
                 (give one with --memory-limit, e.g. --memory-limit 2GiB)"
            );
        }
        Ok(DeviceSettings {
            backend,
            ceiling,
            ceiling_bytes,
            ceiling_arg,
            device_name,
            trial_timeout: Duration::from_secs(args.trial_timeout.max(1)),
            fake: args.fake_trials,
        })
    }

    /// The flags that reproduce this device setting on the command line.
    pub fn reproduce_flags(&self) -> String {
        let mut s = format!("--backend {}", self.backend.name());
        if let Some(c) = &self.ceiling_arg {
            s.push(' ');
            s.push_str(c);
        }
        if self.fake {
            s.push_str(" --fake-trials");
        }
        s
    }
}

/// Creates the directory `path` will be written in; an error names it, with exit code 14.
pub fn create_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            user(
                code::UNWRITABLE,
                format!("cannot create directory {}: {e}", dir.display()),
            )
        })?;
    }
    Ok(())
}

/// Opens `path` for appending, creating it and its directory; an error names it, with exit code 14.
pub fn open_append(path: &Path) -> Result<std::fs::File> {
    create_parent(path)?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| {
            user(
                code::UNWRITABLE,
                format!("cannot write {}: {e}", path.display()),
            )
        })
}

/// Checks that a file can be created at `path` before hours of trials are spent.
pub fn check_writable(path: &Path) -> Result<()> {
    open_append(path).map(drop)
}
