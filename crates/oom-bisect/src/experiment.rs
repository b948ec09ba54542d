//! An experiment's identity: everything that changes what a trial measures. Two runs share journal
//! entries only when all of it is equal: the workload, the backend, the ceiling, the engine, the
//! backend settings that change kernels or memory, how a CUDA ceiling is held when that is not the
//! ballast (a cap, or a command's own), and the version of this binary.

use deeplab::Config;
use oom_trial::{BackendKind, Ceiling, CeilingBy, Engine, Switches};

/// The journal key of an experiment (the workload's device section excluded: the resolved device
/// settings stand for it).
pub fn id(
    config: &Config,
    backend: BackendKind,
    ceiling: Ceiling,
    engine: &Engine,
    switches: &Switches,
    ceiling_by: CeilingBy,
    streams_on: Option<&str>,
) -> String {
    // The ballast adds nothing, so that journals written when it was the only way still resume.
    let held = match backend == BackendKind::Cuda && ceiling_by.shares_gpu() {
        true => format!(" ceiling-by={}", ceiling_by.name()),
        false => String::new(),
    };
    // The search on stream-only trials: the card they are issued for (its name: a context
    // measured a few MiB apart must not lose the journal).
    let streams = streams_on
        .map(|c| format!("|streams on {c}"))
        .unwrap_or_default();
    format!(
        "{}|{}|{:?}|{:?}|{}{held}{streams}|oom-bisect {}",
        config.canonical_key(),
        backend.name(),
        ceiling,
        engine,
        switches.key(),
        env!("CARGO_PKG_VERSION"),
    )
}

/// A short stable hash for file names (FNV-1a: stable across runs and platforms; std's is not).
pub fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{:08x}", h as u32)
}
