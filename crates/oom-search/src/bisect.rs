//! Bisection of one monotone axis with three-valued outcomes: both ends checked first, probes ordered
//! by the peaks measured so far, inconclusive values skipped, the boundary confirmed by re-running it.

use crate::model::predict_boundary;
use crate::session::Session;
use crate::{Axis, Candidate, Measurement, Outcome, Purpose};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A predicted probe that fits with a peak under this fraction of the ceiling was a poor prediction
/// (its line came from points far from the boundary): predict again instead of probing its neighbour.
const FAR_BELOW: f64 = 0.8;

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
    pub verdict: AxisVerdict,
    /// Trials this axis cost (cache hits excluded, confirmations included).
    pub trials: usize,
    /// Of which confirmation re-runs.
    pub confirmations: usize,
    /// What plain bisection would need over the same interval: ceil(log2(n)) + 2.
    pub plain_bisection: usize,
}

/// Searches `axis` between indices `lo` and `hi` (lo expected to fit, hi to run out of memory), on
/// top of `base`. `purpose_axis` names the axis in events.
#[allow(clippy::too_many_arguments)]
pub fn bisect_axis(
    s: &mut Session<'_>,
    axis: &Axis,
    base: &Candidate,
    lo: usize,
    hi: usize,
    ceiling: u64,
    predict: bool,
    confirm_runs: u32,
) -> AxisSearch {
    let start = s.trial_count();
    let mut confirmations = 0;
    let probe = |s: &mut Session<'_>, i: usize, lo: usize, hi: usize| -> Probe {
        let c = axis.at(base, i);
        let m = s.measure(
            &c,
            Purpose::Axis {
                axis: axis.name.clone(),
                lo: axis.values[lo].label.clone(),
                hi: axis.values[hi].label.clone(),
            },
        );
        Probe {
            index: i,
            label: axis.values[i].label.clone(),
            candidate: c,
            measurement: m,
        }
    };

    let n = hi - lo + 1;
    let plain_bisection = {
        let mut log = 0;
        while (1usize << log) < n {
            log += 1;
        }
        log + 2
    };
    let done = |s: &Session<'_>, verdict: AxisVerdict, confirmations: usize| AxisSearch {
        axis: axis.name.clone(),
        verdict,
        trials: s.trial_count() - start,
        confirmations,
        plain_bisection,
    };

    let top = probe(s, hi, lo, hi);
    match top.measurement.outcome {
        Outcome::Fits => {
            let message = format!(
                "{} {} fits: nothing to search on this axis",
                axis.name, top.label
            );
            return done(
                s,
                AxisVerdict::AllFit {
                    highest: top,
                    message,
                },
                0,
            );
        }
        Outcome::Inconclusive => {
            let message = format!(
                "{} {} could not be measured ({}), so the axis was not searched",
                axis.name, top.label, top.measurement.note
            );
            return done(
                s,
                AxisVerdict::Inconclusive {
                    lo: None,
                    hi: None,
                    skipped: vec![top.label],
                    message,
                },
                0,
            );
        }
        Outcome::Oom => {}
    }
    let bottom = probe(s, lo, lo, hi);
    match bottom.measurement.outcome {
        Outcome::Oom => {
            let message = format!(
                "{} {} still runs out of memory: the {} is not the cause",
                axis.name,
                bottom.label,
                match axis.name.as_str() {
                    "batch" => "batch dimension",
                    "size" => "input size",
                    "stride" => "output stride",
                    "depth" => "depth of the model",
                    "phase" => "phase of the step",
                    other => other,
                }
            );
            return done(
                s,
                AxisVerdict::NotTheCause {
                    lowest: bottom,
                    message,
                },
                0,
            );
        }
        Outcome::Inconclusive => {
            let message = format!(
                "{} {} could not be measured ({}), so the axis was not searched",
                axis.name, bottom.label, bottom.measurement.note
            );
            return done(
                s,
                AxisVerdict::Inconclusive {
                    lo: None,
                    hi: Some(top),
                    skipped: vec![bottom.label],
                    message,
                },
                0,
            );
        }
        Outcome::Fits => {}
    }

    let xs: Vec<Option<f64>> = axis.values.iter().map(|v| v.x).collect();
    // Fits as (x, memory held by live tensors): smooth in batch and pixels, where the device's peak
    // moves in pool pages and, at small inputs, is mostly the context (seen on the H200). What the
    // device held beyond the live tensors at the largest fit so far is taken off the ceiling.
    let mut fit_points: Vec<(f64, f64)> = Vec::new();
    let mut base_bytes: Option<f64> = None;
    let mut overhead = 0.0f64;
    let note_fit =
        |p: &Probe, pts: &mut Vec<(f64, f64)>, base: &mut Option<f64>, over: &mut f64| {
            let m = &p.measurement;
            if let (Some(x), Some(y)) = (xs[p.index], m.peak_in_use_bytes.or(m.peak_bytes)) {
                pts.push((x, y as f64));
                if let (Some(dev), Some(live)) = (m.peak_bytes, m.peak_in_use_bytes) {
                    *over = dev.saturating_sub(live) as f64;
                }
            }
            if let Some(b) = m.base_bytes {
                *base = Some(b as f64);
            }
        };
    note_fit(&bottom, &mut fit_points, &mut base_bytes, &mut overhead);

    let (mut lo_p, mut hi_p) = (bottom, top);
    let mut skipped: BTreeSet<usize> = BTreeSet::new();
    // Probes left for the prediction before falling back to plain bisection.
    let mut predicted_left = if predict { 2 } else { 0 };
    // The last predicted probe: its index, outcome, and whether it fit far below the ceiling.
    let mut last_predicted: Option<(usize, Outcome, bool)> = None;
    let mut repredicted = false;
    loop {
        let (lo, hi) = (lo_p.index, hi_p.index);
        let open: Vec<usize> = (lo + 1..hi).filter(|i| !skipped.contains(i)).collect();
        if open.is_empty() {
            break;
        }
        let mut next = None;
        if predicted_left > 0 {
            // After a predicted probe, its neighbour closes the interval if the prediction was right;
            // a predicted fit far below the ceiling predicts again from the points it added.
            // That second prediction is one extra probe, once per axis.
            if let Some((_, Outcome::Fits, true)) = last_predicted {
                repredicted = true;
                predicted_left += 1;
            }
            let guess = match last_predicted {
                Some((i, Outcome::Fits, false)) => Some(i + 1),
                Some((i, Outcome::Oom, _)) => i.checked_sub(1),
                Some((_, Outcome::Inconclusive, _)) => None,
                None | Some((_, Outcome::Fits, true)) => {
                    let sub: Vec<f64> = xs[lo..=hi].iter().map(|x| x.unwrap_or(f64::NAN)).collect();
                    if sub.iter().any(|x| x.is_nan()) {
                        None
                    } else {
                        // The predicted last fitting value, kept inside the open interval: a
                        // prediction at or below `lo` says `lo + 1` is the first to fail.
                        predict_boundary(&fit_points, base_bytes, ceiling as f64 - overhead, &sub)
                            .map(|i| (lo + i).clamp(lo + 1, hi - 1))
                    }
                }
            };
            match guess.filter(|g| open.contains(g)) {
                Some(g) => {
                    next = Some(g);
                    predicted_left -= 1;
                }
                None => predicted_left = 0,
            }
        }
        let i = next.unwrap_or_else(|| {
            // Plain bisection: the open value nearest the middle.
            let mid = (lo + hi) as f64 / 2.0;
            *open
                .iter()
                .min_by(|a, b| {
                    ((**a as f64) - mid)
                        .abs()
                        .total_cmp(&((**b as f64) - mid).abs())
                })
                .expect("open is not empty")
        });
        let p = probe(s, i, lo, hi);
        if next.is_some() {
            let far_below = !repredicted
                && p.measurement
                    .peak_bytes
                    .is_some_and(|b| (b as f64) < FAR_BELOW * ceiling as f64);
            last_predicted = Some((i, p.measurement.outcome, far_below));
        }
        match p.measurement.outcome {
            Outcome::Fits => {
                note_fit(&p, &mut fit_points, &mut base_bytes, &mut overhead);
                lo_p = p;
            }
            Outcome::Oom => hi_p = p,
            Outcome::Inconclusive => {
                skipped.insert(i);
            }
        }
    }

    if hi_p.index - lo_p.index > 1 {
        let skipped: Vec<String> = skipped
            .iter()
            .filter(|i| **i > lo_p.index && **i < hi_p.index)
            .map(|i| axis.values[*i].label.clone())
            .collect();
        let message = format!(
            "the {} boundary lies between {} (fits) and {} (out of memory), but {} could not be measured",
            axis.name,
            lo_p.label,
            hi_p.label,
            skipped.join(", ")
        );
        return done(
            s,
            AxisVerdict::Inconclusive {
                lo: Some(lo_p),
                hi: Some(hi_p),
                skipped,
                message,
            },
            confirmations,
        );
    }

    let mut confirmed = false;
    if confirm_runs > 0 {
        let purpose = Purpose::Confirm {
            axis: axis.name.clone(),
        };
        // Every re-run of each side, alternating, so that a drift over time shows on both.
        let (mut fit_again, mut oom_again) = (vec![], vec![]);
        for _ in 0..confirm_runs {
            fit_again.push(s.rerun(&lo_p.candidate, purpose.clone()).outcome);
            oom_again.push(s.rerun(&hi_p.candidate, purpose.clone()).outcome);
        }
        confirmations = 2 * confirm_runs as usize;
        let stable = fit_again.iter().all(|o| *o == Outcome::Fits)
            && oom_again.iter().all(|o| *o == Outcome::Oom);
        if !stable {
            let tally = |outcomes: &[Outcome], want: Outcome| {
                let others: Vec<String> = outcomes
                    .iter()
                    .filter(|o| **o != want)
                    .map(|o| o.to_string())
                    .collect();
                format!(
                    "{want} {}/{} runs{}",
                    outcomes.iter().filter(|o| **o == want).count() + 1,
                    outcomes.len() + 1,
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!(" (else {})", others.join(", "))
                    }
                )
            };
            let message = format!(
                "the {} boundary is not stable: {} gave {}; {} gave {}",
                axis.name,
                lo_p.label,
                tally(&fit_again, Outcome::Fits),
                hi_p.label,
                tally(&oom_again, Outcome::Oom)
            );
            return done(
                s,
                AxisVerdict::Unstable {
                    message,
                    last_fit: lo_p,
                    first_oom: hi_p,
                },
                confirmations,
            );
        }
        confirmed = true;
    }
    done(
        s,
        AxisVerdict::Boundary {
            last_fit: lo_p,
            first_oom: hi_p,
            confirmed,
        },
        confirmations,
    )
}
