//! The diagnosis as a user reads it (stdout; the JSON is `report_json.rs`). Verdict first, then the
//! boundaries with measured peaks on both sides, where memory crosses the ceiling, the modules, the
//! fixes that fit, the minimal failing configuration, and the line that reproduces it.

use super::context::{Context, EXPANDABLE};
use super::memory;
use crate::kinds::AxisKind;
use oom_search::{AxisSearch, AxisVerdict, Diagnosis, ModulesVerdict, Outcome, Probe};
use oom_trial::fmt_bytes;

/// A probe's figure: what it needs where its run was replayed, the peak of a fit, what was in use
/// when one ran out of memory on the device.
fn peak(p: &Probe, cx: &Context<'_>) -> String {
    if let Some(f) = super::figure(&p.measurement) {
        return f;
    }
    match p.measurement.outcome {
        Outcome::Oom => cx
            .report(&p.candidate)
            .map(memory::oom_text)
            .unwrap_or_else(|| "out of memory".into()),
        Outcome::Inconclusive => "inconclusive".into(),
        Outcome::Fits => "-".into(),
    }
}

fn boundary_row(a: &AxisSearch, cx: &Context<'_>) -> String {
    let verbose = cx.verbose;
    let plain = match verbose {
        true => format!("; plain bisection {}", a.plain_bisection),
        false => String::new(),
    };
    // The estimate is no measurement: its answers repeat by construction, so nothing is confirmed.
    let (trials, again) = match cx.estimate {
        true => ("estimates", "repeated"),
        false => ("trials", "confirm"),
    };
    let trials = format!(
        "{trials} {} (+{} {again}{plain})",
        a.trials - a.confirmations,
        a.confirmations
    );
    match &a.verdict {
        AxisVerdict::Boundary {
            last_fit,
            first_oom,
            confirmed,
        } => format!(
            "  {:<7} last fit {:<22} first OOM {:<34} {trials}{}",
            a.axis,
            format!("{} ({})", last_fit.label, peak(last_fit, cx)),
            format!("{} ({})", first_oom.label, peak(first_oom, cx)),
            if cx.estimate {
                AxisKind::of(a.tag)
                    .and_then(AxisKind::estimate_error)
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            } else if *confirmed {
                confirmed_runs(a, last_fit, first_oom)
            } else if a.confirmations > 0 {
                ", unconfirmed (the budget ran out before the re-runs)".to_string()
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

/// `, confirmed 2/2`: how many runs of the sides re-run agreed, and which side ran once (its need
/// away from the ceiling, or the device's own out-of-memory).
fn confirmed_runs(a: &AxisSearch, last_fit: &Probe, first_oom: &Probe) -> String {
    let once = |p: &Probe| format!(" ({} ran once)", p.label);
    match (a.reruns.last_fit, a.reruns.first_oom) {
        (0, 0) => String::new(),
        (0, n) => format!(", confirmed {}/{}{}", n + 1, n + 1, once(last_fit)),
        (n, 0) => format!(", confirmed {}/{}{}", n + 1, n + 1, once(first_oom)),
        (n, _) => format!(", confirmed {}/{}", n + 1, n + 1),
    }
}

pub fn text(d: &Diagnosis, cx: &Context<'_>) -> String {
    let mut s = header(cx);
    s += &verdict(d, cx);
    s += &cards(d, cx);
    s += &super::diagnosis::text(d, cx);
    s += &where_the_memory_is(cx);
    s += &boundaries(d, cx);
    s += &super::evidence::table(cx);
    s += &modules(d);
    s += &fixes(d, cx);
    s += &minimal(d, cx);
    s += &footer(d, cx);
    s
}

/// How many training steps a trial runs (`train.steps`, `train.one_step_below`).
fn steps_per_trial(cx: &Context) -> String {
    // A stream-only trial runs every step: they cost the host little.
    let share = match cx.streams {
        Some(_) => 0.0,
        None => cx.config.one_step_below(),
    };
    match (cx.steps, share > 0.0) {
        (1, _) => "1 training step per trial".into(),
        (n, false) => format!("{n} training steps per trial"),
        (n, true) => format!(
            "{n} training steps per trial, 1 where it stays under {:.0}% of the ceiling \
             (optimizer state made first)",
            share * 100.0
        ),
    }
}

/// What the memory model reproduces, in a few words.
pub fn memory_model_meaning(m: deeplab::MemoryModel) -> &'static str {
    match m {
        deeplab::MemoryModel::Pytorch => {
            "what PyTorch keeps for backward, a caching allocator on CUDA"
        }
        deeplab::MemoryModel::Burn => "burn 0.21's layers and memory pools",
    }
}

fn header(cx: &Context<'_>) -> String {
    let mut s = String::new();
    if cx.estimate {
        s += "*** ESTIMATE: every figure below is the model's memory estimate; no model ran. It \
              leaves out the pools' slack and the CUDA context, so it errs towards fitting, and \
              it misses attention's transients (accuracy against an H200: docs/estimate.md) ***\n";
        if let Some(c) = &cx.confirm {
            s += &format!("*** Confirm it on a GPU: {c} ***\n");
        }
    }
    s += &format!("oom-bisect: {}\n", cx.title);
    // What answers the trials: the user's command, or the built-in model under its memory model.
    let answered_by = match &cx.exec {
        Some(command) => format!(
            "every trial runs your command{}: {}",
            match cx.served {
                true =>
                    " (served: one process per worker answers first runs in turn; \
                         each re-run goes to one that ran no trial before)",
                false => "",
            },
            super::one_line(command, 400)
        ),
        None => format!(
            "memory model {} ({}), {}",
            cx.memory_model.name(),
            memory_model_meaning(cx.memory_model),
            steps_per_trial(cx)
        ),
    };
    s += &format!(
        "backend {}, ceiling {}, {answered_by}\n\n",
        cx.backend,
        cx.ceiling_text()
    );
    s += &super::evidence::line(cx);
    for n in &cx.notes {
        s += &format!("note: {n}\n");
    }
    if !cx.notes.is_empty() {
        s += "\n";
    }
    s
}

fn verdict(d: &Diagnosis, cx: &Context<'_>) -> String {
    let ceiling = cx.ceiling_text();
    let o = &d.original;
    match o.outcome {
        Outcome::Oom => {
            let run = cx.whole_run().map(|(r, _)| r).or(cx.need_report());
            let need = match (run, cx.ceiling) {
                (Some(n), Some(c)) => format!(": it {}", memory::need_text(n, c)),
                _ => format!(" under {ceiling}"),
            };
            format!(
                "Verdict: the original configuration runs OUT OF MEMORY{need}{}.\n",
                super::evidence::mark(cx, &oom_search::Candidate::original())
            )
        }
        Outcome::Fits => {
            let (p, what) = match o.need_bytes {
                Some(n) => (n, "needs"),
                None => (o.peak_bytes.unwrap_or(0), "peak"),
            };
            format!(
                "Verdict: the original configuration FITS: {what} {} of {ceiling}, headroom {}{}.\n",
                fmt_bytes(p),
                cx.ceiling
                    .map(|c| fmt_bytes(c.saturating_sub(p)))
                    .unwrap_or_else(|| "unknown".into()),
                super::evidence::mark(cx, &oom_search::Candidate::original())
            )
        }
        Outcome::Inconclusive => format!(
            "Verdict: the original configuration could not be measured: {}\n",
            o.note
        ),
    }
}

/// Which of `--gpu help`'s cards the original and each fix fit on, from the needs measured: on
/// CUDA, where a need counts the CUDA context as the card does.
fn cards(d: &Diagnosis, cx: &Context<'_>) -> String {
    if !cx.on_cuda() {
        return String::new();
    }
    let need = cx.whole_run().and_then(|(r, _)| memory::whole(r));
    let Some(need) = d.original.need_bytes.or(need) else {
        return String::new();
    };
    // Each fix's cards stand in its row of the fixes' table.
    format!(
        "Fits on: {}.
",
        fits_on_text(need)
    )
}

/// The cards `--gpu` knows that a need fits, in one short line ordered by memory: `a100-80 (79.25
/// GiB) and the 2 larger cards; not the 16 smaller (the largest: a100-40, 39.50 GiB)`.
fn fits_on_text(need: u64) -> String {
    let (fit, not) = crate::gpus::fits_on(need);
    let size = |name: &str| crate::gpus::lookup(name).map_or(String::new(), |(b, _)| fmt_bytes(b));
    let larger = |n: usize| match n {
        0 => String::new(),
        1 => " and the one larger card".into(),
        n => format!(" and the {n} larger cards"),
    };
    match (fit.first(), not.last()) {
        (None, _) => format!(
            "none of the cards --gpu knows (it needs {})",
            fmt_bytes(need)
        ),
        (Some(_), None) => "every card --gpu knows".into(),
        (Some(smallest), Some(largest_not)) => format!(
            "{smallest} ({}){}; not the {} smaller (the largest: {largest_not}, {})",
            size(smallest),
            larger(fit.len() - 1),
            not.len(),
            size(largest_not)
        ),
    }
}

/// The smallest card `--gpu` knows that a need fits: `rtx3090 and larger`.
fn smallest_card(need: u64) -> String {
    match crate::gpus::fits_on(need).0.first() {
        Some(c) => format!("on {c} and larger"),
        None => "on no card --gpu knows".into(),
    }
}

/// What the peak of a whole run is made of.
fn where_the_memory_is(cx: &Context<'_>) -> String {
    let (Some((r, which)), Some(parts)) = (cx.whole_run(), cx.breakdown()) else {
        return String::new();
    };
    let whole = memory::whole(r).unwrap_or(0);
    let at = match r.memory.allocator {
        Some(_) => format!("what {which} needs"),
        None => format!("the peak of {which}"),
    };
    format!(
        "\nWhere the memory is, in {at} ({}):\n{}",
        fmt_bytes(whole),
        memory::breakdown_text(&parts, whole)
    )
}

/// The boundary of the axis named `axis`, when it has one.
fn boundaries(d: &Diagnosis, cx: &Context<'_>) -> String {
    let mut s = String::new();
    if !d.axes.is_empty() {
        s += "\nBoundaries (one axis at a time, the others as configured):\n";
        for a in &d.axes {
            s += &format!("{}\n", boundary_row(a, cx));
        }
        if let Some((fit, oom)) = d.boundary(AxisKind::Depth.tag()) {
            s += &format!(
                "\nWhere memory crosses the ceiling: the model still fits truncated after {} ({}), and runs out \
                 of memory once {} is included.\n",
                fit.label,
                peak(fit, cx),
                oom.label
            );
        }
        if let Some((fit, oom)) = d.boundary(AxisKind::Phase.tag()) {
            let why = match super::diagnosis::phase_boundary(d).map(|(_, oom)| oom) {
                Some(deeplab::Phase::Backward) => {
                    "the tensors saved for backward and the gradients tip it over"
                }
                Some(deeplab::Phase::Step) => "the optimizer state tips it over",
                _ => "the forward pass alone does not fit",
            };
            // Where the original itself fails, in the diagnosis's words.
            let place = super::diagnosis::failing_place(d, cx)
                .map(|p| format!("; it {p}"))
                .unwrap_or_default();
            s += &format!(
                "Phase: {} fits ({}), {} does not: {why}{place}.\n",
                fit.label,
                peak(fit, cx),
                oom.label
            );
        }
    }
    if !d.capacity.is_empty() {
        s += "\nCapacity (largest value that still fits, the others as configured):\n";
        for a in &d.capacity {
            s += &format!("{}\n", boundary_row(a, cx));
        }
    }
    s
}

fn modules(d: &Diagnosis) -> String {
    let verdict = match &d.modules {
        Some(ModulesVerdict::Culprits {
            items,
            measurement,
            one_minimal,
            also_alone,
            ..
        }) => format!(
            "\nModules: swapping {{{}}} for identity makes it fit ({}){}{}.\n",
            items.join(", "),
            super::figure(measurement).unwrap_or_else(|| measurement.outcome.to_string()),
            match (items.len(), *one_minimal) {
                (1, _) => "",
                (_, true) => "; no single module does, and swapping any one fewer does not",
                (_, false) => "; not proven minimal (some probes were inconclusive)",
            },
            if also_alone.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} alone also make{} it fit",
                    also_alone.join(", "),
                    if also_alone.len() == 1 { "s" } else { "" }
                )
            }
        ),
        Some(ModulesVerdict::NoSetFits { message })
        | Some(ModulesVerdict::Inconclusive { message }) => format!("\nModules: {message}.\n"),
        None => return String::new(),
    };
    verdict + &module_costs(d)
}

