//! The diagnosis as a user reads it (stdout) and as JSON (`--json`). Verdict first, then the
//! boundaries with measured peaks on both sides, where memory crosses the ceiling, the modules, the
//! fixes that fit, the minimal failing configuration, and the line that reproduces it.

use oom_search::{AxisSearch, AxisVerdict, Diagnosis, ModulesVerdict, Outcome, Probe};
use oom_trial::{fmt_bytes, TrialReport};
use serde_json::{json, Value};
use std::fmt::Write;

/// What the report needs besides the diagnosis.
pub struct Context<'a> {
    pub title: String,
    pub backend: String,
    pub original_report: Option<&'a TrialReport>,
    pub minimal_path: Option<String>,
    pub minimal_config: Option<toml::Table>,
    pub reproduce: Option<String>,
    pub journal: Option<String>,
    pub resumed: usize,
    pub wall_seconds: f64,
    pub fake: bool,
}

fn peak(p: &Probe) -> String {
    match (p.measurement.outcome, p.measurement.peak_bytes) {
        (Outcome::Fits, Some(b)) => fmt_bytes(b),
        (Outcome::Oom, _) => "out of memory".into(),
        (Outcome::Inconclusive, _) => "inconclusive".into(),
        (_, None) => "-".into(),
    }
}

fn boundary_row(a: &AxisSearch) -> String {
    let trials = format!(
        "{} (+{} confirm; plain bisection {})",
        a.trials - a.confirmations,
        a.confirmations,
        a.plain_bisection
    );
    match &a.verdict {
        AxisVerdict::Boundary {
            last_fit,
            first_oom,
            confirmed,
        } => format!(
            "  {:<7} last fit {:<22} first OOM {:<22} trials {trials}{}",
            a.axis,
            format!("{} ({})", last_fit.label, peak(last_fit)),
            first_oom.label,
            if *confirmed {
                let n = a.confirmations / 2 + 1;
                format!(", confirmed {n}/{n}")
            } else {
                String::new()
            }
        ),
        AxisVerdict::NotTheCause { message, .. }
        | AxisVerdict::AllFit { message, .. }
        | AxisVerdict::Inconclusive { message, .. }
        | AxisVerdict::Unstable { message, .. } => format!("  {:<7} {message}", a.axis),
    }
}

