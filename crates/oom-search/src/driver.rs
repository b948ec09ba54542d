//! The whole diagnosis, in order: the original configuration, then either (it fits) its headroom
//! and capacity, or (it runs out of memory) each monotone axis, the fixes a user would try, the
//! modules that carry the memory and the 1-minimal failing configuration.

use crate::bisect::{bisect_axis_finely, AxisSearch, AxisVerdict};
use crate::culprits::{culprits, Shed};
use crate::diagnosis::*;
use crate::minimal::{minimise, Seen};
use crate::searcher::{Clock, Searcher, TrialRecord};
use crate::vocabulary::{
    Axis, AxisOptions, Candidate, Event, Measurement, Oracle, Outcome, Purpose,
};

/// About how many trials a diagnosis of an original that runs out of memory takes, for progress:
/// each axis as plain bisection plus its confirmations, every fix and module item, and a dozen for
/// the modules' reduction and the minimal failing configuration. Not a promise: predictions often
/// need fewer, inconclusive trials more.
pub fn expected_trials(space: &Space, opts: &SearchOptions) -> usize {
    let axes: usize = space
        .axes
        .iter()
        .filter(|a| a.original > 0)
        .map(|a| {
            crate::bisect::plain_bisection_trials(a.original + 1) - 1
                + 2 * opts.confirm_runs as usize
        })
        .sum();
    let fixes = if opts.fixes { space.fixes.len() } else { 0 };
    let modules = if opts.modules {
        space.modules.items.len() + 4
    } else {
        0
    };
    let minimal = if opts.minimise { 8 } else { 0 };
    1 + usize::from(opts.need) + axes + fixes + modules + minimal
}

/// Runs the whole diagnosis against `oracle`, telling `events` as it goes and asking `clock` the time.
pub fn diagnose(
    oracle: &mut dyn Oracle,
    events: &mut dyn FnMut(&Event),
    clock: &dyn Clock,
    space: &Space,
    opts: &SearchOptions,
) -> Diagnosis {
    let mut s = Searcher::new(oracle, events, opts.budget, clock);
    // Most originals run out of memory (that is why the tool is run): while the original runs, idle
    // workers may start what an OOM diagnosis will need first.
    s.guess(&oom_fan_out(space, opts));
    let original = s.measure(&Candidate::original(), Purpose::Original);
    let mut d = Diagnosis::of(original.clone());
    match original.outcome {
        Outcome::Inconclusive => {}
        Outcome::Fits => d.capacity = capacity(&mut s, space, opts, &original),
        Outcome::Oom => explain_oom(&mut s, space, opts, &mut d),
    }
    d.budget_exhausted = s.budget_exhausted;
    d.trials = std::mem::take(&mut s.trials);
    d
}

/// What an OOM diagnosis measures whatever the outcomes: the lowest value of each axis, each fix
/// and each module item swapped alone. Independent of each other, so they can all run at once.
fn oom_fan_out(space: &Space, opts: &SearchOptions) -> Vec<Candidate> {
    let base = Candidate::original();
    let mut out: Vec<Candidate> = (opts.need && !opts.need_from_original)
        .then(|| base.without_ceiling())
        .into_iter()
        .collect();
    out.extend(
        space
            .axes
            .iter()
            .filter(|a| a.original > 0 && !from_the_top(a, opts))
            .map(|a| a.at(&base, 0)),
    );
    if opts.fixes {
        let uncovered = space.fixes.iter().filter(|f| f.covered_by.is_none());
        out.extend(
            uncovered
                .filter(|f| !waits_for_the_need(f, opts))
                .map(Fix::candidate),
        );
    }
    if opts.modules {
        // An item with an estimated saving may be ruled out once the original's need is known.
        let m = &space.modules;
        let bounded = |i: &ModuleItem| i.estimated_saving.is_some() && need_first(opts);
        out.extend(
            (m.items.iter())
                .filter(|i| !bounded(i))
                .map(|i| m.candidate(&base, std::slice::from_ref(i))),
        );
    }
    out
}

