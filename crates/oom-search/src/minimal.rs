//! The 1-minimal failing configuration: every axis lowered as far as it still runs out of memory,
//! every swapped module restored where it still does, and its passing neighbours.

use crate::bisect::{bisect_axis, AxisOptions, AxisVerdict};
use crate::diagnosis::*;
use crate::session::Session;
use crate::{Axis, Candidate, Outcome, Purpose};

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
    s: &mut Session<'_>,
    space: &Space,
    opts: &SearchOptions,
    mut cur: Candidate,
) -> Candidate {
    for _pass in 0..3 {
        let mut changed = false;
        for axis in &space.axes {
            let i = index_on(axis, &cur);
            if i == 0 {
                continue;
            }
            let f = lower_on(s, axis, &cur, i, opts);
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

/// The first value at or below `i` on `axis` that still runs out of memory, on top of `cur` (which
/// runs out of memory at `i`). Gallops down (1, 2, 4, … steps below `i`) until a value fits, then
/// bisects between that fit and the lowest failure: the other axes have already been lowered, so
/// the boundary is usually a few steps below, where bisecting the whole axis would cost its log.
/// The first probe, one step lower, is the passing neighbour the report shows when it fits.
fn lower_on(
    s: &mut Session<'_>,
    axis: &Axis,
    cur: &Candidate,
    i: usize,
    opts: &SearchOptions,
) -> usize {
    let gallop: Vec<Candidate> = std::iter::successors(Some(1usize), |st| Some(st * 2))
        .take_while(|st| *st <= i)
        .map(|st| axis.at(cur, i - st))
        .chain((i & (i - 1) != 0).then(|| axis.at(cur, 0)))
        .collect();
    s.guess(&gallop);
    let mut first_oom = i;
    let mut step = 1;
    let fit = loop {
        let j = i.saturating_sub(step);
        match s.measure(&axis.at(cur, j), Purpose::Minimise).outcome {
            Outcome::Fits => break j,
            Outcome::Oom if j == 0 => return 0,
            Outcome::Oom => first_oom = j,
            // Unmeasurable: keep what is known.
            Outcome::Inconclusive => return first_oom,
        }
        step *= 2;
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

/// The smallest configuration that still runs out of memory: every monotone axis lowered to a
/// fixpoint, every module kept as configured (the modules that matter are what `culprits` reports;
/// swapping more of them only makes the configuration less like the user's).
pub(crate) fn minimise(s: &mut Session<'_>, space: &Space, opts: &SearchOptions) -> Minimal {
    let cur = shrink_axes(s, space, opts, Candidate::original());
    let below: Vec<Candidate> = space
        .axes
        .iter()
        .filter_map(|a| index_on(a, &cur).checked_sub(1).map(|j| a.at(&cur, j)))
        .collect();
    s.expect(&below);
    let measurement = s.measure(&cur, Purpose::Minimise);
    // The passing neighbours: one step lower on each axis. (The modules are 1-minimal by ddmin,
    // which measured each one-module-smaller set already; no module neighbour is measured again.)
    let mut neighbours = vec![];
    for axis in &space.axes {
        let i = index_on(axis, &cur);
        if i == 0 {
            continue;
        }
        let c = axis.at(&cur, i - 1);
        let m = s.measure(&c, Purpose::Minimise);
        neighbours.push(Neighbour {
            change: format!(
                "{} {} → {}",
                axis.name,
                axis.values[i].label,
                axis.values[i - 1].label
            ),
            candidate: c,
            measurement: m,
        });
    }
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