pub fn text(d: &Diagnosis, cx: &Context<'_>) -> String {
    let mut s = String::new();
    let ceiling = fmt_bytes(d.ceiling_bytes);
    if cx.fake {
        let _ = writeln!(
            s,
            "*** FAKE TRIALS: answers come from the analytic estimate, not from runs ***"
        );
    }
    let _ = writeln!(s, "oom-bisect: {}", cx.title);
    let _ = writeln!(s, "backend {}, ceiling {ceiling}", cx.backend);
    let _ = writeln!(s);
    let o = &d.original;
    match o.outcome {
        Outcome::Oom => {
            let at = cx
                .original_report
                .and_then(|r| r.oom.as_ref())
                .map(|x| {
                    format!(
                        " in step {} after {}{}",
                        x.step.unwrap_or(0),
                        x.stage.as_deref().unwrap_or("start"),
                        x.bytes
                            .map(|b| format!(", allocating {}", fmt_bytes(b)))
                            .unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "Verdict: the original configuration runs OUT OF MEMORY under {ceiling}{at}."
            );
        }
        Outcome::Fits => {
            let p = o.peak_bytes.unwrap_or(0);
            let _ = writeln!(
                s,
                "Verdict: the original configuration FITS: peak {} of {ceiling}, headroom {}.",
                fmt_bytes(p),
                fmt_bytes(d.ceiling_bytes.saturating_sub(p))
            );
        }
        Outcome::Inconclusive => {
            let _ = writeln!(
                s,
                "Verdict: the original configuration could not be measured: {}",
                o.note
            );
        }
    }
    if !d.axes.is_empty() {
        let _ = writeln!(
            s,
            "\nBoundaries (one axis at a time, the others as configured):"
        );
        for a in &d.axes {
            let _ = writeln!(s, "{}", boundary_row(a));
        }
        if let Some(a) = d.axes.iter().find(|a| a.axis == "depth") {
            if let AxisVerdict::Boundary {
                last_fit,
                first_oom,
                ..
            } = &a.verdict
            {
                let _ = writeln!(
                    s,
                    "\nWhere memory crosses the ceiling: the model still fits truncated after {} ({}), and runs out \
                     of memory once {} is included.",
                    last_fit.label,
                    peak(last_fit),
                    first_oom.label
                );
            }
        }
        if let Some(a) = d.axes.iter().find(|a| a.axis == "phase") {
            if let AxisVerdict::Boundary {
                last_fit,
                first_oom,
                ..
            } = &a.verdict
            {
                let why = match first_oom.label.as_str() {
                    "backward" => "the tensors saved for backward and the gradients",
                    "step" => "the optimizer state",
                    _ => "the forward pass",
                };
                let _ = writeln!(
                    s,
                    "Phase: {} fits ({}), {} does not: the memory is in {why}.",
                    last_fit.label,
                    peak(last_fit),
                    first_oom.label
                );
            }
        }
    }
    if !d.capacity.is_empty() {
        let _ = writeln!(
            s,
            "\nCapacity (largest value that still fits, the others as configured):"
        );
        for a in &d.capacity {
            let _ = writeln!(s, "{}", boundary_row(a));
        }
    }
    match &d.modules {
        Some(ModulesVerdict::Culprits {
            items,
            measurement,
            one_minimal,
            ..
        }) => {
            let _ = writeln!(
                s,
                "\nModules: swapping {{{}}} for identity makes it fit ({}){}.",
                items.join(", "),
                measurement
                    .peak_bytes
                    .map(fmt_bytes)
                    .unwrap_or_else(|| measurement.outcome.to_string()),
                if *one_minimal {
                    "; swapping any one fewer does not (1-minimal)"
                } else {
                    "; not proven 1-minimal (some probes were inconclusive)"
                }
            );
        }
        Some(ModulesVerdict::NoSetFits { message })
        | Some(ModulesVerdict::Inconclusive { message }) => {
            let _ = writeln!(s, "\nModules: {message}.");
        }
        None => {}
    }
    if !d.fixes.is_empty() {
        let _ = writeln!(s, "\nFixes, each measured on its own:");
        let mut fixes: Vec<_> = d.fixes.iter().collect();
        fixes.sort_by_key(|f| match f.measurement.outcome {
            Outcome::Fits => 0,
            Outcome::Oom => 1,
            Outcome::Inconclusive => 2,
        });
        for f in fixes {
            let what = match f.measurement.outcome {
                Outcome::Fits => format!(
                    "fits   peak {}",
                    f.measurement.peak_bytes.map(fmt_bytes).unwrap_or_default()
                ),
                Outcome::Oom => "OOM".into(),
                Outcome::Inconclusive => format!("??     {}", f.measurement.note),
            };
            let _ = writeln!(s, "  {:<40} {what}", f.change);
        }
    }
    if let Some(m) = &d.minimal_failing {
        let _ = writeln!(
            s,
            "\nMinimal failing configuration{}: {}",
            if m.one_minimal {
                " (1-minimal)"
            } else {
                " (not proven 1-minimal)"
            },
            m.candidate
        );
        if let Some(p) = &cx.minimal_path {
            let _ = writeln!(s, "  saved to {p}");
        }
        for n in &m.neighbours {
            let _ = writeln!(
                s,
                "  {:<40} {}",
                n.change,
                match n.measurement.outcome {
                    Outcome::Fits => format!(
                        "fits, peak {}",
                        n.measurement.peak_bytes.map(fmt_bytes).unwrap_or_default()
                    ),
                    Outcome::Oom => "still OOM".into(),
                    Outcome::Inconclusive => format!("inconclusive: {}", n.measurement.note),
                }
            );
        }
    }
    let _ = writeln!(
        s,
        "\nTrials: {} run{} in {:.0} s{}.{}",
        d.trials.len(),
        if cx.resumed > 0 {
            format!(" ({} answered from the journal)", cx.resumed)
        } else {
            String::new()
        },
        cx.wall_seconds,
        cx.journal
            .as_ref()
            .map(|j| format!("; journal {j}"))
            .unwrap_or_default(),
        if d.budget_exhausted {
            " The budget (--max-trials or --max-time) ran out: unmeasured steps are inconclusive."
        } else {
            ""
        }
    );
    if let Some(r) = &cx.reproduce {
        let _ = writeln!(s, "Reproduce with: {r}");
    }
    s
}

fn probe_json(p: &Probe) -> Value {
    json!({
        "value": p.label,
        "candidate": p.candidate.to_sets(),
        "outcome": p.measurement.outcome,
        "peak_bytes": p.measurement.peak_bytes,
    })
}

pub fn json(d: &Diagnosis, cx: &Context<'_>, backend: &str) -> Value {
    let boundaries: Vec<Value> = d
        .axes
        .iter()
        .chain(d.capacity.iter())
        .map(|a| {
            let (kind, last_fit, first_oom, message) = match &a.verdict {
                AxisVerdict::Boundary {
                    last_fit,
                    first_oom,
                    ..
                } => ("boundary", Some(last_fit), Some(first_oom), None),
                AxisVerdict::NotTheCause { message, lowest } => {
                    ("not_the_cause", None, Some(lowest), Some(message))
                }
                AxisVerdict::AllFit { message, highest } => {
                    ("all_fit", Some(highest), None, Some(message))
                }
                AxisVerdict::Inconclusive {
                    message, lo, hi, ..
                } => ("inconclusive", lo.as_ref(), hi.as_ref(), Some(message)),
                AxisVerdict::Unstable {
                    message,
                    last_fit,
                    first_oom,
                } => ("unstable", Some(last_fit), Some(first_oom), Some(message)),
            };
            json!({
                "axis": a.axis,
                "kind": kind,
                "capacity": d.capacity.contains(a),
                "last_fit": last_fit.map(probe_json),
                "first_oom": first_oom.map(probe_json),
                "message": message,
                "trials": a.trials,
                "confirmations": a.confirmations,
                "plain_bisection_trials": a.plain_bisection,
            })
        })
        .collect();
    json!({
        "original": {
            "outcome": d.original.outcome,
            "peak_bytes": d.original.peak_bytes,
            "note": d.original.note,
            "oom": cx.original_report.and_then(|r| r.oom.clone()),
            "stages": cx.original_report.map(|r| r.stages.clone()),
        },
        "ceiling_bytes": d.ceiling_bytes,
        "backend": backend,
        "fake_trials": cx.fake,
        "boundaries": boundaries,
        "modules": d.modules,
        "fixes": d.fixes.iter().map(|f| json!({
            "change": f.change,
            "candidate": f.candidate.to_sets(),
            "outcome": f.measurement.outcome,
            "peak_bytes": f.measurement.peak_bytes,
        })).collect::<Vec<_>>(),
        "minimal_failing": d.minimal_failing.as_ref().map(|m| json!({
            "candidate": m.candidate.to_sets(),
            "config": cx.minimal_config,
            "file": cx.minimal_path,
            "outcome": m.measurement.outcome,
            "one_minimal": m.one_minimal,
            "neighbours": m.neighbours.iter().map(|n| json!({
                "change": n.change,
                "candidate": n.candidate.to_sets(),
                "outcome": n.measurement.outcome,
                "peak_bytes": n.measurement.peak_bytes,
            })).collect::<Vec<_>>(),
        })),
        "trials": {
            "count": d.trials.len(),
            "resumed_from_journal": cx.resumed,
            "budget_exhausted": d.budget_exhausted,
            "list": d.trials,
        },
        "wall_seconds": cx.wall_seconds,
        "reproduce": cx.reproduce,
    })
}

/// The per-stage memory table of one trial (`oom-bisect trial`).
pub fn trial_table(r: &TrialReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "outcome: {}   backend: {}   ceiling: {}   context: {}",
        r.outcome.name(),
        r.device.clone().unwrap_or_else(|| "-".into()),
        r.ceiling_bytes.map(fmt_bytes).unwrap_or_else(|| "-".into()),
        r.context_bytes.map(fmt_bytes).unwrap_or_else(|| "-".into()),
    );
    if let Some(p) = r.params {
        let _ = writeln!(
            s,
            "parameters: {p}   held between steps (parameters, optimizer state, batch): {}",
            r.base_bytes.map(fmt_bytes).unwrap_or_default()
        );
    }
    let last_step = r.stages.iter().map(|x| x.step).max();
    if let Some(step) = last_step {
        let _ = writeln!(
            s,
            "\nstep {step} (the last one reached), memory after each stage:"
        );
        let _ = writeln!(
            s,
            "  {:<26} {:<9} {:>12} {:>12} {:>9}",
            "stage", "phase", "in use", "device", "at"
        );
        for x in r.stages.iter().filter(|x| x.step == step) {
            let _ = writeln!(
                s,
                "  {:<26} {:<9} {:>12} {:>12} {:>7.1} s",
                x.name,
                x.phase.name(),
                fmt_bytes(x.in_use_bytes),
                fmt_bytes(x.device_bytes),
                x.seconds
            );
        }
    }
    if !r.steps.is_empty() {
        let _ = writeln!(s, "\nsteps:");
        for st in &r.steps {
            let _ = writeln!(
                s,
                "  step {}  {:>7.2} s{}  in use after {:>10}  loss {:.4}",
                st.step,
                st.seconds,
                if st.step == 0 {
                    " (includes kernel compilation)"
                } else {
                    "                              "
                },
                fmt_bytes(st.in_use_after_bytes),
                st.loss
            );
        }
    }
    if let Some(l) = r.leak_bytes_per_step {
        if l > 0 {
            let _ = writeln!(
                s,
                "possible leak: in-use memory grows by {} per step after the first",
                fmt_bytes(l as u64)
            );
        }
    }
    if let (Some(ready), Some(built)) = (r.ready_seconds, r.built_seconds) {
        let _ = writeln!(
            s,
            "time: device ready after {ready:.1} s (process, context, ceiling), model built after {built:.1} s, trial {:.1} s",
            r.wall_seconds
        );
    }
    let _ = writeln!(s);
    if let Some(p) = r.peak_bytes {
        let _ = writeln!(
            s,
            "peak: {}{}",
            fmt_bytes(p),
            r.ceiling_bytes
                .map(|c| format!(" of {}", fmt_bytes(c)))
                .unwrap_or_default()
        );
    }
    if let Some(o) = &r.oom {
        let _ = writeln!(
            s,
            "OUT OF MEMORY in step {} during {} after {}{}\n  {}",
            o.step.unwrap_or(0),
            o.phase.map(|p| p.name()).unwrap_or("setup"),
            o.stage.as_deref().unwrap_or("start"),
            o.bytes
                .map(|b| format!(", allocating {}", fmt_bytes(b)))
                .unwrap_or_default(),
            o.message
        );
    }
    if let Some(e) = &r.error {
        let _ = writeln!(s, "{}: {e}", r.outcome.name().to_uppercase());
    }
    s
}
