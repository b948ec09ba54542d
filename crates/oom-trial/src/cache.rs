//! Kernel caches shared by every trial: each trial is a fresh process, so without a persistent cache
//! every child compiles (NVRTC) and autotunes the same kernels again. The parent chooses one directory
//! and passes it in the environment; the child points cubecl's compilation and autotune caches there.
//!
//! Concurrent trials share it safely: cubecl appends each compiled kernel to its chunk file in one
//! `write(2)` on a file opened `O_APPEND` (atomic against other appenders on a local file system),
//! and its table of contents is rewritten under a lock file. A trial killed in the middle of an
//! append leaves a cut entry, which cubecl skips with a warning. What would crash cubecl is a
//! directory it cannot write or a table of contents naming a chunk that is gone: [`usable`] checks
//! for both before any trial starts and sets such a cache aside (`tests/kernel_cache.rs`).

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

/// Where an `--exec` command's Python keeps the bytecode it compiles: `python-bytecode` in the cache
/// folder ([`dir`]; none where that is empty).
pub fn python_bytecode_dir() -> Option<PathBuf> {
    dir().map(|d| d.join("python-bytecode"))
}

/// Has a trial child's `--exec` command (which inherits the child's environment) keep its Python
/// bytecode in `dir`, unless the user named a place (`PYTHONPYCACHEPREFIX`, then left as the user
/// set it; empty names none, as for Python). Python writes no bytecode under `PYTHONDONTWRITEBYTECODE`, which container images
/// often set, and where the installed packages ship none (as on an H200 machine
/// with PyTorch 2.11) every trial's process compiled what it imports from source: a
/// PyTorch process's start and first trial took 12.4 s, 5.7 s of it compiling. The bytecode goes
/// to our cache folder, not next to the sources (what that setting keeps clean), so the setting is
/// lifted for the command.
pub fn python_bytecode(cmd: &mut Command, dir: Option<&Path>) {
    let named = std::env::var_os("PYTHONPYCACHEPREFIX").is_some_and(|p| !p.is_empty());
    if let Some(d) = dir.filter(|_| !named) {
        cmd.env("PYTHONPYCACHEPREFIX", d)
            .env_remove("PYTHONDONTWRITEBYTECODE");
    }
}

/// The cache directory to use: `dir` if cubecl can use it, else `dir` set aside (renamed
/// `*.broken-<pid>`) and a fresh one in its place; `None` (no cache) when even that fails. The
/// second value is what the user should hear.
pub fn usable(dir: Option<PathBuf>) -> (Option<PathBuf>, Option<String>) {
    let Some(d) = dir else { return (None, None) };
    let Err(why) = check(&d) else {
        return (Some(d), None);
    };
    let aside = d.with_extension(format!("broken-{}", std::process::id()));
    let moved = std::fs::rename(&d, &aside).is_ok();
    match moved && check(&d).is_ok() {
        true => (
            Some(d),
            Some(format!(
                "the kernel cache was unusable ({why}); it was moved to {} and a new one started",
                aside.display()
            )),
        ),
        false => (
            None,
            Some(format!(
                "the kernel cache {} is unusable ({why}); trials run without one (every trial \
                 compiles its kernels)",
                d.display()
            )),
        ),
    }
}

/// Why cubecl would fail on the cache at `dir`, if it would: the directory must be writable, and
/// every chunk a table of contents names must exist and be readable.
pub fn check(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let probe = dir.join(format!(".write-test-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    for toc in files_where(dir, |n| n == "toc.json.log") {
        let text =
            std::fs::read(&toc).map_err(|e| format!("cannot read {}: {e}", toc.display()))?;
        let here = toc.parent().unwrap_or(dir);
        for chunk in chunk_names(&String::from_utf8_lossy(&text)) {
            let p = here.join(&chunk);
            std::fs::File::open(&p).map_err(|e| {
                format!("{} names {chunk}, which cannot be read: {e}", toc.display())
            })?;
        }
    }
    Ok(())
}

/// The bytes of compiled kernels in the cache at `dir` (cubecl's chunk files). cubecl reads and
/// decodes all of them when a trial's device starts, whatever the trial will launch, so a cache
/// grown over many models and precisions slows every trial a little (docs/performance.md).
pub fn compiled_bytes(dir: &Path) -> u64 {
    files_where(dir, |n| n.starts_with("chunk") && n.ends_with(".cbor"))
        .iter()
        .filter_map(|p| p.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Files under `dir`, at any depth, whose name passes `wanted`.
fn files_where(dir: &Path, wanted: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.file_name().is_some_and(|n| wanted(&n.to_string_lossy())) {
                out.push(p);
            }
        }
    }
    out
}

/// The chunk files (`chunk0.cbor`, …) a table of contents names, each once.
fn chunk_names(toc: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for (i, _) in toc.match_indices("chunk") {
        let rest = &toc[i..];
        let end = rest.find(".cbor").map(|e| e + ".cbor".len());
        if let Some(name) = end.map(|e| &rest[..e]) {
            let digits = &name["chunk".len()..name.len() - ".cbor".len()];
            if digits.chars().all(|c| c.is_ascii_digit()) && !out.iter().any(|o| o == name) {
                out.push(name.to_string());
            }
        }
    }
    out
}
