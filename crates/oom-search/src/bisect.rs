//! Bisection of one monotone axis with three-valued outcomes, in four steps: check both ends, then
//! narrow the interval (probing where the measured peaks predict the boundary, else the middle),
//! then confirm the boundary by re-running both sides. [`bisect_axis`] reads as that outline.

mod confirm;
mod from_the_top;
mod narrow;

use crate::predict::{Predictor, PREDICTED_PROBES};
use crate::searcher::Searcher;
use crate::vocabulary::{
    human_bytes, Axis, AxisOptions, Candidate, Measurement, Outcome, Purpose, Tag,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A measured point on an axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub index: usize,
    pub label: String,
    pub candidate: Candidate,
    pub measurement: Measurement,
}

/// What searching one axis found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AxisVerdict {
    /// `last_fit` is the largest value that fits, `first_oom` the next one, which runs out of memory.
    Boundary {
        last_fit: Probe,
        first_oom: Probe,
        /// Both sides re-ran and gave the same outcome again.
        confirmed: bool,
    },
    /// Even the smallest value runs out of memory: this axis is not the cause.
    NotTheCause { lowest: Probe, message: String },
    /// The largest value fits (only in a context other than the original, or in a capacity search
    /// that found no limit).
    AllFit { highest: Probe, message: String },
    /// The boundary lies between `lo` and `hi` but the values between could not be measured, or an
    /// end could not be measured.
    Inconclusive {
        lo: Option<Probe>,
        hi: Option<Probe>,
        skipped: Vec<String>,
        message: String,
    },
    /// A re-run disagreed with the first run: the boundary is not stable.
    Unstable {
        message: String,
        last_fit: Probe,
        first_oom: Probe,
    },
}

/// One axis searched, with its trial count next to plain bisection's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AxisSearch {
    pub axis: String,
    /// The axis's tag.
    #[serde(default)]
    pub tag: Tag,
    pub verdict: AxisVerdict,
    /// Trials this axis cost (cache hits excluded, confirmations included).
    pub trials: usize,
    /// Of which confirmation re-runs.
    pub confirmations: usize,
    /// Re-runs of each side of the boundary (a side is re-run only where it may differ from its
    /// first run: [`AxisOptions::rerun_within`]).
    #[serde(default)]
    pub reruns: Sides,
    /// What plain bisection would need over the same interval: ceil(log2(n)) + 2.
    pub plain_bisection: usize,
}

/// How often each side of a boundary was re-run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sides {
    pub last_fit: u32,
    pub first_oom: u32,
}

/// Searches `axis` between indices `lo` (expected to fit) and `hi` (expected to run out of memory),
/// on top of `base`.
pub fn bisect_axis(
    s: &mut Searcher<'_>,
    axis: &Axis,
    base: &Candidate,
    lo: usize,
    hi: usize,
    opts: &AxisOptions,
) -> AxisSearch {
    let search = Search {
        axis,
        base,
        start: s.trial_count(),
        plain_bisection: plain_bisection_trials(hi - lo + 1),
        confirm_runs: opts.confirm_runs,
        ceiling: opts.ceiling,
        rerun_within: opts.rerun_within,
        options: *opts,
        free: probes_free(axis, opts),
        ends: (lo, hi),
    };
    if let Some((last_fit, first_oom)) = search.secant_on_needs(s, lo, hi, opts) {
        return search.certified(s, last_fit, first_oom);
    }
    let mut predictor = Predictor::new(axis, opts);
    let hi = match search.down_from_the_top(s, lo, hi, &mut predictor) {
        FromTheTop::Fit(pair) => return search.narrowed(s, pair.0, pair.1, &mut predictor),
        FromTheTop::Oom(i) => i,
        FromTheTop::NotTried => hi,
    };
    search.predict_beside_the_top(s, lo, hi, opts);
    let (bottom, top) = match search.check_ends(s, lo, hi) {
        Ends::Open { bottom, top } => (bottom, top),
        Ends::Settled(verdict) => return search.done(s, verdict, 0),
    };
    predictor.note(bottom.index, &bottom.measurement);
    predictor.note(top.index, &top.measurement);
    search.note_top_need(s, &top, &mut predictor);
    search.narrowed(s, bottom, top, &mut predictor)
}