/// Whether the first probe of `axis` is predicted from the original's need, measured before the
/// axes (`bisect_axis`): its bottom may never run, so it is not started ahead.
fn from_the_top(axis: &Axis, opts: &SearchOptions) -> bool {
    opts.predict && need_first(opts) && axis.values.iter().all(|v| v.x.is_some())
}

/// Whether the original's need is known before the axes, under a ceiling.
fn need_first(opts: &SearchOptions) -> bool {
    let measured = opts.need_from_original || (opts.need && opts.probe_without_ceiling);
    measured && opts.ceiling.is_some()
}

/// What the original needs beyond the ceiling, where both are known: module items whose estimated
/// saving falls far short of it are not run alone.
fn must_shed(d: &Diagnosis, opts: &SearchOptions) -> Option<Shed> {
    let ceiling = opts.ceiling?;
    let need = (d.original.need_bytes).or(d.need.as_ref().and_then(|m| m.need_bytes))?;
    Some(Shed {
        bytes: need.checked_sub(ceiling)?,
        ceiling,
    })
}

/// The original fits: how far each capacity axis can grow. Where the original says its need and
/// boundaries are predicted, each axis is searched on needs and its top never runs (see
/// `bisect_axis`): nothing is started ahead for it.
fn capacity(
    s: &mut Searcher<'_>,
    space: &Space,
    opts: &SearchOptions,
    original: &Measurement,
) -> Vec<AxisSearch> {
    let on_needs = original.need_bytes.is_some() && opts.predict && opts.ceiling.is_some();
    let tops: Vec<Candidate> = space
        .capacity
        .iter()
        .filter(|a| a.values.len() - 1 > a.original && !on_needs)
        .map(|a| a.at(&Candidate::original(), a.values.len() - 1))
        .collect();
    s.expect(&tops);
    let mut out = vec![];
    for axis in &space.capacity {
        s.event(Event::Step {
            name: format!("capacity {}", axis.name),
        });
        let last = axis.values.len() - 1;
        if last > axis.original {
            let base = Candidate::original();
            out.push(bisect_axis_finely(
                s,
                axis,
                &base,
                axis.original,
                last,
                &opts.axis(),
            ));
        }
    }
    out
}

/// The original runs out of memory: each axis, the fixes, the modules, the minimal failing one.
fn explain_oom(s: &mut Searcher<'_>, space: &Space, opts: &SearchOptions, d: &mut Diagnosis) {
    s.expect(&oom_fan_out(space, opts));
    if opts.probe_without_ceiling && opts.need && d.original.need_bytes.is_none() {
        // The axes' probes run without the ceiling: the original's need, measured first, draws
        // their first lines (each axis's top is the original).
        d.need = Some(s.measure(&Candidate::original().without_ceiling(), Purpose::Need));
        if opts.fixes && need_first(opts) {
            // The fixes the need does not rule out start now, beside the axes.
            let shed = must_shed(d, opts);
            let run = (space.fixes.iter()).filter(|f| {
                f.covered_by.is_none()
                    && waits_for_the_need(f, opts)
                    && fix_bound(f, shed).is_none()
            });
            s.expect(&run.map(Fix::candidate).collect::<Vec<_>>());
        }
    }
    let (axes, early_minimal) = search_axes(s, space, opts);
    d.axes = axes;
    // How much the original needs without the ceiling is for the report alone: it started with the
    // fan-out and is taken here, where no step waits on it (it is the longest trial of all).
    if opts.need && d.original.need_bytes.is_none() && d.need.is_none() {
        d.need = Some(s.measure(&Candidate::original().without_ceiling(), Purpose::Need));
    }
    if opts.fixes {
        s.event(Event::Step {
            name: "fixes".into(),
        });
        d.fixes = fixes(s, space, &d.axes, opts, must_shed(d, opts));
    }
    if opts.modules && !space.modules.items.is_empty() {
        s.event(Event::Step {
            name: "modules".into(),
        });
        let (verdict, costs) = culprits(s, &space.modules, must_shed(d, opts));
        d.modules = Some(verdict);
        d.module_costs = costs;
    }
    if opts.minimise {
        s.event(Event::Step {
            name: "minimal failing".into(),
        });
        d.minimal_failing = Some(match early_minimal {
            // Its trials join the record here, where the search in turn runs them.
            Some((minimal, trials)) => {
                s.trials.extend(trials);
                minimal
            }
            None => {
                let minimal = minimise(s, space, early_seen(space, &d.axes), opts);
                s.event(Event::Settled {
                    candidates: vec![minimal.candidate.clone()],
                });
                minimal
            }
        });
    }
}

