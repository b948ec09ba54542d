//! Where a boundary probably lies, and so where to probe next, from the peaks of trials that fit:
//! memory is close to affine in the batch and in the number of pixels (quadratic in the input side),
//! so a line through measured peaks predicts the largest value under the ceiling. A prediction only
//! orders probes; it never replaces one.

use crate::{Axis, AxisOptions, Measurement, Outcome};

/// A predicted probe that fits with a peak under this fraction of the ceiling was a poor prediction
/// (its line came from points far from the boundary): predict again instead of probing its neighbour.
const FAR_BELOW: f64 = 0.8;

/// Predicted probes before plain bisection: the prediction, its neighbour and a gallop of four.
const PREDICTED_PROBES: u32 = 6;

/// `points`: `(x, peak)` of trials that fit. `base`: memory that does not scale with `x` (parameters,
/// optimizer state, context), when measured. Returns the index of the largest value in `xs` whose
/// predicted peak stays at or under `ceiling`, or `None` when there is nothing to fit a line to.
pub fn predict_boundary(
    points: &[(f64, f64)],
    base: Option<f64>,
    ceiling: f64,
    xs: &[f64],
) -> Option<usize> {
    let (x2, y2, slope) = line(points, base)?;
    let x_star = x2 + (ceiling - y2) / slope;
    let mut best = None;
    for (i, x) in xs.iter().enumerate() {
        if *x <= x_star {
            best = Some(i);
        }
    }
    best
}

/// The line through the two largest of `points`, closest to the boundary (with one point, through
/// it and `base` at x = 0): (the largest x, its peak, the slope), where memory grows along it.
fn line(points: &[(f64, f64)], base: Option<f64>) -> Option<(f64, f64, f64)> {
    let mut pts: Vec<(f64, f64)> = points.to_vec();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    let (x1, y1, x2, y2) = match pts.as_slice() {
        [.., (x1, y1), (x2, y2)] => (*x1, *y1, *x2, *y2),
        [(x2, y2)] => (0.0, base?, *x2, *y2),
        [] => return None,
    };
    if x2 <= x1 {
        return None;
    }
    let slope = (y2 - y1) / (x2 - x1);
    (slope.is_finite() && slope > 0.0).then_some((x2, y2, slope))
}

/// Where to probe next, from the peaks of the fits so far. Memory held by live tensors is smooth in
/// batch and pixels, where the device's peak moves in pool pages and, at small inputs, is mostly the
/// context; what the device held beyond the live tensors at the largest fit is taken off the ceiling.
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
    fit_points: Vec<(f64, f64)>,
    base_bytes: Option<f64>,
    overhead: f64,
    /// The live bytes at the fit `overhead` was read at, and the share the pools add to what grows
    /// beyond them (their padding; see [`AxisOptions::pool_padding`]).
    overhead_live: Option<f64>,
    padding: f64,
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
}

impl Predictor {
    /// For `axis` under `ceiling` (no predictions where it is unknown, or without `predict`).
    pub(crate) fn new(axis: &Axis, o: &AxisOptions) -> Self {
        Predictor {
            xs: axis.values.iter().map(|v| v.x).collect(),
            ceiling: o.ceiling.unwrap_or(0) as f64,
            fit_points: vec![],
            base_bytes: None,
            overhead: 0.0,
            overhead_live: None,
            padding: o.pool_padding,
            left: if o.predict && o.ceiling.is_some() {
                PREDICTED_PROBES
            } else {
                0
            },
            last: None,
            streak: 0,
            turned: false,
            repredicted: false,
        }
    }