/// Every module item swapped alone, most memory saved first: fits by peak, then the ones that
/// still run out of memory in the model's order (the peak before their failure, which no row
/// shows, moves between runs and would shuffle them).
fn module_costs(d: &Diagnosis) -> String {
    if d.module_costs.is_empty() {
        return String::new();
    }
    let mut rows: Vec<&oom_search::ModuleCost> = d.module_costs.iter().collect();
    rows.sort_by_key(|c| {
        let m = &c.measurement;
        // As printed (a tenth of a MiB), then by label: an out-of-memory's need is its stream's
        // up to the refusal, which the host's own requests move by a few KiB from run to run.
        let tenths = |b: u64| (b as f64 / f64::from(1 << 20) * 10.0).round() as u64;
        let figure = match (m.need_bytes, m.outcome) {
            (Some(need), _) => (false, tenths(need)),
            (None, Outcome::Fits) => (false, m.peak_bytes.map_or(u64::MAX, tenths)),
            _ => (true, 0),
        };
        (figure, c.label.clone())
    });
    let mut s = "  each module swapped alone for identity:\n".to_string();
    for c in rows {
        let cell = match &c.not_run {
            Some(why) => format!("OOM    {why}"),
            None => super::outcome_cell(&c.measurement),
        };
        s += &format!("    {:<28} {cell}\n", c.label);
    }
    s
}

