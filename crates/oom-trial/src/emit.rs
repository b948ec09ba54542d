//! The child's side of the protocol's wire: one event a line on stdout, flushed at once, each
//! stamped with the seconds since the child started. Both the built-in trial and the `--exec`
//! holder write through it.

use crate::protocol::ChildEvent;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// When this child started; every event carries the seconds since (less [`RESTARTED`]).
static STARTED: OnceLock<Instant> = OnceLock::new();
/// Nanoseconds after [`STARTED`] at which the current trial began: a served holder's later trials
/// count from their own start.
static RESTARTED: AtomicU64 = AtomicU64::new(0);

/// Starts the clock (the child's first act), so that the first event's time counts from there.
pub fn start_clock() {
    STARTED.get_or_init(Instant::now);
}

/// Starts the clock again for a served holder's next trial.
pub fn restart_clock() {
    let now = STARTED.get_or_init(Instant::now).elapsed().as_nanos();
    RESTARTED.store(now as u64, Ordering::SeqCst);
}

pub fn since_start() -> f64 {
    let nanos = STARTED.get_or_init(Instant::now).elapsed().as_nanos() as u64;
    nanos.saturating_sub(RESTARTED.load(Ordering::SeqCst)) as f64 / 1e9
}

/// Writes one event line and flushes, so that it survives the process dying right after.
pub fn emit(e: &ChildEvent) {
    let line = serde_json::to_string(e).expect("events serialise");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