/// The minimal failing configuration searched beside the axes, and the trials it ran.
type EarlyMinimal = (Minimal, Vec<TrialRecord>);

/// Each axis from its lowest value to the original's. The axes share no candidate but the original,
/// so where trials can run at once they are searched at once, each on a thread of its own; the
/// result is the same as searching them in turn.
///
/// The minimal failing configuration starts from the first axis's boundary and lowers the others
/// with that axis lowered: where the boundary lies below the original, none of its candidates is
/// one the other axes, the fixes or the modules measure (they keep the first axis as configured),
/// so it is searched on the first axis's thread once that axis is done, instead of after every
/// step; the same trials, with the same outcomes, one critical path shorter.
fn search_axes(
    s: &mut Searcher<'_>,
    space: &Space,
    opts: &SearchOptions,
) -> (Vec<AxisSearch>, Option<EarlyMinimal>) {
    let axes: Vec<(usize, &Axis)> = space
        .axes
        .iter()
        .filter(|a| a.original > 0)
        .enumerate()
        .collect();
    let one = |s: &mut Searcher<'_>, (k, axis): &(usize, &Axis)| {
        s.event(Event::Step {
            name: format!("axis {}", axis.name),
        });
        s.set_rerun_floor(AXIS_RERUNS * (*k as u32 + 1));
        let options = AxisOptions {
            probe_without_ceiling: opts.probe_without_ceiling,
            ..opts.axis()
        };
        let r = bisect_axis_finely(s, axis, &Candidate::original(), 0, axis.original, &options);
        s.set_rerun_floor(0);
        if let AxisVerdict::Boundary {
            last_fit,
            first_oom,
            ..
        }
        | AxisVerdict::Unstable {
            last_fit,
            first_oom,
            ..
        } = &r.verdict
        {
            s.event(Event::Settled {
                candidates: vec![last_fit.candidate.clone(), first_oom.candidate.clone()],
            });
        }
        r
    };
    let apart = |s: &mut Searcher<'_>, item: &(usize, &Axis)| {
        let r = one(s, item);
        let early = (item.0 == 0 && opts.minimise && lowered(item.1, &r)).then(|| {
            let before = s.trials.len();
            let seen = Seen {
                first_key: Some(&item.1.key),
            };
            let minimal = minimise(s, space, seen, opts);
            s.event(Event::Settled {
                candidates: vec![minimal.candidate.clone()],
            });
            (minimal, s.trials.split_off(before))
        });
        (r, early)
    };
    if axes.len() > 1 {
        if let Some(searched) = s.run_apart(&axes, &apart) {
            let (searches, mut early): (Vec<_>, Vec<_>) = searched.into_iter().unzip();
            return (searches, early.remove(0));
        }
    }
    (axes.iter().map(|a| one(s, a)).collect(), None)
}

/// What the minimal search sees where it runs after the axes: where it could have run beside them
/// (the first axis lowered), only what it would have seen there, so that the report does not
/// depend on how many trials ran at once; else every trial.
fn early_seen<'a>(space: &'a Space, axes: &[AxisSearch]) -> Seen<'a> {
    let first = space.axes.iter().find(|a| a.original > 0);
    let first_key = first
        .zip(axes.first())
        .filter(|(axis, r)| lowered(axis, r))
        .map(|(axis, _)| axis.key.as_str());
    Seen { first_key }
}

