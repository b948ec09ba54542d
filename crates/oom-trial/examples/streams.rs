//! Two allocation streams of one configuration side by side, each replayed through
//! `pytorch-allocator`: what a built-in trial asked for and what the PyTorch reference asked for.
//! The figures of docs/fidelity.md ("The model's stream") come from it.
//!
//! ```sh
//! # on the GPU: the two streams of one configuration
//! OOM_BISECT_STREAM_OUT=builtin.json oom-bisect trial --backend cuda --config C --memory-limit 60GiB
//! PYTHONPATH=crates/oom-trial/src/exec OOM_BISECT_TORCH_TRACE=pytorch.json \
//!     python3 tools/pytorch/deeplabv3plus.py C
//! # anywhere
//! cargo run --release --example streams -- builtin.json pytorch.json
//! ```
//!
//! Prints, per stream: its requests, the peak of allocated bytes, the smallest cap it fits under
//! and what is held in split segments there (the context is not in either stream); then the request
//! sizes of 1 MiB and more that one stream asks for more often than the other, and the transients
//! of each (a request released by the very next event: a kernel's workspace).

use anyhow::{bail, Result};
use pytorch_allocator::{smallest_cap, Event};
use std::collections::BTreeMap;

const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;
/// Requests below this are the small pool's; their sizes say little about where a stream differs.
const LARGE: u64 = 1 << 20;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [builtin, pytorch] = args.as_slice() else {
        bail!("usage: streams BUILTIN.json PYTORCH.json (a trial's OOM_BISECT_STREAM_OUT, a reference's OOM_BISECT_TORCH_TRACE)");
    };
    let (_, b) = oom_trial::child::read_stream(builtin.as_ref())?;
    let p = oom_trial::exec::read_torch_trace(pytorch.as_ref())?.events;
    summary("built-in", &b);
    summary("PyTorch", &p);
    differences(&b, &p);
    transients("built-in", &b);
    transients("PyTorch", &p);
    Ok(())
}

fn summary(name: &str, events: &[Event]) {
    let need = smallest_cap(events);
    let allocs = events
        .iter()
        .filter(|e| matches!(e, Event::Alloc { .. }))
        .count();
    println!(
        "{name:9} {allocs} requests; peak allocated {:.2} GiB; smallest cap {:.2} GiB, of which {:.2} GiB held in split segments ({} retries)",
        need.at_cap.stats.peak_allocated as f64 / GIB,
        need.cap as f64 / GIB,
        need.held() as f64 / GIB,
        need.at_cap.stats.retries,
    );
}

/// How many requests of each size of 1 MiB or more.
fn sizes(events: &[Event]) -> BTreeMap<u64, u64> {
    let mut n = BTreeMap::new();
    for e in events {
        if let Event::Alloc { size, .. } = *e {
            if size >= LARGE {
                *n.entry(size).or_default() += 1;
            }
        }
    }
    n
}

/// The sizes asked for a different number of times, largest difference in bytes first.
fn differences(b: &[Event], p: &[Event]) {
    let (nb, np) = (sizes(b), sizes(p));
    let all: std::collections::BTreeSet<u64> = nb.keys().chain(np.keys()).copied().collect();
    let mut rows: Vec<(u64, u64, u64)> = all
        .into_iter()
        .map(|s| {
            (
                s,
                nb.get(&s).copied().unwrap_or(0),
                np.get(&s).copied().unwrap_or(0),
            )
        })
        .filter(|(_, x, y)| x != y)
        .collect();
    rows.sort_by_key(|&(s, x, y)| std::cmp::Reverse(s * x.abs_diff(y)));
    println!("\nrequests of 1 MiB or more that differ (size: built-in, PyTorch), by bytes:");
    for (s, x, y) in rows.iter().take(20) {
        println!("  {:9.1} MiB: {x:5} {y:5}", *s as f64 / MIB);
    }
}

/// Requests released by the next event, of 1 MiB or more: count, bytes, the largest.
fn transients(name: &str, events: &[Event]) {
    let t: Vec<u64> = events
        .windows(2)
        .filter_map(|w| match (w[0], w[1]) {
            (Event::Alloc { id, size }, Event::Free { id: f }) if id == f && size >= LARGE => {
                Some(size)
            }
            _ => None,
        })
        .collect();
    println!(
        "{name}: {} transients of 1 MiB or more ({:.1} GiB through the step), the largest {:.1} MiB",
        t.len(),
        t.iter().sum::<u64>() as f64 / GIB,
        t.iter().max().copied().unwrap_or(0) as f64 / MIB,
    );
}