/// [`bisect_axis`], then, on an axis with [`Axis::fine`] values, the boundary narrowed on them: the
/// coarse search runs without re-runs, and the fine boundary is the one confirmed.
pub fn bisect_axis_finely(
    s: &mut Searcher<'_>,
    axis: &Axis,
    base: &Candidate,
    lo: usize,
    hi: usize,
    opts: &AxisOptions,
) -> AxisSearch {
    if axis.fine.is_empty() {
        return bisect_axis(s, axis, base, lo, hi, opts);
    }
    if probes_free(axis, opts) {
        // Every probe says its need: lines through needs find the fine boundary as directly as
        // the coarse one, without a coarse boundary first.
        return on_fine_values(s, axis, base, (lo, hi), (lo, hi), opts);
    }
    let coarse_opts = AxisOptions {
        confirm_runs: 0,
        ..*opts
    };
    let coarse = bisect_axis(s, axis, base, lo, hi, &coarse_opts);
    let AxisVerdict::Boundary {
        last_fit,
        first_oom,
        ..
    } = &coarse.verdict
    else {
        return coarse;
    };
    let (a, b) = (last_fit.index, first_oom.index);
    let fine = on_fine_values(s, axis, base, (a, b), (lo, hi), opts);
    AxisSearch {
        trials: coarse.trials + fine.trials,
        plain_bisection: fine.plain_bisection + coarse.plain_bisection,
        ..fine
    }
}

/// The search on the fine values between the values `coarse` (indices into [`Axis::values`]); where
/// either is not among the fine values, on the values between `whole` alone.
fn on_fine_values(
    s: &mut Searcher<'_>,
    axis: &Axis,
    base: &Candidate,
    coarse: (usize, usize),
    whole: (usize, usize),
    opts: &AxisOptions,
) -> AxisSearch {
    let at = |i: usize| {
        axis.fine
            .iter()
            .position(|v| v.value == axis.values[i].value)
    };
    let (Some(a), Some(b)) = (at(coarse.0), at(coarse.1)) else {
        let coarse_only = Axis {
            fine: vec![],
            ..axis.clone()
        };
        return bisect_axis(s, &coarse_only, base, whole.0, whole.1, opts);
    };
    let original_value = &axis.values[axis.original].value;
    let sub = Axis {
        values: axis.fine[a..=b].to_vec(),
        // No value of the sub-axis is written as "no override" unless it is the original's.
        original: axis.fine[a..=b]
            .iter()
            .position(|v| v.value == *original_value)
            .unwrap_or(usize::MAX),
        fine: vec![],
        ..axis.clone()
    };
    bisect_axis(s, &sub, base, 0, b - a, opts)
}

/// Whether `axis`'s probes run without the ceiling ([`AxisOptions::probe_without_ceiling`]). Only a
/// prediction reads a need: without one (no ceiling, no predictions, values with no x) a probe
/// without the ceiling would only add a certificate.
fn probes_free(axis: &Axis, opts: &AxisOptions) -> bool {
    opts.probe_without_ceiling
        && opts.predict
        && opts.ceiling.is_some()
        && axis.values.iter().all(|v| v.x.is_some())
}

/// ceil(log2(n)) + 2: both ends, then halving the interval.
pub(crate) fn plain_bisection_trials(n: usize) -> usize {
    let mut log = 0;
    while (1usize << log) < n {
        log += 1;
    }
    log + 2
}

/// Predicted probes from the top before the bottom is checked: the prediction, and where it runs
/// out of memory the next (its neighbour, or the line drawn again through its need). A line through
/// one need and a floor misses by a step or two at most where memory is close to affine (the
/// forum's size: 864² predicted, 856² the last fit); an axis whose bottom runs out of memory too
/// pays these on top of its bottom.
const PROBES_FROM_THE_TOP: usize = 2;

/// How many unmeasurable values at the bottom of an axis are stepped over before the axis is given
/// up as inconclusive.
const SKIP_UP: usize = 2;

/// What checking both ends of an axis found.
enum Ends {
    /// The bottom fits and the top runs out of memory: the boundary lies between.
    Open { bottom: Probe, top: Probe },
    /// Nothing to search: the verdict is already known.
    Settled(AxisVerdict),
}

/// What probing the predicted last fit before the bottom found.
enum FromTheTop {
    /// It fits, and so does every value below it: the boundary lies between it and the top
    /// (boxed: the other outcomes are an index or nothing).
    Fit(Box<(Probe, Probe)>),
    /// It ran out of memory at this index: the boundary lies below it, and the bottom is checked.
    Oom(usize),
    /// No prediction from the top: the bottom is checked first.
    NotTried,
}

