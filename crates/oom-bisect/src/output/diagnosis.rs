//! The diagnosis in plain words, first in the report: how far over, where it runs out, which single
//! changes make it fit (the least change to the training first), the largest batch and input size
//! that fit, and what became of each suspect of the forum thread. Every sentence restates a trial
//! printed further down; nothing here is measured anew, and the one figure no trial gives (what a
//! float32 run would need in float64) says it is the model's estimate.

use super::context::{Context, EXPANDABLE};
use super::memory::Part;
use crate::kinds::{self, AxisKind};
use crate::space::estimated_peak;
use oom_search::{AxisVerdict, Diagnosis, FixResult, ModulesVerdict, Outcome};
use oom_trial::fmt_bytes;

/// " (needs 24.1 GiB)": a fit's figure, for a sentence.
fn figure_of(m: &oom_search::Measurement) -> String {
    super::figure(m)
        .map(|f| format!(" ({f})"))
        .unwrap_or_default()
}

/// A fix's figure; one that another fix's fit settles needs at most what that one needs.
fn fix_figure(f: &FixResult) -> String {
    match (&f.implied_by, super::Figure::of(&f.measurement)) {
        (Some(_), Some(super::Figure::Need(n))) => {
            format!(" (needs at most {})", fmt_bytes(n))
        }
        _ => figure_of(&f.measurement),
    }
}

/// The plain-words block, or nothing when the original did not run out of memory.
pub fn text(d: &Diagnosis, cx: &Context<'_>) -> String {
    if d.original.outcome != Outcome::Oom {
        return String::new();
    }
    let parts = cx.breakdown();
    let split = parts.as_deref().map(Split::of);
    let mut lines: Vec<String> = vec![];
    lines.extend(where_it_fails(d, cx));
    lines.extend(in_short(d, cx, split.as_ref()));
    lines.extend(split.as_ref().map(fixed_share));
    lines.extend(what_fits(d, cx));
    lines.extend(suspects(d, cx));
    let mut s = "\nDiagnosis:\n".to_string();
    for l in lines {
        s += &format!("  - {l}\n");
    }
    s
}

fn phase_words(p: deeplab::Phase) -> &'static str {
    match p {
        deeplab::Phase::Forward => "in the forward pass",
        deeplab::Phase::Backward => "in the backward pass",
        deeplab::Phase::Step => "in the optimizer step",
    }
}

/// `a, b and c`.
fn listed(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The breakdown of the peak split into what the model and optimizer fix and the rest: the one
/// home of the fixed share both sentences of the diagnosis give.
struct Split<'a> {
    total: u64,
    fixed: Vec<&'a Part>,
    rest: Vec<&'a Part>,
    fixed_bytes: u64,
}

