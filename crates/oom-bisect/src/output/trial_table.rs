//! The per-stage memory table of one trial (`oom-bisect trial`): the readings of the last step
//! reached, every step, the peak, and how it ended. Steps are counted from 1 here, as a user counts
//! them (the protocol and the JSON count from 0).

use oom_trial::{fmt_bytes, TrialReport};

/// `estimate`: the report is the model's estimate (`--estimate`), not a run: no step ran, nothing
/// was trained, no time was taken.
pub fn trial_table(r: &TrialReport, estimate: bool) -> String {
    let mut s = summary(r);
    s += &stages(r);
    s += &match estimate {
        true => estimated_steps(r),
        false => steps(r),
    };
    s += &ending(r);
    s
}

fn summary(r: &TrialReport) -> String {
    let or_dash = |b: Option<u64>| b.map(fmt_bytes).unwrap_or_else(|| "-".into());
    let mut s = format!(
        "outcome: {}   backend: {}   ceiling: {}   context: {}\n",
        r.outcome().name(),
        r.device().unwrap_or("-"),
        or_dash(r.ceiling_bytes()),
        or_dash(r.context_bytes()),
    );
    if let Some(p) = r.memory.params {
        s += &format!(
            "parameters: {}   held between steps (parameters, optimizer state, batch): {}\n",
            super::count(p as u64),
            r.memory.base_bytes.map(fmt_bytes).unwrap_or_default()
        );
    }
    s
}

fn stages(r: &TrialReport) -> String {
    let Some(last) = r.memory.stages.iter().map(|x| x.step).max() else {
        return String::new();
    };
    // The step that ran out of memory, where one did (a replay may fail in a step the device
    // finished), else the last one reached.
    let (step, which) = match r.oom().and_then(|o| o.step) {
        Some(step) if step <= last => (step, "where it runs out of memory"),
        _ => (last, "the last one reached"),
    };
    let mut s = format!("\nstep {} ({which}), memory after each stage:\n", step + 1);
    s += &format!(
        "  {:<26} {:<9} {:>12} {:>12} {:>9}\n",
        "stage", "phase", "in use", "device", "at"
    );
    for x in r.memory.stages.iter().filter(|x| x.step == step) {
        s += &format!(
            "  {:<26} {:<9} {:>12} {:>12} {:>7.1} s\n",
            x.name,
            x.phase.name(),
            fmt_bytes(x.in_use_bytes),
            fmt_bytes(x.device_bytes),
            x.seconds
        );
    }
    s
}

fn steps(r: &TrialReport) -> String {
    let mut s = String::new();
    if !r.memory.steps.is_empty() {
        s += "\nsteps:\n";
    }
    // Only a GPU trial compiles kernels in its first step; a stream-only trial computes nothing.
    let stream = matches!(r.evidence(), Some(oom_trial::Evidence::Stream { .. }));
    let compiles = r.backend() == Some(oom_trial::BackendKind::Cuda) && !stream;
    for st in &r.memory.steps {
        let loss = match stream {
            true => "loss not computed (stream only)".to_string(),
            false => format!("loss {:.4}", st.loss),
        };
        s += &format!(
            "  step {}  {:>7.2} s{}  in use after {:>10}  {loss}\n",
            st.step + 1,
            st.seconds,
            if st.step == 0 && compiles {
                " (includes kernel compilation)"
            } else {
                "                              "
            },
            fmt_bytes(st.in_use_after_bytes),
        );
    }
    if let Some(l) = (r.memory.leak_bytes_per_step).filter(|l| *l >= oom_trial::LEAK_BYTES) {
        s += &format!(
            "possible leak: in-use memory grows by {} per step after the first\n",
            fmt_bytes(l as u64)
        );
    }
    if let (Some(ready), Some(built)) = (r.timing.ready_seconds, r.timing.built_seconds) {
        s += &format!(
            "time: device ready after {ready:.1} s (process, context, ceiling), model built after {built:.1} s, trial {:.1} s\n",
            r.timing.wall_seconds
        );
    }
    s
}

/// The estimate's step: what it holds after it; it has no loss and took no time.
fn estimated_steps(r: &TrialReport) -> String {
    r.memory
        .steps
        .iter()
        .map(|st| {
            format!(
                "\nestimated: {} held after step {} (no model ran: no loss, no time)\n",
                fmt_bytes(st.in_use_after_bytes),
                st.step + 1
            )
        })
        .collect()
}

/// Where the device and the replay of its stream disagree, and where several device streams were
/// replayed as one: said, never silently.
fn replay_note(r: &TrialReport) -> String {
    let Some(a) = &r.memory.allocator else {
        return String::new();
    };
    let mut s = String::new();
    if r.replay_disagrees() {
        s += "the device fitted under the ceiling, but PyTorch's allocator replaying its stream \
              does not: the device's verdict stands\n";
    }
    if a.streams > 1 {
        s += &format!(
            "{} device streams made requests; the replay treats them as one stream\n",
            a.streams
        );
    }
    s
}

fn ending(r: &TrialReport) -> String {
    let mut s = "\n".to_string();
    let of = r.ceiling_bytes().map(|c| format!(" of {}", fmt_bytes(c)));
    // A run replayed through the caching allocator: what it needs, whatever its outcome.
    if let (Some(_), Some(c)) = (&r.memory.allocator, r.ceiling_bytes()) {
        s += &format!("{}\n", super::memory::need_text(r, c));
        s += &replay_note(r);
    } else if let (Some(at), Some(o)) = (r.failed_at(), &r.oom()) {
        // An out-of-memory's figure is what it tried to hold, never the lower reading before it.
        s += &format!(
            "tried to hold: {}{} ({} in use + {} requested)\n",
            fmt_bytes(at),
            of.clone().unwrap_or_default(),
            fmt_bytes(at - o.bytes.unwrap_or(0)),
            o.bytes.map(fmt_bytes).unwrap_or_else(|| "?".into())
        );
    } else if let Some(p) = r.memory.peak_bytes {
        let source = r.memory.peak_source.as_ref().map(|w| format!(" ({w})"));
        s += &format!(
            "peak: {}{}{}\n",
            fmt_bytes(p),
            of.unwrap_or_default(),
            source.unwrap_or_default()
        );
    }
    if let Some(o) = &r.oom() {
        s += &format!(
            "OUT OF MEMORY in step {} during {} after {}{}{}\n  {}\n",
            o.step.unwrap_or(0) + 1,
            o.phase.map(|p| p.name()).unwrap_or("setup"),
            o.stage.as_ref().map_or("start", |s| s.name()),
            o.in_use_bytes
                .map(|b| format!(", with {} in use", fmt_bytes(b)))
                .unwrap_or_default(),
            o.bytes
                .map(|b| format!(", allocating {} more", fmt_bytes(b)))
                .unwrap_or_default(),
            o.message
        );
    }
    if let Some(e) = &r.error() {
        s += &format!("{}: {e}\n", r.outcome().name().to_uppercase());
    }
    s
}