/// Whether an axis's boundary lies below the original value (its first failure is not the
/// original itself).
fn lowered(axis: &Axis, r: &AxisSearch) -> bool {
    matches!(&r.verdict, AxisVerdict::Boundary { first_oom, .. } if first_oom.index < axis.original)
}

/// Attempt numbers of each axis's re-runs: axis k's start at `AXIS_RERUNS * (k + 1)`.
const AXIS_RERUNS: u32 = 1000;

/// Each fix on its own, plus the largest batch and input size that fit (from the axes: no new
/// trials). A fix another covers ([`Fix::covered_by`]) comes after it and is not run where that
/// one fits with its need away from the ceiling (outside the re-run margin).
fn fixes(
    s: &mut Searcher<'_>,
    space: &Space,
    axes: &[AxisSearch],
    opts: &SearchOptions,
    shed: Option<Shed>,
) -> Vec<FixResult> {
    let covered = |f: &&Fix| f.covered_by.is_some();
    let in_turn =
        (space.fixes.iter().filter(|f| !covered(f))).chain(space.fixes.iter().filter(covered));
    let mut out: Vec<FixResult> = vec![];
    for fix in in_turn {
        let c = fix.candidate();
        let by = fix.covered_by.as_ref();
        let settled_by = by.and_then(|by| out.iter().find(|r| &r.change == by));
        let settled_by = settled_by.filter(|r| fits_apart(&r.measurement, opts));
        let not_run = fix_bound(fix, shed).filter(|_| settled_by.is_none());
        let (measurement, implied_by) = match (settled_by, &not_run) {
            (Some(r), _) => (r.measurement.clone(), Some(r.change.clone())),
            (None, Some(why)) => (Shed::not_measured(why), None),
            (None, None) => {
                let purpose = Purpose::Fix {
                    change: fix.change.clone(),
                };
                (s.measure(&c, purpose), None)
            }
        };
        out.push(FixResult {
            change: fix.change.clone(),
            tag: fix.tag,
            candidate: c,
            measurement,
            implied_by,
            not_run,
        });
    }
    // Least change to the training first, as the space lists them.
    out.sort_by_key(|r| space.fixes.iter().position(|f| f.change == r.change));
    for a in axes {
        let fix = space.axes.iter().find(|x| x.name == a.axis);
        if let (AxisVerdict::Boundary { last_fit, .. }, Some(Some(what))) =
            (&a.verdict, fix.map(|x| &x.fix))
        {
            out.push(FixResult {
                change: format!("{what}: {}", last_fit.label),
                tag: a.tag,
                candidate: last_fit.candidate.clone(),
                measurement: last_fit.measurement.clone(),
                implied_by: None,
                not_run: None,
            });
        }
    }
    out
}

/// Whether `fix` starts only once the original's need is known, which may rule it out (its
/// estimated saving); one that compiles kernels of its own starts with the first trials all the
/// same.
fn waits_for_the_need(fix: &Fix, opts: &SearchOptions) -> bool {
    fix.estimated_saving.is_some() && need_first(opts) && !fix.early
}

/// Why `fix` is not run: its estimated saving falls far short of what the original must shed.
fn fix_bound(fix: &Fix, shed: Option<Shed>) -> Option<String> {
    shed?.too_little(fix.estimated_saving, "it")
}

/// Whether `m` fits with its need outside the re-run margin of the ceiling: a fit another fix's
/// may stand for.
fn fits_apart(m: &Measurement, opts: &SearchOptions) -> bool {
    let margin = 1.0 - opts.rerun_within.unwrap_or(0.0);
    match (m.outcome, m.need_bytes, opts.ceiling) {
        (Outcome::Fits, Some(need), Some(c)) => (need as f64) <= margin * c as f64,
        _ => false,
    }
}
