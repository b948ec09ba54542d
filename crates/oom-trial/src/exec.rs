//! `--exec`: the user's own command as the trial. The `__trial` child becomes its holder:
//!
//! - it writes the candidate's config (every override applied) to a file of its own;
//! - it puts the ceiling in place: on CUDA the driver-level ballast of a burn trial, with its own
//!   context left out of the ceiling (that context would not exist on the smaller card), so the
//!   command, its CUDA context included, has exactly the ceiling; on the CPU nothing is enforced and
//!   the command only hears the ceiling (`OOM_BISECT_MEMORY_LIMIT`);
//! - it runs the command through `sh -c` in the trial's process group, so that a timeout, Ctrl-C or
//!   the parent's death takes the command and everything it started;
//! - while the command runs, it samples the device's memory, turns the command's own
//!   `{"oom_bisect": …}` lines into events, and forwards every other line to stderr;
//! - at the end it says how the command ended ([`Exited`]).
//!
//! The parent classifies (`outcome::classify`): the holder never decides what an exit means.

use crate::child::{emit, since_start};
use crate::protocol::{BackendKind, ChildEvent, Exited, Location, Request};
use anyhow::{Context as _, Result};
use deeplab::Phase;
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// The config file's path, in the command's environment.
pub const CONFIG_ENV: &str = "OOM_BISECT_CONFIG";
/// The ceiling in bytes, in the command's environment (absent when there is none).
pub const LIMIT_ENV: &str = "OOM_BISECT_MEMORY_LIMIT";
/// Replaced in the command by the config file's path, as one shell word.
pub const CONFIG_PLACEHOLDER: &str = "{config}";
/// How often memory is read while the command runs: device memory is one driver call; resident
/// memory on the CPU a walk over /proc.
const SAMPLE_CUDA: Duration = Duration::from_millis(10);
const SAMPLE_CPU: Duration = Duration::from_millis(50);
/// How long lines the command printed just before it ended may still take to arrive. A process
/// it left behind may hold the pipe open; it dies with the trial's group after we return.
const LAST_LINES: Duration = Duration::from_secs(2);

/// What a command may say about itself on one line of its stdout, as
/// `{"oom_bisect": {"peak_bytes": 123, "stage": "aspp", "step": 1}}`; every field is optional.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
pub struct Figures {
    /// Its own peak: wins over the sampled one.
    pub peak_bytes: Option<u64>,
    pub in_use_bytes: Option<u64>,
    /// Where it is now (a module id, `loss`, `backward`, `optimizer`): an out-of-memory after this
    /// line happened there.
    pub stage: Option<String>,
    /// The training step, counted from 1.
    pub step: Option<usize>,
    pub phase: Option<Phase>,
}

#[derive(Deserialize)]
struct FiguresLine {
    oom_bisect: Figures,
}

/// The figures on a line of the command's stdout, if it is one of ours.
pub fn figures(line: &str) -> Option<Figures> {
    serde_json::from_str::<FiguresLine>(line.trim())
        .ok()
        .map(|l| l.oom_bisect)
}

/// The command with `{config}` replaced by the file's path, quoted for the shell.
pub fn command_line(command: &str, config: &Path) -> String {
    command.replace(
        CONFIG_PLACEHOLDER,
        &crate::shell_word(&config.display().to_string()),
    )
}