/// One axis being searched: what every step needs to probe and to report.
#[derive(Clone, Copy)]
struct Search<'a> {
    axis: &'a Axis,
    base: &'a Candidate,
    /// The search's trial count when this axis began.
    start: usize,
    plain_bisection: usize,
    /// Re-runs of each side of the boundary found.
    confirm_runs: u32,
    ceiling: Option<u64>,
    /// See [`AxisOptions::rerun_within`].
    rerun_within: Option<f64>,
    /// The options the search began with (for a search that goes on under the ceiling alone).
    options: AxisOptions,
    /// Probes inside the interval run without the ceiling ([`AxisOptions::probe_without_ceiling`]).
    free: bool,
    /// The indices the search began between.
    ends: (usize, usize),
}

impl Search<'_> {
    /// The trial at value `i`, under the ceiling (or, where the search probes without it and that
    /// run was made, read from it).
    fn probe(&self, s: &mut Searcher<'_>, i: usize, lo: usize, hi: usize) -> Probe {
        self.probe_as(s, i, (lo, hi), false)
    }

    /// The trial at value `i` inside the interval `lo..hi`: without the ceiling where the search
    /// probes so and `predictor` puts it over the ceiling (or a probe it put under ran out of
    /// memory there, saying no need), unless an out-of-memory or a fit there would close the
    /// interval (a neighbour of an end). A probe predicted to fit runs under the ceiling: a fit
    /// says its need there too and is its own certificate.
    fn probe_inside(
        &self,
        s: &mut Searcher<'_>,
        i: usize,
        lo: usize,
        hi: usize,
        predictor: &Predictor,
    ) -> Probe {
        self.probe_as(s, i, (lo, hi), self.runs_free(i, lo, hi, predictor))
    }

    fn runs_free(&self, i: usize, lo: usize, hi: usize, predictor: &Predictor) -> bool {
        self.free
            && i > lo + 1
            && i + 1 < hi
            && (predictor.overshot() || !predictor.predicts_fit(i))
    }

    /// The candidate [`Search::probe_inside`] runs for value `j` (what to start ahead).
    fn inside(&self, j: usize, lo: usize, hi: usize, predictor: &Predictor) -> Candidate {
        let c = self.axis.at(self.base, j);
        match self.runs_free(j, lo, hi, predictor) {
            true => c.without_ceiling(),
            false => c,
        }
    }

    /// The value's run under the ceiling where it was made; else, where the search probes without
    /// the ceiling, its run without it (made now if `free`), read against the ceiling; else a run
    /// under the ceiling.
    fn probe_as(
        &self,
        s: &mut Searcher<'_>,
        i: usize,
        (lo, hi): (usize, usize),
        free: bool,
    ) -> Probe {
        let values = &self.axis.values;
        let c = self.axis.at(self.base, i);
        let purpose = Purpose::Axis {
            axis: self.axis.name.clone(),
            lo: values[lo].label.clone(),
            hi: values[hi].label.clone(),
        };
        let unbounded = c.without_ceiling();
        let read_free =
            self.free && s.known(&c).is_none() && (free || s.known(&unbounded).is_some());
        let m = match (read_free, self.ceiling) {
            (true, Some(ceiling)) => under_ceiling(&s.measure(&unbounded, purpose), ceiling),
            _ => s.measure(&c, purpose),
        };
        Probe {
            index: i,
            label: values[i].label.clone(),
            candidate: c,
            measurement: m,
        }
    }

    /// Where the top ran out of memory under the ceiling without saying its need, the need its run
    /// without the ceiling said (the original's, measured first where probes run without it).
    fn note_top_need(&self, s: &Searcher<'_>, top: &Probe, predictor: &mut Predictor) {
        if top.measurement.need_bytes.is_none() {
            if let Some(m) = s.known(&top.candidate.without_ceiling()) {
                predictor.note(top.index, m);
            }
        }
    }

    /// Narrows the interval between `bottom` and `top`, and certifies the boundary found.
    fn narrowed(
        &self,
        s: &mut Searcher<'_>,
        bottom: Probe,
        top: Probe,
        predictor: &mut Predictor,
    ) -> AxisSearch {
        let (last_fit, first_oom, skipped) = self.narrow(s, bottom, top, predictor);
        if first_oom.index - last_fit.index > 1 {
            let verdict = self.gap(last_fit, first_oom, &skipped);
            return self.done(s, verdict, 0);
        }
        self.certified(s, last_fit, first_oom)
    }

    fn done(&self, s: &Searcher<'_>, verdict: AxisVerdict, confirmations: usize) -> AxisSearch {
        AxisSearch {
            axis: self.axis.name.clone(),
            tag: self.axis.tag,
            verdict,
            trials: s.trial_count() - self.start,
            confirmations,
            reruns: Sides::default(),
            plain_bisection: self.plain_bisection,
        }
    }

    /// How often the side `p` of the boundary is re-run: [`Search::confirm_runs`] times, unless its
    /// run repeats and its need lies away from the ceiling ([`AxisOptions::rerun_within`]).
    fn reruns(&self, p: &Probe) -> u32 {
        let m = &p.measurement;
        let near = |within: f64| match (m.need_bytes, self.ceiling) {
            (Some(need), Some(c)) => (need as f64 - c as f64).abs() <= within * c as f64,
            _ => false,
        };
        match self.rerun_within {
            Some(within) if !m.replay_disagrees && !near(within) => 0,
            _ => self.confirm_runs,
        }
    }

    /// `batch 1 could not be measured: <why>`.
    fn unmeasured_note(&self, p: &Probe) -> String {
        format!(
            "{} {} could not be measured: {}",
            self.axis.name, p.label, p.measurement.note
        )
    }

    fn unmeasured(&self, p: &Probe) -> String {
        format!("{}; the axis was not searched", self.unmeasured_note(p))
    }

    /// Neighbours found: a side read from a run without the ceiling runs under it (the device's
    /// certificate), then the sides are re-run where they may differ ([`Search::reruns`]), and the
    /// verdict says whether the boundary held.
    fn certified(&self, s: &mut Searcher<'_>, last_fit: Probe, first_oom: Probe) -> AxisSearch {
        let before = s.trial_count();
        let (last_fit, first_oom) = match self.certify(s, last_fit, first_oom) {
            Ok(pair) => pair,
            Err(contradicted) => return self.on_the_device(s, *contradicted),
        };
        let certificates = s.trial_count() - before;
        let reruns = Sides {
            last_fit: self.reruns(&last_fit),
            first_oom: self.reruns(&first_oom),
        };
        let verdict = self.confirm(s, last_fit, first_oom, reruns);
        let confirmations = certificates + (reruns.last_fit + reruns.first_oom) as usize;
        AxisSearch {
            reruns,
            ..self.done(s, verdict, confirmations)
        }
    }
}

