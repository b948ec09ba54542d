//! The 1-minimal failing configuration: every axis lowered as far as it still runs out of memory,
//! every swapped module restored where it still does, and its passing neighbours.

use crate::bisect::{bisect_axis, AxisVerdict};
use crate::diagnosis::*;
use crate::searcher::Searcher;
use crate::vocabulary::AxisOptions;
use crate::vocabulary::{Axis, Candidate, Measurement, Outcome, Purpose};

/// Index of the candidate's value on an axis.
fn index_on(axis: &Axis, c: &Candidate) -> usize {
    match c.get(&axis.key) {
        None => axis.original,
        Some(v) => axis
            .values
            .iter()
            .position(|x| x.value == v)
            .unwrap_or(axis.original),
    }
}

/// Lowers each axis of `cur` to the first value that still runs out of memory (in the context of the
/// other axes as they are in `cur`), in turn, until none moves.
fn shrink_axes(
    s: &mut Searcher<'_>,
    space: &Space,
    seen: Seen<'_>,
    opts: &SearchOptions,
    mut cur: Candidate,
) -> Candidate {
    for pass in 0..3 {
        if pass > 0 {
            // A pass after one that moved an axis mostly confirms: its first probe on each axis,
            // one step lower, is the passing neighbour the report shows. All at once.
            s.expect(&below(s, space, seen, &cur));
        }
        let mut changed = false;
        for axis in &space.axes {
            let i = index_on(axis, &cur);
            if i == 0 {
                continue;
            }
            let f = lower_on(s, space, seen, axis, &cur, i, opts);
            if f < i {
                cur = axis.at(&cur, f);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    cur
}

/// One step lower on each axis that has a step below `cur`, where what was measured does not
/// already say its outcome.
fn below(s: &Searcher<'_>, space: &Space, seen: Seen<'_>, cur: &Candidate) -> Vec<Candidate> {
    space
        .axes
        .iter()
        .filter_map(|a| index_on(a, cur).checked_sub(1).map(|j| a.at(cur, j)))
        .filter(|c| implied(s, space, seen, c).is_none())
        .collect()
}

/// Whether `a` holds at most as much as `b`: at or below it on every axis, the same elsewhere
/// (`None`: not comparable, such as another precision, or a size off the axis's values).
fn at_most(space: &Space, a: &Candidate, b: &Candidate) -> Option<bool> {
    if a.unbounded || b.unbounded {
        return None;
    }
    let position = |axis: &Axis, c: &Candidate| match c.get(&axis.key) {
        None => Some(axis.original),
        Some(v) => axis.values.iter().position(|x| x.value == v),
    };
    let on_axis = |k: &String| space.axes.iter().any(|x| &x.key == k);
    let keys = a.sets.keys().chain(b.sets.keys()).filter(|k| !on_axis(k));
    for k in keys {
        if a.get(k) != b.get(k) {
            return None;
        }
    }
    let mut le = true;
    for axis in &space.axes {
        le &= position(axis, a)? <= position(axis, b)?;
    }
    Some(le)
}

/// What the minimal search may take as measured when it implies an outcome: every trial, or where
/// it may run beside the other axes (see `driver::search_axes`), only the trials that set the first
/// axis (`first_key`) and its own, so that it sees the same whether the axes ran at once or in turn.
#[derive(Clone, Copy)]
pub(crate) struct Seen<'k> {
    pub(crate) first_key: Option<&'k str>,
}

/// A configuration measured under the ceiling that settles `c`'s outcome without running it: a
/// fit at or above `c` on every axis, or an out-of-memory at or below it. Memory grows along each
/// axis (the bisection rests on the same), so each axis's order holds in any context of the others.
fn implied<'s>(
    s: &'s Searcher<'_>,
    space: &Space,
    seen: Seen<'_>,
    c: &Candidate,
) -> Option<(&'s Candidate, &'s Measurement)> {
    let measured: Vec<(&Candidate, &Measurement)> = match seen.first_key {
        None => s.settled().collect(),
        Some(key) => s
            .trials
            .iter()
            .filter(|t| t.purpose == Purpose::Minimise || t.candidate.get(key).is_some())
            .map(|t| (&t.candidate, &t.measurement))
            .collect(),
    };
    measured
        .into_iter()
        .filter(|(m_c, m)| match m.outcome {
            Outcome::Fits => at_most(space, c, m_c) == Some(true),
            Outcome::Oom => at_most(space, m_c, c) == Some(true),
            Outcome::Inconclusive => false,
        })
        // The tightest bound, the same whatever order the trials finished in.
        .min_by_key(|(m_c, m)| (m.need_bytes.or(m.peak_bytes), m_c.to_string()))
}

/// What the search already measured on `axis` at or below `i`, on top of `cur` (which runs out
/// of memory at `i`): the lowest value known to run out of memory, and the highest known fit
/// under it. The first axis of the first pass was searched with the others as configured, so its
/// boundary is known before any trial here.
fn known_bounds(
    s: &Searcher<'_>,
    axis: &Axis,
    cur: &Candidate,
    i: usize,
) -> (usize, Option<usize>) {
    // Only what ran on this very context: a fit implied at the bottom of the axis (by the axis's
    // own search, at a larger batch) would start a bisection from the bottom, where the gallop
    // from the top finds a boundary near it in fewer trials.
    let outcome = |j: usize| s.known(&axis.at(cur, j)).map(|m| m.outcome);
    let first_oom = (0..i)
        .find(|&j| outcome(j) == Some(Outcome::Oom))
        .unwrap_or(i);
    let fit = (0..first_oom)
        .rev()
        .find(|&j| outcome(j) == Some(Outcome::Fits));
    (first_oom, fit)
}

/// The first value at or below `i` on `axis` that still runs out of memory, on top of `cur` (which
/// runs out of memory at `i`). Starts from what is known; else gallops down (1, 2, 4, … steps below
/// the lowest known failure) until a value fits. Then bisects between that fit and the lowest
/// failure: the other axes have already been lowered, so the boundary is usually a few steps
/// below, where bisecting the whole axis would cost its log. The first probe, one step lower, is
/// the passing neighbour the report shows when it fits.
fn lower_on(
    s: &mut Searcher<'_>,
    space: &Space,
    seen: Seen<'_>,
    axis: &Axis,
    cur: &Candidate,
    i: usize,
    opts: &SearchOptions,
) -> usize {
    let (first_oom, fit) = match known_bounds(s, axis, cur, i) {
        (first_oom, Some(fit)) => (first_oom, fit),
        (0, None) => return 0,
        (first_oom, None) => match gallop(s, space, seen, axis, cur, first_oom) {
            Ok(bounds) => bounds,
            Err(lowest) => return lowest,
        },
    };
    if first_oom - fit == 1 {
        return first_oom;
    }
    let no_confirm = AxisOptions {
        confirm_runs: 0,
        ..opts.axis()
    };
    match bisect_axis(s, axis, cur, fit, first_oom, &no_confirm).verdict {
        AxisVerdict::Boundary { first_oom, .. } => first_oom.index,
        AxisVerdict::NotTheCause { lowest, .. } => lowest.index,
        _ => first_oom,
    }
}

/// Steps down from `i` (which runs out of memory) by 1, 2, 4, …: `(first_oom, fit)` once a value
/// fits, else the answer itself (`Err`): the lowest value when even it runs out of memory, the
/// lowest failure when a probe cannot be measured. A probe whose outcome what was measured
/// already settles ([`implied`]) is not run.
fn gallop(
    s: &mut Searcher<'_>,
    space: &Space,
    seen: Seen<'_>,
    axis: &Axis,
    cur: &Candidate,
    i: usize,
) -> Result<(usize, usize), usize> {
    let probes: Vec<Candidate> = std::iter::successors(Some(1usize), |st| Some(st * 2))
        .take_while(|st| *st <= i)
        .map(|st| axis.at(cur, i - st))
        .chain((i & (i - 1) != 0).then(|| axis.at(cur, 0)))
        .filter(|c| implied(s, space, seen, c).is_none())
        .collect();
    s.guess(&probes);
    let mut first_oom = i;
    let mut step = 1;
    loop {
        let j = i.saturating_sub(step);
        let c = axis.at(cur, j);
        let outcome = match implied(s, space, seen, &c) {
            Some((_, m)) => m.outcome,
            None => s.measure(&c, Purpose::Minimise).outcome,
        };
        match outcome {
            Outcome::Fits => return Ok((first_oom, j)),
            Outcome::Oom if j == 0 => return Err(0),
            Outcome::Oom => first_oom = j,
            // Unmeasurable: keep what is known.
            Outcome::Inconclusive => return Err(first_oom),
        }
        step *= 2;
    }
}

/// The smallest configuration that still runs out of memory: every monotone axis lowered to a
/// fixpoint, every module kept as configured (the modules that matter are what `culprits` reports;
/// swapping more of them only makes the configuration less like the user's).
pub(crate) fn minimise(
    s: &mut Searcher<'_>,
    space: &Space,
    seen: Seen<'_>,
    opts: &SearchOptions,
) -> Minimal {
    let cur = shrink_axes(s, space, seen, opts, Candidate::original());
    s.expect(&below(s, space, seen, &cur));
    let measurement = s.measure(&cur, Purpose::Minimise);
    let neighbours = space
        .axes
        .iter()
        .filter(|axis| index_on(axis, &cur) > 0)
        .map(|axis| neighbour(s, space, seen, axis, &cur))
        .collect::<Vec<_>>();
    let one_minimal = measurement.outcome == Outcome::Oom
        && neighbours
            .iter()
            .all(|n| n.measurement.outcome == Outcome::Fits);
    Minimal {
        candidate: cur,
        measurement,
        neighbours,
        one_minimal,
    }
}

/// The passing neighbour one step lower on `axis`: measured, unless a fit measured before holds
/// at least as much. (No module neighbour: the configuration keeps the modules as configured.)
fn neighbour(
    s: &mut Searcher<'_>,
    space: &Space,
    seen: Seen<'_>,
    axis: &Axis,
    cur: &Candidate,
) -> Neighbour {
    let i = index_on(axis, cur);
    let c = axis.at(cur, i - 1);
    let change = format!(
        "{} {} → {}",
        axis.name,
        axis.values[i].label,
        axis.values[i - 1].label
    );
    let known_fit = match s.known(&c) {
        Some(_) => None,
        None => implied(s, space, seen, &c)
            .filter(|(_, m)| m.outcome == Outcome::Fits)
            .map(|(by, m)| (by.clone(), m.clone())),
    };
    let (measurement, implied_by) = match known_fit {
        Some((by, m)) => (m, Some(by)),
        None => (s.measure(&c, Purpose::Minimise), None),
    };
    Neighbour {
        change,
        candidate: c,
        measurement,
        implied_by,
    }
}