impl<'a> Split<'a> {
    fn of(parts: &'a [Part]) -> Split<'a> {
        let (fixed, rest): (Vec<_>, Vec<_>) = parts.iter().partition(|p| p.fixed);
        Split {
            total: parts.iter().map(|p| p.bytes).sum::<u64>().max(1),
            fixed_bytes: fixed.iter().map(|p| p.bytes).sum(),
            fixed,
            rest,
        }
    }

    /// Percent of the peak.
    fn share(&self, bytes: u64) -> f64 {
        100.0 * bytes as f64 / self.total as f64
    }

    /// The names of the parts that hold anything.
    fn names(&self, parts: &[&'a Part]) -> Vec<&'static str> {
        parts
            .iter()
            .filter(|p| p.bytes > 0)
            .map(|p| p.part)
            .collect()
    }
}

/// "fails in the decoder, in step 1's forward pass, with the optimizer state already made": the
/// stage the depth axis measured as the first that does not fit (else the one after the last
/// reading), the step and pass of the original's failure, and whether the phase axis found the
/// optimizer state, made before that pass, to tip it over. The diagnosis's first line and the
/// phase line say it in these words.
pub fn failing_place(d: &Diagnosis, cx: &Context<'_>) -> Option<String> {
    let oom = cx.original_report()?.oom()?;
    let stage = match boundary(d, AxisKind::Depth) {
        Some((_, first_oom)) => format!("in the {first_oom}"),
        None => format!("after {}", oom.stage.as_ref().map_or("start", |s| s.name())),
    };
    let pass = match oom.phase {
        Some(deeplab::Phase::Forward) => "forward pass",
        Some(deeplab::Phase::Backward) => "backward pass",
        Some(deeplab::Phase::Step) => "update",
        None => "start",
    };
    let step = deeplab::Phase::Step;
    let state = match phase_boundary(d) {
        Some((_, first_oom)) if first_oom == step && oom.phase != Some(step) => {
            ", with the optimizer state already made"
        }
        _ => "",
    };
    Some(format!(
        "fails {stage}, in step {}'s {pass}{state}",
        oom.step.unwrap_or(0) + 1
    ))
}

/// One sentence first that puts the answers to "where" together: what dominates the peak, so
/// where in the step the ceiling is crossed, and the block whose removal saves most. The lines
/// below give each on its own (failing stage, depth, phase, modules), which read alone seem to
/// disagree.
fn in_short(d: &Diagnosis, cx: &Context<'_>, split: Option<&Split<'_>>) -> Option<String> {
    let split = split?;
    let oom = cx.original_report()?.oom()?;
    let when = format!(
        "step {}, {}",
        oom.step.unwrap_or(0) + 1,
        oom.phase.map(phase_words).unwrap_or("at its start")
    );
    let state = on_top_of_the_state(d, split, oom.phase);
    let what = if 2 * split.fixed_bytes >= split.total {
        format!(
            "{} are {:.0}% of the peak, so the ceiling is crossed wherever the step's activations \
             come on top of them ({when})",
            listed(&split.names(&split.fixed)),
            split.share(split.fixed_bytes)
        )
    } else {
        let top = split.rest.iter().max_by_key(|p| p.bytes)?;
        format!(
            "{} are {:.0}% of the peak and grow with batch and input size; the ceiling is crossed \
             in {when}, after {}{state}",
            top.part,
            split.share(top.bytes),
            oom.stage.as_ref().map_or("start", |s| s.name())
        )
    };
    let block = match &d.modules {
        Some(ModulesVerdict::Culprits {
            items, measurement, ..
        }) if items.len() == 1 => format!(
            "; the block whose removal saves most is {}{}{}",
            items[0],
            carries(cx, &items[0])
                .map(|c| format!(", which carries {c}"))
                .unwrap_or_default(),
            without_it(measurement)
        ),
        _ => String::new(),
    };
    Some(format!("In short: {what}{block}."))
}

/// "; without it, it needs 228.0 MiB" (or "its peak is …" where the trial says no need).
fn without_it(m: &oom_search::Measurement) -> String {
    match super::Figure::of(m) {
        Some(super::Figure::Need(n)) => format!("; without it, it needs {}", fmt_bytes(n)),
        Some(super::Figure::AtLeast(n)) => {
            format!("; without it, it needs at least {}", fmt_bytes(n))
        }
        Some(super::Figure::Peak(p)) => format!("; without it, its peak is {}", fmt_bytes(p)),
        None => String::new(),
    }
}

/// ", on top of the optimizer state (54.3 MiB: forward and backward without an update fit)": where
/// the phase axis says the optimizer state tips it over but the failure comes before the update
/// (the state is made before the first step, or held from the step before), so that "crossed in the
/// forward pass" and "the optimizer state" are one story.
fn on_top_of_the_state(d: &Diagnosis, split: &Split<'_>, failed: Option<deeplab::Phase>) -> String {
    let step = deeplab::Phase::Step;
    if phase_boundary(d).map(|(_, oom)| oom) != Some(step) || failed == Some(step) {
        return String::new();
    }
    let state = split
        .fixed
        .iter()
        .find(|p| p.part == super::memory::OPTIMIZER_STATE);
    format!(
        ", on top of the optimizer state{}: forward and backward without an update fit",
        state
            .map(|p| format!(" ({})", fmt_bytes(p.bytes)))
            .unwrap_or_default()
    )
}

/// What the swap group `label` carries: "4,720,640 parameters, 36.0 MiB with their optimizer
/// state", so that a block is never named without why it weighs.
fn carries(cx: &Context<'_>, label: &str) -> Option<String> {
    let arch = deeplab::Architecture::new(cx.config).ok()?;
    let (_, ids) = arch.swap_groups().into_iter().find(|(l, _)| l == label)?;
    let params: u64 = (arch.params_by_module().into_iter())
        .filter(|(id, _)| ids.contains(id))
        .map(|(_, p)| p)
        .sum();
    let held = arch.resident(cx.config, params);
    Some(format!(
        "{} parameters, {} with their optimizer state",
        super::count(params),
        fmt_bytes(held.weights + held.optimizer_state)
    ))
}

/// Where the run crosses the ceiling, first: the stage, step and pass of the failure
/// ([`failing_place`]), what was in use and asked for, and the stage depth first tips it over.
fn where_it_fails(d: &Diagnosis, cx: &Context<'_>) -> Option<String> {
    let r = cx.original_report()?;
    let o = r.oom()?;
    let depth = boundary(d, AxisKind::Depth).map(|(fit, oom)| {
        format!("; truncated after {fit} the model fits, with {oom} it does not")
    });
    Some(format!(
        "It {} ({} after {}){}.",
        failing_place(d, cx)?,
        super::memory::oom_text(r),
        o.stage.as_ref().map_or("start", |s| s.name()),
        depth.unwrap_or_default()
    ))
}

/// What the peak is made of: the share the model and optimizer fix, and the rest.
fn fixed_share(split: &Split<'_>) -> String {
    format!(
        "{:.0}% of its peak ({}: {}) is fixed by the model and optimizer, which no change of \
         batch or input size reduces (fewer or smaller parameters, or another optimizer, do); the \
         rest is {}.",
        split.share(split.fixed_bytes),
        split.names(&split.fixed).join(", "),
        fmt_bytes(split.fixed_bytes),
        split.names(&split.rest).join(", ")
    )
}

/// The single changes measured to fit, least disruptive first, and the module swaps that do.
fn what_fits(d: &Diagnosis, cx: &Context<'_>) -> Vec<String> {
    let mut fits: Vec<&FixResult> = d
        .fixes
        .iter()
        .filter(|f| f.measurement.outcome == Outcome::Fits)
        .collect();
    fits.sort_by_key(|f| kinds::disruption(f));
    // The allocator setting changes no line of the training: it comes first.
    let allocator = cx.expandable().filter(|&(_, fits)| fits).map(|(need, _)| {
        format!(
            "{} (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; needs {}, replayed)",
            EXPANDABLE,
            fmt_bytes(need)
        )
    });
    let changes: Vec<String> = allocator
        .into_iter()
        .chain(
            fits.iter()
                .map(|f| format!("{}{}", f.change, fix_figure(f))),
        )
        .collect();
    // A run without the fixes (`--axes`) has nothing to say of single changes: its boundaries do.
    let mut out: Vec<String> = match (changes.is_empty(), d.fixes.is_empty()) {
        (_, true) => vec![],
        (true, false) => {
            vec!["No single change tried makes it fit (the fixes below list each one).".into()]
        }
        (false, false) => vec![format!(
            "Single changes that make it fit, the least change to the training first: {}.",
            changes.join("; ")
        )],
    };
    out.extend(fits.iter().filter_map(|f| diverged(f)));
    if let Some(ModulesVerdict::Culprits {
        items, measurement, ..
    }) = &d.modules
    {
        let carried: Vec<String> = (items.iter())
            .map(|i| match carries(cx, i) {
                Some(c) => format!("{i} ({c})"),
                None => i.clone(),
            })
            .collect();
        out.push(format!(
            "Swapping {} for identity also makes it fit{}, but changes the model.",
            carried.join(" and "),
            figure_of(measurement)
        ));
    }
    out
}

/// For a fix that fits in memory although its numbers diverged: what that means and what users of
/// the framework do about it.
fn diverged(f: &FixResult) -> Option<String> {
    let how = f.measurement.diverged.as_deref()?;
    let remedy = match kinds::FixKind::of(f.tag) {
        Some(kinds::FixKind::PureF16) => {
            " PyTorch users train in f16 with autocast and a GradScaler \
             (`train.precision = \"mixed-f16\"`), which keeps f32 master weights."
        }
        _ => "",
    };
    Some(format!(
        "{} fits in memory, but its numbers diverged ({how}): the steps ran and were measured, \
         the training would not learn.{remedy}",
        f.change
    ))
}

/// `(last fit, first OOM)` labels of the axis of `kind`, when it has a boundary.
/// The last phase that fits and the first that does not, where the phase axis has a boundary (its
/// values are `Phase::ALL`, in order).
pub fn phase_boundary(d: &Diagnosis) -> Option<(deeplab::Phase, deeplab::Phase)> {
    let (fit, oom) = d.boundary(AxisKind::Phase.tag())?;
    let phase = |i: usize| deeplab::Phase::ALL.get(i).copied();
    Some((phase(fit.index)?, phase(oom.index)?))
}

fn boundary(d: &Diagnosis, kind: AxisKind) -> Option<(String, String)> {
    d.boundary(kind.tag())
        .map(|(fit, oom)| (fit.label.clone(), oom.label.clone()))
}

/// Each suspect of the thread: a cause (with the boundary), ruled out (with the trial), or not
/// part of this configuration.
fn suspects(d: &Diagnosis, cx: &Context<'_>) -> Vec<String> {
    let mut causes = vec![];
    let mut ruled_out = vec![];
    for a in &d.axes {
        let Some(kind) = AxisKind::of(a.tag) else {
            continue;
        };
        match &a.verdict {
            AxisVerdict::Boundary {
                last_fit,
                first_oom,
                ..
            } if kind.is_cause() => causes.push(format!(
                "{} ({} fits, {} does not)",
                a.axis, last_fit.label, first_oom.label
            )),
            AxisVerdict::NotTheCause { lowest, .. } => ruled_out.push(format!(
                "{} ({} {} still runs out of memory)",
                kind.suspect(),
                a.axis,
                lowest.label
            )),
            _ => {}
        }
    }
    if let Some((_, phase)) = phase_boundary(d) {
        causes.push(match phase {
            deeplab::Phase::Step => {
                "the optimizer state (forward and backward without an update fit)".to_string()
            }
            deeplab::Phase::Backward => "the backward pass (the forward pass alone fits)".into(),
            deeplab::Phase::Forward => "the forward phase".into(),
        });
    }
    for f in d
        .fixes
        .iter()
        .filter(|f| f.measurement.outcome == Outcome::Oom)
    {
        ruled_out.push(match &f.not_run {
            Some(_) => format!(
                "{} (saves far too little by the estimate; not run)",
                f.change
            ),
            None => format!("{} (still runs out of memory)", f.change),
        });
    }
    let mut out = vec![];
    if !causes.is_empty() {
        out.push(format!("What tips it over: {}.", causes.join("; ")));
    }
    if !ruled_out.is_empty() {
        out.push(format!("Ruled out: {}.", ruled_out.join("; ")));
    }
    out.extend(cx.whole_run().and_then(|(r, _)| leak_text(r)));
    let mut absent = not_configured(cx.config);
    absent.extend(float64_text(cx));
    if !absent.is_empty() {
        out.push(format!(
            "Suspects of the thread that do not apply here: {}.",
            absent.join("; ")
        ));
    }
    out
}

/// The thread's "an accidental float64?" for a float32 run: it is not one, and what float64 would
/// need. Not measured (a trial in float64 compiles its own kernels on a GPU): the measured need
/// scaled by the model's estimate of float64 against float32, and said to be so.
fn float64_text(cx: &Context<'_>) -> Option<String> {
    // Under `--exec` the model is the user's, which the estimate does not know.
    let f32 = cx.config.train.precision == deeplab::Precision::F32;
    if !f32 || cx.estimate || cx.exec.is_some() {
        return None;
    }
    let need = cx.whole_run()?.0.memory.allocator.as_ref()?.need_bytes;
    let f64 = cx
        .config
        .with_overrides(&["train.precision=\"f64\""])
        .ok()?;
    let (wide, narrow) = (estimated_peak(&f64)?, estimated_peak(cx.config)?);
    let ratio = wide as f64 / (narrow as f64).max(1.0);
    Some(format!(
        "float64 (it trains in f32; in float64 it would need about {}, {ratio:.1}× its need by the model's estimate, not measured)",
        fmt_bytes((need as f64 * ratio) as u64)
    ))
}

/// The thread's "a leak across steps?", from the steps of the original's whole run (the growth
/// its record gives, [`oom_trial::LEAK_BYTES`] its threshold).
fn leak_text(r: &oom_trial::TrialReport) -> Option<String> {
    let steps = &r.memory.steps;
    let Some(per_step) = r.memory.leak_bytes_per_step else {
        return (steps.len() == 1)
            .then(|| "Leaks across steps: not measured (one step ran).".into());
    };
    let (first, last) = (steps.first()?, steps.last()?);
    let readings = format!(
        "{} after step {}, {} after step {}",
        fmt_bytes(first.in_use_after_bytes),
        first.step + 1,
        fmt_bytes(last.in_use_after_bytes),
        last.step + 1
    );
    Some(match per_step < oom_trial::LEAK_BYTES {
        true => format!(
            "Leaks across steps: not a leak; what is in use after each step holds steady ({readings})."
        ),
        false => format!(
            "Leaks across steps: what is in use grows by {} a step ({readings}).",
            fmt_bytes(per_step as u64)
        ),
    })
}

/// The thread's suspects this configuration does not have.
fn not_configured(c: &deeplab::Config) -> Vec<String> {
    let mut out = vec![];
    if c.model.attention_heads == 0 {
        out.push("attention (none configured)".to_string());
    }
    if !c.model.aux_head {
        out.push("auxiliary head (none configured)".into());
    }
    if c.model.output_stride > 8 {
        out.push(format!("output stride 8 (it is {})", c.model.output_stride));
    }
    // float64 is the thread's other suspect: its fix (float32) is measured with the others.
    if !matches!(
        c.train.precision,
        deeplab::Precision::F32 | deeplab::Precision::F64
    ) {
        out.push(format!("fp32 (it trains in {})", c.train.precision.name()));
    }
    if c.train.checkpointing {
        out.push("recomputation (checkpointing is already on)".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oom_search::{Candidate, Measurement};

    fn fix(change: &str, diverged: Option<&str>) -> FixResult {
        let mut measurement = Measurement::new(Outcome::Fits);
        measurement.peak_bytes = Some(18 << 30);
        measurement.diverged = diverged.map(String::from);
        FixResult {
            change: change.into(),
            tag: kinds::FixKind::ALL
                .into_iter()
                .find(|k| k.label() == change)
                .unwrap()
                .tag(),
            candidate: Candidate::original(),
            measurement,
            implied_by: None,
            not_run: None,
        }
    }

    /// The sentence on the block whose removal saves most reads as a sentence whichever figure
    /// the trial has: a need, or (an estimate, a run not replayed) only its peak.
    #[test]
    fn without_the_block_names_a_need_or_a_peak() {
        let mut m = Measurement::new(Outcome::Fits);
        assert_eq!(without_it(&m), "");
        m.peak_bytes = Some(14 << 30);
        assert_eq!(without_it(&m), "; without it, its peak is 14.00 GiB");
        m.need_bytes = Some(228 << 20);
        assert_eq!(without_it(&m), "; without it, it needs 228.0 MiB");
    }

    /// A fix that fits although its loss diverged is said to fit in memory, with how it diverged
    /// and, for pure f16, what PyTorch users run instead.
    #[test]
    fn a_diverged_fit_says_what_diverged_and_what_users_do() {
        let how = Some("the loss was NaN in step 2");
        let s = diverged(&fix("pure f16", how)).unwrap();
        assert!(s.starts_with("pure f16 fits in memory"), "{s}");
        assert!(
            s.contains("(the loss was NaN in step 2)") && s.contains("mixed-f16"),
            "{s}"
        );
        let s = diverged(&fix("pure bf16", how)).unwrap();
        assert!(!s.contains("mixed-f16"), "{s}");
        assert_eq!(diverged(&fix("pure f16", None)), None);
    }

    /// A fix that another's fit settles is given what that one needs as a bound, not as its own.
    #[test]
    fn an_implied_fix_needs_at_most_what_settled_it() {
        let mut f16 = fix("mixed precision f16", None);
        f16.measurement.need_bytes = Some(242 << 20);
        let bf16 = FixResult {
            implied_by: Some(f16.change.clone()),
            measurement: f16.measurement.clone(),
            ..fix("mixed precision bf16", None)
        };
        assert_eq!(fix_figure(&f16), " (needs 242.0 MiB)");
        assert_eq!(fix_figure(&bf16), " (needs at most 242.0 MiB)");
    }
}