/// What a run without the ceiling says of the trial under it: a need above the ceiling is an
/// out-of-memory, and so is an out-of-memory without it; a fit that says no need cannot be read.
fn under_ceiling(free: &Measurement, ceiling: u64) -> Measurement {
    let mut m = free.clone();
    match (free.outcome, free.need_bytes) {
        (Outcome::Fits, Some(need)) if need > ceiling => {
            m.outcome = Outcome::Oom;
            m.note = format!(
                "needs {} without the ceiling, more than it",
                human_bytes(need)
            );
        }
        (Outcome::Fits, None) => {
            m.outcome = Outcome::Inconclusive;
            m.note = "ran without the ceiling, but its run was not replayed".into();
        }
        _ => {}
    }
    m
}

/// The probes that may follow a plain bisection probe `i` between `lo` and `hi`, nearest first:
/// the middles of both halves, then of the four quarters (one of each pair will be asked for
/// whatever `i` says; idle slots start as many as they can, in this order).
fn middles(i: usize, lo: usize, hi: usize, open: &[usize]) -> Vec<usize> {
    let middle = |a: usize, b: usize| -> Option<usize> {
        let o: Vec<usize> = open.iter().copied().filter(|j| *j > a && *j < b).collect();
        (!o.is_empty()).then(|| nearest_middle(a, b, &o))
    };
    let mut found = vec![];
    for (a, b) in [(i, hi), (lo, i)] {
        if let Some(m) = middle(a, b) {
            found.push((m, a, b));
        }
    }
    let quarters: Vec<usize> = found
        .iter()
        .flat_map(|&(m, a, b)| [middle(m, b), middle(a, m)])
        .flatten()
        .collect();
    found.iter().map(|f| f.0).chain(quarters).collect()
}

/// Plain bisection: the open value nearest the middle.
fn nearest_middle(lo: usize, hi: usize, open: &[usize]) -> usize {
    let mid = (lo + hi) as f64 / 2.0;
    *open
        .iter()
        .min_by(|a, b| {
            ((**a as f64) - mid)
                .abs()
                .total_cmp(&((**b as f64) - mid).abs())
        })
        .expect("open is not empty")
}

#[cfg(test)]
mod tests {
    /// Idle slots take the likeliest next probes first: the halves' middles, then the quarters'.
    #[test]
    fn the_middles_of_the_halves_come_before_the_quarters() {
        let open: Vec<usize> = (1..16).collect();
        assert_eq!(super::middles(8, 0, 16, &open), [12, 4, 14, 10, 6, 2]);
        // Only what is open: a half with nothing left in it adds nothing.
        assert_eq!(super::middles(2, 0, 4, &[1, 2, 3]), [3, 1]);
    }
}