/// Runs the user's command as the trial (see the module documentation).
pub fn run(req: &Request, command: &str) -> Result<()> {
    let file = ConfigFile::write(&req.config)?;
    let held = hold(req)?;
    let kills_before = oom_kills();
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(command_line(command, &file.path))
        .env(CONFIG_ENV, &file.path)
        .envs(held.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("could not start /bin/sh for the command")?;
    let lines = read_figures(child.stdout.take());
    let mut peak = Peak::default();
    let mut now: Option<u64>;
    let status = loop {
        now = held.now();
        peak.sampled = peak.sampled.max(now);
        lines.try_iter().for_each(|f| peak.take(f, now));
        match child.try_wait().context("waiting for the command")? {
            Some(s) => break s,
            None => std::thread::sleep(held.sample_every()),
        }
    };
    let until = Instant::now() + LAST_LINES;
    // Its last lines are placed at its last reading: it is gone now.
    while let Ok(f) = lines.recv_timeout(until.saturating_duration_since(Instant::now())) {
        peak.take(f, now);
    }
    let (peak_bytes, peak_source) = peak.best(held.backend);
    emit(&ChildEvent::Exited(Exited {
        code: status.code(),
        signal: killed_by(status),
        oom_killer: matches!((kills_before, oom_kills()), (Some(a), Some(b)) if b > a),
        peak_bytes,
        peak_source,
    }));
    Ok(())
}

/// The signal that ended the command: its own, or the one a shell reports as 128 + n.
fn killed_by(status: ExitStatus) -> Option<i32> {
    status.signal().or_else(|| {
        status
            .code()
            .filter(|c| (129..=192).contains(c))
            .map(|c| c - 128)
    })
}

/// The candidate's config in a directory of this process's own, removed when the trial ends. A
/// holder killed outright leaves it behind; the next holder removes those of dead processes.
struct ConfigFile {
    dir: PathBuf,
    path: PathBuf,
}

const DIR_PREFIX: &str = "oom-bisect-exec-";

impl ConfigFile {
    fn write(config: &str) -> Result<ConfigFile> {
        let tmp = std::env::temp_dir();
        remove_orphans(&tmp);
        let dir = tmp.join(format!("{DIR_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
        let path = dir.join("config.toml");
        std::fs::write(&path, config)
            .with_context(|| format!("could not write {}", path.display()))?;
        Ok(ConfigFile { dir, path })
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the config directories of holders that no longer run.
fn remove_orphans(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix(DIR_PREFIX)
            .and_then(|p| p.parse::<i32>().ok());
        // SAFETY: kill with signal 0 only asks whether the process exists. Only "no such process"
        // means dead: EPERM is another user's live process.
        let gone = |p| {
            let alive = unsafe { libc::kill(p, 0) } == 0;
            !alive && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        };
        if pid.is_some_and(gone) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The ceiling in force, and how to read the command's memory.
struct Held {
    backend: BackendKind,
    /// The command's extra environment: the ceiling, and on CUDA the device it is on.
    env: Vec<(String, String)>,
    #[cfg(feature = "cuda")]
    cuda: Option<crate::cuda::CudaCeiling>,
}

impl Held {
    /// The command's memory now: on CUDA its device memory, on the CPU the resident memory of its
    /// processes together.
    fn now(&self) -> Option<u64> {
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.cuda {
            return Some(c.used_beside());
        }
        group_resident()
    }

    fn sample_every(&self) -> Duration {
        match self.backend {
            BackendKind::Cuda => SAMPLE_CUDA,
            BackendKind::Cpu => SAMPLE_CPU,
        }
    }
}

/// The resident memory of every other process in this process group (the command and all it
/// started), from `/proc/PID/stat`.
fn group_resident() -> Option<u64> {
    // SAFETY: getpgrp and sysconf have no preconditions.
    let (group, page) = unsafe { (libc::getpgrp(), libc::sysconf(libc::_SC_PAGESIZE) as u64) };
    let me = std::process::id() as i32;
    let mut total = 0;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // After the command name (which may hold spaces), in parentheses: state, ppid, pgrp, …,
        // rss is the 22nd field after it.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(group) {
            total += fields
                .get(21)
                .and_then(|r| r.parse::<u64>().ok())
                .unwrap_or(0)
                * page;
        }
    }
    Some(total)
}

/// Puts the ceiling in place and says so (`Start`).
fn hold(req: &Request) -> Result<Held> {
    match req.backend {
        BackendKind::Cpu => {
            let total = crate::host_total();
            let ceiling = (req.ceiling != crate::Ceiling::None).then(|| req.ceiling.bytes(total));
            emit(&ChildEvent::Start {
                backend: BackendKind::Cpu,
                device: "cpu (your command; the ceiling is passed on, not enforced)".into(),
                ceiling_bytes: ceiling.unwrap_or(total),
                context_bytes: 0,
                total_bytes: total,
                seconds: since_start(),
            });
            Ok(Held {
                backend: BackendKind::Cpu,
                env: limit_env(ceiling),
                #[cfg(feature = "cuda")]
                cuda: None,
            })
        }
        BackendKind::Cuda => hold_cuda(req),
    }
}

fn limit_env(ceiling: Option<u64>) -> Vec<(String, String)> {
    ceiling
        .map(|b| vec![(LIMIT_ENV.to_string(), b.to_string())])
        .unwrap_or_default()
}

#[cfg(feature = "cuda")]
fn hold_cuda(req: &Request) -> Result<Held> {
    use crate::cuda::{CudaCeiling, OwnContext};
    let ceiling = CudaCeiling::install(req.ceiling, OwnContext::Excluded)?;
    emit(&ChildEvent::Start {
        backend: BackendKind::Cuda,
        device: format!(
            "{} (your command; the holder's own context of {} is not counted)",
            ceiling.device_name,
            crate::fmt_bytes(ceiling.context_bytes)
        ),
        ceiling_bytes: ceiling.ceiling_bytes,
        context_bytes: ceiling.context_bytes,
        total_bytes: ceiling.total_bytes,
        seconds: since_start(),
    });
    // The command sees the one device the holder holds: the first of an inherited list.
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let first = visible
        .split(',')
        .next()
        .filter(|d| !d.is_empty())
        .unwrap_or("0");
    let mut env = limit_env(Some(ceiling.ceiling_bytes));
    env.push(("CUDA_VISIBLE_DEVICES".into(), first.to_string()));
    Ok(Held {
        backend: BackendKind::Cuda,
        env,
        cuda: Some(ceiling),
    })
}

#[cfg(not(feature = "cuda"))]
fn hold_cuda(_: &Request) -> Result<Held> {
    anyhow::bail!("this binary was built without the `cuda` feature")
}

/// The command's peak: its own figure when it gives one, else what the holder measured.
#[derive(Default)]
struct Peak {
    own: Option<u64>,
    sampled: Option<u64>,
}

impl Peak {
    /// Takes one figures line: its peak, and its stage as a measuring point.
    fn take(&mut self, f: Figures, now: Option<u64>) {
        self.own = self.own.max(f.peak_bytes);
        let Some(stage) = f.stage else {
            return;
        };
        let in_use = f.in_use_bytes.or(now).unwrap_or(0);
        emit(&ChildEvent::Mark {
            at: Location {
                step: f.step.unwrap_or(1).saturating_sub(1),
                phase: f.phase.unwrap_or(Phase::Forward),
                stage,
            },
            in_use_bytes: in_use,
            device_bytes: now.unwrap_or(in_use),
            seconds: since_start(),
        });
    }

    fn best(&self, backend: BackendKind) -> (Option<u64>, Option<String>) {
        if let Some(p) = self.own {
            return (Some(p), Some("the command's own figure".into()));
        }
        let (peak, how) = match backend {
            BackendKind::Cuda => (
                self.sampled,
                "device memory read every 10 ms, less the ballast and the holder's context",
            ),
            // A short spike between two readings is caught by the kernel's own count for the
            // largest single process.
            BackendKind::Cpu => (
                self.sampled.max(largest_resident_set()),
                "resident memory of the command's processes: read every 50 ms, and the largest \
                 one's own peak",
            ),
        };
        match peak.filter(|p| *p > 0) {
            Some(p) => (Some(p), Some(how.into())),
            None => (None, None),
        }
    }
}

/// The largest resident set of any waited-for descendant, in bytes (`getrusage`).
fn largest_resident_set() -> Option<u64> {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } == 0;
    (ok && u.ru_maxrss > 0).then(|| u.ru_maxrss as u64 * 1024)
}

/// The kernel's count of processes its OOM killer has killed (`/proc/vmstat`), memory cgroups
/// included; `None` where it cannot be read.
fn oom_kills() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// Reads the command's stdout on a thread: its figures lines come back on the channel, every other
/// line goes to stderr, where the parent reads out-of-memory messages and error tails.
fn read_figures<R: Read + Send + 'static>(out: Option<R>) -> Receiver<Figures> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Some(out) = out else {
            return;
        };
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else {
                break;
            };
            match figures(&line) {
                Some(f) => {
                    if tx.send(f).is_err() {
                        break;
                    }
                }
                None => eprintln!("{line}"),
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_lines_are_read_and_others_are_not() {
        let f =
            figures(r#"{"oom_bisect": {"peak_bytes": 123, "stage": "aspp", "step": 2}}"#).unwrap();
        assert_eq!(f.peak_bytes, Some(123));
        assert_eq!(f.stage.as_deref(), Some("aspp"));
        assert_eq!(f.step, Some(2));
        assert!(figures(r#"{"loss": 0.5}"#).is_none());
        assert!(figures("epoch 1: loss 0.5").is_none());
        assert!(figures(r#"{"oom_bisect": {"peak_bytes": -1}}"#).is_none());
    }

    #[test]
    fn the_config_path_is_one_shell_word() {
        let p = Path::new("/tmp/a b/config.toml");
        assert_eq!(
            command_line("python3 train.py {config} --x", p),
            "python3 train.py '/tmp/a b/config.toml' --x"
        );
    }
}
