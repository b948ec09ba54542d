//! The child's side of the protocol's wire: one event a line on stdout, flushed at once, each
//! stamped with the seconds since the child started. Both the built-in trial and the `--exec`
//! holder write through it.

use crate::protocol::ChildEvent;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

/// When this child started; every event carries the seconds since.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Starts the clock (the child's first act), so that the first event's time counts from there.
pub fn start_clock() {
    STARTED.get_or_init(Instant::now);
}

pub fn since_start() -> f64 {
    STARTED.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Writes one event line and flushes, so that it survives the process dying right after.
pub fn emit(e: &ChildEvent) {
    let line = serde_json::to_string(e).expect("events serialise");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
