//! One trial: a resolved config on a device, N real training steps under a memory ceiling, measured
//! and classified; and the seam through which the search asks for one ([`TrialRunner`]). Both sides
//! of the parent/child protocol live here: the child (`oom-bisect __trial`, [`child`]) and the parent
//! ([`ProcessRunner`]) that spawns it, watches it and classifies what it left behind ([`outcome`]).

pub mod alloc;
pub mod cache;
pub mod child;
pub mod classify;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod estimated;
pub mod exec;
pub mod lines;
pub mod outcome;
pub mod pool;
pub mod protocol;
pub mod runner;
pub mod switches;

pub use outcome::{
    assemble, ChildExit, OomInfo, StageMemory, StepRecord, TrialOutcome, TrialReport,
};
pub use pool::{Finished, Pool, Worker};
pub use protocol::{BackendKind, Ceiling, ChildEvent, Engine, Fault, Request, SUBCOMMAND};
pub use runner::{
    install_interrupt_handler, kill_running_trials, parse_events, EstimateRunner, ProcessRunner,
    TrialRunner, MAX_RUNNING,
};
pub use switches::Switches;

/// Whether this binary can run trials on CUDA and a device is present; the device name if so.
pub fn cuda_device() -> Result<String, String> {
    #[cfg(feature = "cuda")]
    {
        cuda::probe().map_err(|e| format!("{e:#}"))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this binary was built without the `cuda` feature".into())
    }
}

/// How many CUDA devices this process sees (after any inherited `CUDA_VISIBLE_DEVICES`).
pub fn cuda_device_count() -> Result<usize, String> {
    #[cfg(feature = "cuda")]
    {
        cuda::probe().map_err(|e| format!("{e:#}"))?;
        cudarc::driver::result::device::get_count()
            .map(|n| n.max(0) as usize)
            .map_err(|e| format!("{e:?}"))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this binary was built without the `cuda` feature".into())
    }
}

/// Total memory of CUDA device 0.
pub fn cuda_total_bytes() -> Result<u64, String> {
    #[cfg(feature = "cuda")]
    {
        cuda::probe().map_err(|e| format!("{e:#}"))?;
        let dev = cudarc::driver::result::device::get(0).map_err(|e| format!("{e:?}"))?;
        // SAFETY: `dev` is a valid device handle from `device::get`.
        unsafe { cudarc::driver::result::device::total_mem(dev) }
            .map(|b| b as u64)
            .map_err(|e| format!("{e:?}"))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this binary was built without the `cuda` feature".into())
    }
}

/// Physical memory of this host (the CPU backend's "device").
pub fn host_total() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages.max(0) as u64) * (size.max(0) as u64)
}

/// Memory the host can give without swapping (`MemAvailable`), or its physical memory where
/// `/proc/meminfo` cannot be read.
pub fn host_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or_else(host_total, |kib| kib * 1024)
}

/// `1.50 GiB`, `512.0 MiB`, `20 KiB`, `12 B`.
pub fn fmt_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f >= K * K * K {
        format!("{:.2} GiB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.0} KiB", f / K)
    } else {
        format!("{b} B")
    }
}

/// Parses `24GiB`, `24000MiB`, `1.5 GB`, `512M`, or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 24GiB, 24000MiB, 1073741824)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (allowed: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    let v = n * mult;
    if !(v.is_finite() && v >= 1.0) {
        return Err(format!("`{s}` is not a positive size"));
    }
    Ok(v as u64)
}

/// `word` as one shell word: as it is when it holds nothing the shell would read, else in single
/// quotes (a `'` inside becomes `'\''`).
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("24GiB").unwrap(), 24 << 30);
        assert_eq!(parse_size("24000MiB").unwrap(), 24000 << 20);
        assert_eq!(parse_size("1073741824").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5 GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert!(parse_size("24 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
    }
}
