//! Kernel caches shared by every trial: each trial is a fresh process, so without a persistent cache
//! every child compiles (NVRTC) and autotunes the same kernels again. The parent chooses one directory
//! and passes it in the environment; the child points cubecl's compilation and autotune caches there.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable that names the directory; an empty value disables the cache.
pub const KERNEL_CACHE_ENV: &str = "OOM_BISECT_KERNEL_CACHE";

/// `$OOM_BISECT_KERNEL_CACHE`, else `$XDG_CACHE_HOME/oom-bisect/cubecl`, else `~/.cache/oom-bisect/cubecl`.
pub fn dir() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(KERNEL_CACHE_ENV) {
        return (!v.is_empty()).then(|| PathBuf::from(v));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("oom-bisect").join("cubecl"))
}

/// Passes the cache directory to a trial child. cubecl's cache holds PTX; turning PTX into machine
/// code is the CUDA driver's job, cached by the driver in `CUDA_CACHE_PATH` (under `~/.nv` by default,
/// with a size cap below the driver's maximum): unless the user set them, the driver's cache goes
/// next to ours with the driver's largest size, 4 GiB.
pub fn configure(cmd: &mut Command, dir: Option<&Path>) {
    match dir {
        Some(d) => {
            if std::env::var_os("CUDA_CACHE_PATH").is_none() {
                cmd.env("CUDA_CACHE_PATH", d.join("cuda-jit"));
            }
            if std::env::var_os("CUDA_CACHE_MAXSIZE").is_none() {
                cmd.env("CUDA_CACHE_MAXSIZE", (4u64 << 30).to_string());
            }
            cmd.env(KERNEL_CACHE_ENV, d)
        }
        None => cmd.env(KERNEL_CACHE_ENV, ""),
    };
}