fn fixes(d: &Diagnosis, cx: &Context<'_>) -> String {
    if d.fixes.is_empty() {
        return String::new();
    }
    let how = if cx.estimate { "estimated" } else { "measured" };
    let mut s = format!("\nFixes, each {how} on its own:\n");
    let mut fixes: Vec<_> = d.fixes.iter().collect();
    fixes.sort_by_key(|f| match f.measurement.outcome {
        Outcome::Fits => 0,
        Outcome::Oom => 1,
        Outcome::Inconclusive => 2,
    });
    for f in fixes {
        let cell = match (&f.implied_by, super::figure(&f.measurement), &f.not_run) {
            (Some(by), Some(figure), _) => {
                format!("fits   as {by} does ({figure}), which holds at least as much")
            }
            (_, _, Some(why)) => format!("OOM    {why}"),
            _ => super::outcome_cell(&f.measurement),
        };
        let cards = match (
            cx.on_cuda(),
            f.measurement.outcome,
            f.measurement.need_bytes,
        ) {
            (true, Outcome::Fits, Some(need)) => format!("; {}", smallest_card(need)),
            _ => String::new(),
        };
        s += &format!("  {:<40} {cell}{cards}\n", f.change);
    }
    if let Some((need, fits)) = cx.expandable() {
        let verdict = if fits { "fits " } else { "OOM  " };
        let cards = match cx.on_cuda() && fits {
            true => format!("; {}", smallest_card(need)),
            false => String::new(),
        };
        s += &format!(
            "  {EXPANDABLE:<40} {verdict}  needs {}, the original's stream replayed with \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True{cards}\n",
            fmt_bytes(need)
        );
    }
    s
}

