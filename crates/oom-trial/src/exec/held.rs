//! The ceiling a `--exec` command runs under, and how its memory is read: on the CPU the resident
//! memory of its processes (the ceiling only passed on), on CUDA the device's less a ballast, or
//! the command's own processes' where it holds its ceiling itself ([`super::watch`]).

use super::{contain, LIMIT_ENV, SAMPLE_CPU, SAMPLE_CUDA};
#[cfg(feature = "cuda")]
use super::{watch, HELD_BY_ENV};
use crate::emit::{emit, since_start};
use crate::protocol::{BackendKind, ChildEvent, Request};
use anyhow::Result;
use std::time::Duration;

/// The ceiling in force, and how to read the command's memory.
pub(super) struct Held {
    pub backend: BackendKind,
    /// What each trial's `Start` says (device, ceiling, context, total).
    pub start: (String, u64, u64, u64),
    /// The command's extra environment: the ceiling, and on CUDA the device it is on.
    pub env: Vec<(String, String)>,
    reader: Reader,
}

/// Where the command's memory is read.
enum Reader {
    /// The resident memory of its processes (the CPU).
    Resident,
    /// The device's, less the ballast and the holder's context.
    #[cfg(feature = "cuda")]
    Ballast(crate::cuda::CudaCeiling),
    /// Its processes' own, from NVML (`--ceiling-by command`).
    #[cfg(feature = "cuda")]
    Watch(watch::Watch),
}

impl Held {
    /// Says where the trial runs and under what ceiling (`Start`): once per trial.
    pub fn emit_start(&self) {
        let (device, ceiling_bytes, context_bytes, total_bytes) = self.start.clone();
        emit(&ChildEvent::Start {
            backend: self.backend,
            device,
            ceiling_bytes,
            context_bytes,
            total_bytes,
            seconds: since_start(),
        });
    }

    /// The command's memory now: on CUDA its device memory, on the CPU the resident memory of its
    /// processes together.
    pub fn now(&self) -> Option<u64> {
        match &self.reader {
            Reader::Resident => group_resident(),
            #[cfg(feature = "cuda")]
            Reader::Ballast(c) => Some(c.used_beside()),
            #[cfg(feature = "cuda")]
            Reader::Watch(w) => w.used(),
        }
    }

    pub fn sample_every(&self) -> Duration {
        match self.backend {
            BackendKind::Cuda => SAMPLE_CUDA,
            BackendKind::Cpu => SAMPLE_CPU,
        }
    }

    /// How [`Held::now`] reads, for the report.
    pub fn source(&self) -> &'static str {
        match &self.reader {
            Reader::Resident => RESIDENT_SOURCE,
            #[cfg(feature = "cuda")]
            Reader::Ballast(_) => {
                "device memory read every 10 ms, less the ballast and the holder's context"
            }
            #[cfg(feature = "cuda")]
            Reader::Watch(_) => {
                "the device memory of the command's processes (NVML), read every 10 ms"
            }
        }
    }

    /// The command's peak from the readings, whose highest was `sampled`: on the CPU a short
    /// spike between two readings is caught by the kernel's own count for the largest single
    /// process.
    pub fn peak(&self, sampled: Option<u64>) -> Option<u64> {
        match self.reader {
            Reader::Resident => sampled.max(largest_resident_set()),
            #[cfg(feature = "cuda")]
            _ => sampled,
        }
    }

    /// Why the holder cannot vouch that the command kept to its ceiling, where the command holds
    /// it itself; `sampled` is the highest reading of [`Held::now`].
    pub fn unheld(&self, sampled: Option<u64>) -> Option<String> {
        match &self.reader {
            #[cfg(feature = "cuda")]
            Reader::Watch(w) => w.unheld(sampled),
            _ => {
                let _ = sampled;
                None
            }
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
        // After the command name: state, ppid, pgrp, …, rss is the 22nd field.
        let fields = contain::stat_fields(&pid.to_string()).unwrap_or_default();
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

/// Puts the ceiling in place (each trial says so: [`Held::emit_start`]).
pub(super) fn hold(req: &Request) -> Result<Held> {
    match req.backend {
        BackendKind::Cpu => {
            let total = crate::device::host_total();
            let ceiling =
                (req.ceiling != crate::protocol::Ceiling::None).then(|| req.ceiling.bytes(total));
            let device = "cpu (your command; the ceiling is passed on, not enforced)".into();
            Ok(Held {
                backend: BackendKind::Cpu,
                start: (device, ceiling.unwrap_or(total), 0, total),
                env: limit_env(ceiling),
                reader: Reader::Resident,
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
    let (start, reader, held_by) = if req.ceiling_by == crate::protocol::CeilingBy::Command {
        let w = watch::Watch::start(req.ceiling)?;
        let device = format!("{} (your command, which holds its ceiling)", w.device_name);
        let start = (device, w.ceiling_bytes, 0, w.total_bytes);
        (start, Reader::Watch(w), "command")
    } else {
        // A command in a process of its own cannot be capped from here: ballast.
        let c = CudaCeiling::install(
            req.ceiling,
            OwnContext::Excluded,
            crate::protocol::CeilingBy::Ballast,
        )?;
        let device = format!(
            "{} (your command; the holder's own context of {} is not counted)",
            c.device_name,
            crate::units::fmt_bytes(c.context_bytes)
        );
        let start = (device, c.ceiling_bytes, c.context_bytes, c.total_bytes);
        (start, Reader::Ballast(c), "ballast")
    };
    // The command sees the one device the holder holds: the first of an inherited list.
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let first = visible
        .split(',')
        .next()
        .filter(|d| !d.is_empty())
        .unwrap_or("0");
    let mut env = limit_env(Some(start.1));
    env.push((HELD_BY_ENV.into(), held_by.into()));
    env.push(("CUDA_VISIBLE_DEVICES".into(), first.to_string()));
    Ok(Held {
        backend: BackendKind::Cuda,
        start,
        env,
        reader,
    })
}

#[cfg(not(feature = "cuda"))]
fn hold_cuda(_: &Request) -> Result<Held> {
    anyhow::bail!("this binary was built without the `cuda` feature")
}

/// Where a command's peak on the CPU comes from: what its processes hold, which nothing keeps under
/// the ceiling there, so the report does not call it a need.
pub const RESIDENT_SOURCE: &str =
    "resident memory of the command's processes: read every 50 ms, and the largest one's own peak";

/// The largest resident set of any waited-for descendant, in bytes (`getrusage`).
fn largest_resident_set() -> Option<u64> {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } == 0;
    (ok && u.ru_maxrss > 0).then(|| u.ru_maxrss as u64 * 1024)
}
