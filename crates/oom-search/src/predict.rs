//! Where a boundary probably lies, and so where to probe next, from what trials measured. A trial
//! whose run was replayed through the caching allocator says its need (the smallest ceiling it
//! fits under), whether it fits or not; other trials say the peak of a fit. Memory is close to
//! affine in the batch and in the number of pixels (quadratic in the input side), so a line
//! through two measured points predicts the largest value under the ceiling: best the two that
//! bracket it, else the two nearest it. A prediction only orders probes; it never replaces one.

use crate::vocabulary::AxisOptions;
use crate::vocabulary::{Axis, Measurement, Outcome};

/// A predicted probe that fits with a peak under this fraction of the ceiling was a poor prediction
/// (its line came from points far from the boundary): predict again instead of probing its neighbour.
const FAR_BELOW: f64 = 0.8;

/// Predicted probes before plain bisection: the prediction, its neighbour and a gallop of four.
pub(crate) const PREDICTED_PROBES: u32 = 6;

/// `points`: `(x, bytes)` measured (needs, or peaks of fits). `base`: memory that does not scale
/// with `x` (parameters, optimizer state, context), when measured. Returns the index of the largest
/// value in `xs` whose predicted bytes stay at or under `ceiling`, or `None` when there is nothing
/// to fit a line to.
pub fn predict_boundary(
    points: &[(f64, f64)],
    base: Option<f64>,
    ceiling: f64,
    xs: &[f64],
) -> Option<usize> {
    let (x2, y2, slope) = line(points, base, ceiling)?;
    let x_star = x2 + (ceiling - y2) / slope;
    let mut best = None;
    for (i, x) in xs.iter().enumerate() {
        if *x <= x_star {
            best = Some(i);
        }
    }
    best
}

/// The line through the two of `points` nearest the boundary: the largest under `ceiling` and
/// the smallest above it where both exist, else the two largest (with one point, through it and
/// `base` at x = 0): (a point's x, its bytes, the slope), where memory grows along it.
fn line(points: &[(f64, f64)], base: Option<f64>, ceiling: f64) -> Option<(f64, f64, f64)> {
    let mut pts: Vec<(f64, f64)> = points.to_vec();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    let under = pts.iter().rev().find(|p| p.1 <= ceiling);
    let over = pts.iter().find(|p| p.1 > ceiling);
    let (x1, y1, x2, y2) = match (under, over, pts.as_slice()) {
        (Some(&(x1, y1)), Some(&(x2, y2)), _) if x1 < x2 => (x1, y1, x2, y2),
        (_, _, [.., (x1, y1), (x2, y2)]) => (*x1, *y1, *x2, *y2),
        (_, _, [(x2, y2)]) => (0.0, base?, *x2, *y2),
        (_, _, []) => return None,
    };
    if x2 <= x1 {
        return None;
    }
    let slope = (y2 - y1) / (x2 - x1);
    (slope.is_finite() && slope > 0.0).then_some((x2, y2, slope))
}

/// Where to probe next, from what was measured so far: needs where trials have them; else the
/// peaks of fits, the memory held by live tensors being smooth in batch and pixels where the
/// device's peak moves in pool pages (what the device held beyond the live tensors at the largest
/// fit is then taken off the ceiling).
///
/// The policy: probe the predicted last fit; if the prediction was right, its neighbour closes the
/// interval (where the prediction is the measured bottom, its neighbour is the first probe). Where
/// the neighbour has the same outcome the prediction was off, and the probes gallop from it, each
/// twice as far as the one before, until the outcome turns (the device's slack grows
/// with the batch, so a line through small fits overshoots by a few steps, not by half the axis);
/// plain bisection then halves the bracket the last two probes left.
/// A predicted value that fits far below the ceiling predicts once more from the points it added.
/// At most [`PREDICTED_PROBES`] predicted probes (one more with the re-prediction), then plain
/// bisection.
pub(crate) struct Predictor {
    xs: Vec<Option<f64>>,
    ceiling: f64,
    points: Vec<(f64, f64)>,
    base_bytes: Option<f64>,
    /// The need with nothing in it that scales ([`Measurement::need_floor_bytes`]): the intercept
    /// of a line through a single need.
    need_floor: Option<f64>,
    /// What the device held beyond the live tensors at the largest fit (0 where needs are known:
    /// a need is in the ceiling's own terms).
    overhead: f64,
    /// Predicted probes left before falling back to plain bisection.
    left: u32,
    /// The last predicted probe: its index, outcome, and whether it fit far below the ceiling.
    last: Option<(usize, Outcome, bool)>,
    /// Predicted probes in a row with the same outcome, less one: the next steps `2^streak` away.
    streak: u32,
    /// The last predicted probe's outcome differs from the one before: the gallop has bracketed
    /// the boundary, and plain bisection halves what is left.
    turned: bool,
    repredicted: bool,
    /// The last predicted probe said its need: the next prediction is drawn through it (a secant
    /// step), instead of galloping away from a guess whose miss is known in bytes.
    said_need: bool,
    /// A probe predicted to fit ran out of memory under the ceiling without saying its need: the
    /// line is off, and only runs without the ceiling can redraw it.
    overshot: bool,
}