    /// A fit at value `index`.
    pub(crate) fn note_fit(&mut self, index: usize, m: &Measurement) {
        if let (Some(x), Some(y)) = (self.xs[index], m.peak_in_use_bytes.or(m.peak_bytes)) {
            self.fit_points.push((x, y as f64));
            if let (Some(dev), Some(live)) = (m.peak_bytes, m.peak_in_use_bytes) {
                self.overhead = dev.saturating_sub(live) as f64;
                self.overhead_live = Some(live as f64);
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
            && m.peak_bytes
                .is_some_and(|b| (b as f64) < FAR_BELOW * self.ceiling);
        self.last = Some((index, m.outcome, far_below));
    }

    /// The next predicted probe inside `open`, or `None` for plain bisection from now on.
    pub(crate) fn next_guess(&mut self, lo: usize, hi: usize, open: &[usize]) -> Option<usize> {
        if self.left == 0 {
            return None;
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
                let raw = self.predict_unclamped(lo, hi);
                if raw.is_some_and(|r| r <= lo) && self.padding_hides_a_step(lo) {
                    // The line puts the last fit at `lo`, measured: `lo + 1` is its neighbour. Where
                    // the pools' padding hides a step, a fit there says the line is off by more
                    // than a step, and the probes gallop on as after a prediction and its
                    // neighbour both fitting (two steps, not one). The forum's fine sizes on the
                    // H200 (832 fits, 864 does not) went 840, 848, 856, one round each, in every
                    // run that reached them; now 840, 856.
                    self.last = Some((lo, Outcome::Fits, false));
                }
                raw.map(|r| r.clamp(lo + 1, hi - 1))
            }
        };
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

    /// The live bytes a value may hold and still fit: the ceiling less what the device held beyond
    /// the live tensors at the largest fit, and less the pools' padding on what grows beyond that
    /// fit's live bytes (device = live + overhead + padding × (live − that fit's live)). The pools'
    /// slack grows with the value (R50 OS16 512²: 1.58 GiB beside 2.68 live at batch 4, 3.0 GiB
    /// beside 20.5 at batch 34, GPU run 40), so a constant overhead overshoots; the padding is the
    /// least of that growth, and the gallop corrects the rest.
    fn live_ceiling(&self) -> f64 {
        let headroom = self.ceiling - self.overhead;
        match self.overhead_live {
            Some(live) => (headroom + self.padding * live) / (1.0 + self.padding),
            None => headroom,
        }
    }

    /// Whether the pools' padding on the live bytes of the largest fit (up to
    /// [`AxisOptions::pool_padding`] of them) is more than what one step from `lo` adds along the
    /// line: neighbours' device peaks may then differ by more than the step itself (the forum's
    /// 848² held 0.28 GiB less than 840² on the H200), and the line cannot tell them apart. Never
    /// where the pools do not pad (the CPU's exact allocator, burn's model).
    fn padding_hides_a_step(&self, lo: usize) -> bool {
        let next = self.xs.get(lo + 1).copied().flatten();
        match (
            line(&self.fit_points, self.base_bytes),
            self.overhead_live,
            self.xs[lo],
            next,
        ) {
            (Some((_, _, slope)), Some(live), Some(x0), Some(x1)) => {
                self.padding * live > slope * (x1 - x0)
            }
            _ => false,
        }
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
        predict_boundary(&self.fit_points, self.base_bytes, self.live_ceiling(), &sub)
            .map(|i| lo + i)
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

    /// GPU run 40's capacity search (R50 OS16 512² under 24 GiB, the `pytorch` pools): the original,
    /// batch 4, fits with 2.68 GiB live and 4.26 GiB on the device. Batch 34 fits (20.5 GiB live,
    /// 23.5 on the device), 35 does not. A constant overhead predicts 37; the pools' padding on
    /// what grows predicts 35, one step from the boundary instead of three.
    #[test]
    fn the_pools_padding_on_what_grows_is_taken_off_the_ceiling() {
        let axis = Axis {
            name: "batch".into(),
            noun: "batch".into(),
            fix: None,
            key: "data.batch".into(),
            values: (1..=64)
                .map(|v| crate::AxisValue {
                    value: v.to_string(),
                    label: v.to_string(),
                    x: Some(v as f64),
                })
                .collect(),
            original: 3,
            fine: vec![],
        };
        let original = Measurement {
            peak_bytes: Some(4_575_985_664),
            peak_in_use_bytes: Some(2_879_505_920),
            base_bytes: Some(340_071_424),
            ..Measurement::new(Outcome::Fits)
        };
        let first = |pool_padding: f64| {
            let o = AxisOptions {
                ceiling: Some(24 << 30),
                predict: true,
                confirm_runs: 1,
                pool_padding,
                settled_below: 0.0,
            };
            let mut p = Predictor::new(&axis, &o);
            p.note_fit(3, &original);
            p.first_guess(3, 63).map(|i| axis.values[i].label.clone())
        };
        assert_eq!(first(0.0).as_deref(), Some("37"));
        assert_eq!(first(1.0 / 16.0).as_deref(), Some("35"));
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