fn minimal(d: &Diagnosis, cx: &Context<'_>) -> String {
    let Some(m) = &d.minimal_failing else {
        return String::new();
    };
    let proven = match (m.one_minimal, cx.verbose) {
        (true, true) => " (1-minimal)",
        (true, false) => "",
        (false, true) => " (not proven 1-minimal)",
        (false, false) => " (not every change back was measured)",
    };
    let mut s = format!("\nMinimal failing configuration{proven}: {}\n", m.candidate);
    if let Some(p) = &cx.minimal_path {
        s += &format!("  saved to {p}\n");
    }
    for n in &m.neighbours {
        let figure = super::figure(&n.measurement).unwrap_or_default();
        let what = match (n.measurement.outcome, &n.implied_by) {
            (Outcome::Fits, Some(by)) => format!("fits, as {by} does ({figure}), which holds more"),
            (Outcome::Fits, None) => format!("fits, {figure}"),
            (Outcome::Oom, _) => "still OOM".into(),
            (Outcome::Inconclusive, _) => format!("inconclusive: {}", n.measurement.note),
        };
        s += &format!("  {:<40} {what}\n", n.change);
    }
    s
}

fn footer(d: &Diagnosis, cx: &Context<'_>) -> String {
    let mut s = format!(
        "\nTrials: {} {}{} in {:.0} s{}.{}\n",
        d.trials.len(),
        if cx.estimate { "estimated" } else { "run" },
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
        s += &format!("Reproduce with: {r}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use oom_search::{AxisSearch, AxisVerdict, Probe, Sides};
    use oom_search::{Candidate, Diagnosis, Measurement, ModuleCost, Outcome};

    /// Runs of each side that agreed, and the side that ran once.
    #[test]
    fn a_confirmation_counts_the_runs_of_each_side() {
        let probe = |label: &str, outcome| Probe {
            index: 0,
            label: label.into(),
            candidate: Candidate::original(),
            measurement: Measurement::new(outcome),
        };
        let search = |last_fit, first_oom| AxisSearch {
            axis: "batch".into(),
            tag: crate::kinds::AxisKind::Batch.tag(),
            verdict: AxisVerdict::Boundary {
                last_fit: probe("2", Outcome::Fits),
                first_oom: probe("3", Outcome::Oom),
                confirmed: true,
            },
            trials: 5,
            confirmations: (last_fit + first_oom) as usize,
            reruns: Sides {
                last_fit,
                first_oom,
            },
            plain_bisection: 4,
        };
        let (fit, oom) = (probe("2", Outcome::Fits), probe("3", Outcome::Oom));
        let runs = |a, b| super::confirmed_runs(&search(a, b), &fit, &oom);
        assert_eq!(runs(1, 1), ", confirmed 2/2");
        assert_eq!(runs(0, 2), ", confirmed 3/3 (2 ran once)");
        assert_eq!(runs(0, 0), "");
    }

    fn cost(label: &str, outcome: Outcome, peak_gib: u64) -> ModuleCost {
        let mut measurement = Measurement::new(outcome);
        measurement.peak_bytes = Some(peak_gib << 30);
        ModuleCost {
            label: label.into(),
            ids: vec![label.into()],
            candidate: Candidate::original(),
            measurement,
            not_run: None,
        }
    }

    /// Fits first, lowest peak first; the out-of-memory rows in the model's order, whatever the
    /// peaks before their failures (which move between runs and are not shown).
    #[test]
    fn module_rows_do_not_move_with_unshown_peaks() {
        let d = Diagnosis {
            module_costs: vec![
                cost("aspp", Outcome::Oom, 20),
                cost("layer4", Outcome::Fits, 19),
                cost("decoder", Outcome::Oom, 3),
                cost("layer3", Outcome::Fits, 18),
            ],
            ..Diagnosis::of(Measurement::new(Outcome::Oom))
        };
        let labels: Vec<String> = super::module_costs(&d)
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect();
        assert_eq!(labels, ["layer3", "layer4", "aspp", "decoder"]);
    }
}