impl Predictor {
    /// For `axis` under `ceiling` (no predictions where it is unknown, or without `predict`).
    pub(crate) fn new(axis: &Axis, o: &AxisOptions) -> Self {
        Predictor {
            xs: axis.values.iter().map(|v| v.x).collect(),
            ceiling: o.ceiling.unwrap_or(0) as f64,
            points: vec![],
            base_bytes: None,
            need_floor: None,
            overhead: 0.0,
            left: if o.predict && o.ceiling.is_some() {
                PREDICTED_PROBES
            } else {
                0
            },
            last: None,
            streak: 0,
            turned: false,
            repredicted: false,
            said_need: false,
            overshot: false,
        }
    }

    /// What the trial at value `index` measured: its need, whatever its outcome, else a fit's
    /// live (or device) peak.
    pub(crate) fn note(&mut self, index: usize, m: &Measurement) {
        let Some(x) = self.xs[index] else { return };
        if let Some(need) = m.need_bytes {
            self.points.push((x, need as f64));
            if let Some(floor) = m.need_floor_bytes {
                self.need_floor = Some(floor as f64);
            }
        } else if let (Outcome::Fits, Some(y)) = (m.outcome, m.peak_in_use_bytes.or(m.peak_bytes)) {
            self.points.push((x, y as f64));
            if let (Some(dev), Some(live)) = (m.peak_bytes, m.peak_in_use_bytes) {
                self.overhead = dev.saturating_sub(live) as f64;
            }
        }
        if let Some(b) = m.base_bytes {
            self.base_bytes = Some(b as f64);
        }
    }

    /// The outcome of the predicted probe at value `index`.
    pub(crate) fn note_predicted(&mut self, index: usize, m: &Measurement) {
        self.turned = self.last.is_some_and(|(_, before, _)| before != m.outcome);
        match self.last {
            Some((_, before, _)) if before == m.outcome => self.streak += 1,
            _ => self.streak = 0,
        }
        let far_below = !self.repredicted
            && m.need_bytes
                .or(m.peak_bytes)
                .is_some_and(|b| (b as f64) < FAR_BELOW * self.ceiling);
        self.last = Some((index, m.outcome, far_below));
        self.said_need = m.need_bytes.is_some();
        self.overshot |= m.outcome == Outcome::Oom && m.need_bytes.is_none();
    }

    /// Whether a probe predicted to fit ran out of memory under the ceiling without saying its
    /// need: the line is off, and the axis's next probes run without the ceiling to redraw it.
    pub(crate) fn overshot(&self) -> bool {
        self.overshot
    }

    /// The next predicted probe inside `open`, or `None` for plain bisection from now on.
    pub(crate) fn next_guess(&mut self, lo: usize, hi: usize, open: &[usize]) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        if self.said_need {
            // A secant step: a turn is expected, and the line through the new need says where.
            self.last = None;
            return self.take(self.predict(lo, hi), open);
        }
        match self.last {
            Some((_, Outcome::Fits, true)) => {
                self.repredicted = true;
                self.left += 1;
            }
            _ if self.turned => {
                self.left = 0;
                return None;
            }
            _ => {}
        }
        let guess = match self.last {
            Some((i, Outcome::Fits, false)) => Some(i + self.step()),
            Some((i, Outcome::Oom, _)) => i.checked_sub(self.step()),
            Some((_, Outcome::Inconclusive, _)) => None,
            None | Some((_, Outcome::Fits, true)) => {
                // A fresh prediction: its neighbour, not a turn, follows it.
                self.last = None;
                self.predict(lo, hi)
            }
        };
        self.take(guess, open)
    }

    /// `guess` as the next predicted probe where it is still open (one fewer left), else none from
    /// now on.
    fn take(&mut self, guess: Option<usize>, open: &[usize]) -> Option<usize> {
        match guess.filter(|g| open.contains(g)) {
            Some(g) => {
                self.left -= 1;
                Some(g)
            }
            None => {
                self.left = 0;
                None
            }
        }
    }

    /// The bytes a value may hold and still fit: the ceiling, less what the device held beyond the
    /// live tensors where the points are live bytes.
    fn live_ceiling(&self) -> f64 {
        self.ceiling - self.overhead
    }

    /// The predicted last fit between a fit at `fit` and an out-of-memory at `oom` (or the end of
    /// the axis), from every point noted, kept inside `fit..oom`: the step of a secant search on
    /// needs, each new need drawing the next line.
    pub(crate) fn last_fit_between(&self, fit: usize, oom: usize) -> Option<usize> {
        (self.left > 0 && oom > fit)
            .then(|| self.predict_unclamped(fit, oom))
            .flatten()
            .map(|i| i.clamp(fit, oom - 1))
    }

    /// Whether the line through the points noted puts value `index` under the ceiling.
    pub(crate) fn predicts_fit(&self, index: usize) -> bool {
        let Some(x) = self.xs.get(index).copied().flatten() else {
            return false;
        };
        let ceiling = self.live_ceiling();
        line(&self.points, self.intercept(), ceiling)
            .is_some_and(|(x2, y2, slope)| y2 + slope * (x - x2) <= ceiling)
    }

    /// The probe [`Predictor::next_guess`] would start with between `lo` and `hi`, every value
    /// between open; changes nothing.
    pub(crate) fn first_guess(&self, lo: usize, hi: usize) -> Option<usize> {
        (self.left > 0 && self.last.is_none() && hi > lo + 1)
            .then(|| self.predict(lo, hi))
            .flatten()
    }

    /// How far the next probe after a predicted one lies from it.
    fn step(&self) -> usize {
        1 << self.streak.min(16)
    }

    /// The probes that may follow the predicted probe at `i`, whichever its outcome: a step twice
    /// as far if it repeats the last outcome, its neighbour if it turns it.
    pub(crate) fn follow_ups(&self, i: usize) -> Vec<usize> {
        let far = 2 * self.step();
        let probes = match self.last {
            Some((_, Outcome::Oom, _)) => [i.checked_sub(far), Some(i + 1)],
            Some((_, Outcome::Fits, false)) => [Some(i + far), i.checked_sub(1)],
            _ => [Some(i + 1), i.checked_sub(1)],
        };
        probes.into_iter().flatten().collect()
    }

    /// The predicted last fitting value, kept inside the open interval: a prediction at or below
    /// `lo` says `lo + 1` is the first to fail.
    fn predict(&self, lo: usize, hi: usize) -> Option<usize> {
        self.predict_unclamped(lo, hi)
            .map(|i| i.clamp(lo + 1, hi - 1))
    }

    /// The predicted last fitting value between `lo` and `hi`, ends included.
    fn predict_unclamped(&self, lo: usize, hi: usize) -> Option<usize> {
        let sub: Vec<f64> = self.xs[lo..=hi]
            .iter()
            .map(|x| x.unwrap_or(f64::NAN))
            .collect();
        if sub.iter().any(|x| x.is_nan()) {
            return None;
        }
        predict_boundary(&self.points, self.intercept(), self.live_ceiling(), &sub).map(|i| lo + i)
    }

    /// The bytes at x = 0 of a line through one point: the need's floor where needs were noted
    /// with one, else what was measured not to scale.
    fn intercept(&self) -> Option<f64> {
        self.need_floor.or(self.base_bytes)
    }

    /// The predicted last fit where it lies above `lo` (kept below `hi`), as the first probe of a
    /// search that has measured only the top: `None` where the line puts it at or below `lo`,
    /// whose own probe then comes first.
    pub(crate) fn last_fit_above(&mut self, lo: usize, hi: usize) -> Option<usize> {
        if self.left == 0 || hi <= lo + 1 {
            return None;
        }
        let i = self.predict_unclamped(lo, hi).filter(|i| *i > lo)?;
        self.left -= 1;
        Some(i.min(hi - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_batch() {
        // 1 GiB fixed, 0.5 GiB per sample, 4 GiB ceiling: batch 6 fits (4.0), batch 7 does not.
        let xs: Vec<f64> = (1..=16).map(f64::from).collect();
        let g = 1024.0 * 1024.0 * 1024.0;
        let p = predict_boundary(&[(1.0, 1.5 * g)], Some(g), 4.0 * g, &xs);
        assert_eq!(p, Some(5));
        let p = predict_boundary(&[(1.0, 1.5 * g), (2.0, 2.0 * g)], None, 4.0 * g, &xs);
        assert_eq!(p, Some(5));
    }

    /// Needs on both sides of the ceiling: the line through the pair that brackets it, not the
    /// two largest (whose slope, past the boundary, says nothing of it).
    #[test]
    fn needs_on_both_sides_of_the_ceiling_bracket_the_prediction() {
        let xs: Vec<f64> = (1..=16).map(f64::from).collect();
        // Needs 2 + b GiB up to batch 8, then a step: the boundary under 10 GiB is 8.
        let pts = [(4.0, 6.0), (8.0, 10.0), (12.0, 30.0), (16.0, 31.0)];
        assert_eq!(predict_boundary(&pts, None, 10.0, &xs), Some(7));
        // The two largest alone put it below the axis.
        assert_eq!(predict_boundary(&pts[2..], None, 10.0, &xs), None);
    }

    #[test]
    fn nothing_to_fit() {
        assert_eq!(predict_boundary(&[], Some(1.0), 10.0, &[1.0, 2.0]), None);
        assert_eq!(
            predict_boundary(&[(1.0, 5.0)], None, 10.0, &[1.0, 2.0]),
            None
        );
        // Flat or falling memory predicts nothing.
        assert_eq!(
            predict_boundary(&[(1.0, 5.0), (2.0, 5.0)], None, 10.0, &[1.0, 2.0]),
            None
        );
    }
}
