//! The last step of a bisection: the device's certificate for a side found without the ceiling,
//! then re-running both sides of the boundary, where a side may differ from its first run, and
//! saying whether the boundary held.

use super::{AxisSearch, AxisVerdict, Probe, Search, Sides};
use crate::predict::Predictor;
use crate::searcher::Searcher;
use crate::vocabulary::{AxisOptions, Outcome, Purpose};

impl Search<'_> {
    /// Each side whose verdict was read from a run without the ceiling runs under it: the pair with
    /// the device's measurements (keeping the need the free run said), or `Err` with the side the
    /// device contradicts (a fit where the replay needs more than the ceiling, or the reverse).
    pub(super) fn certify(
        &self,
        s: &mut Searcher<'_>,
        last_fit: Probe,
        first_oom: Probe,
    ) -> Result<(Probe, Probe), Box<Probe>> {
        let purpose = Purpose::Confirm {
            axis: self.axis.name.clone(),
        };
        let mut sides = [last_fit, first_oom];
        for side in &mut sides {
            let ran_out_free = s
                .known(&side.candidate.without_ceiling())
                .is_some_and(|m| m.outcome == Outcome::Oom);
            // Measured under the ceiling already, or out of memory on the device without it (it
            // had what the card had free, alone on it, never less than the ceiling): the device's
            // own verdict.
            if !self.free || s.known(&side.candidate).is_some() || ran_out_free {
                continue;
            }
            let free = side.measurement.clone();
            let mut m = s.measure(&side.candidate, purpose.clone());
            if m.outcome == Outcome::Inconclusive {
                // Not a contradiction: the replay's verdict stands, and says the device's failed.
                side.measurement.note = format!("under the ceiling: {}", m.note);
                continue;
            }
            m.need_bytes = m.need_bytes.or(free.need_bytes);
            let contradicts = m.outcome != free.outcome;
            m.replay_disagrees |= contradicts;
            side.measurement = m;
            if contradicts {
                return Err(Box::new(side.clone()));
            }
        }
        let [last_fit, first_oom] = sides;
        Ok((last_fit, first_oom))
    }

    /// The device contradicted the replay at `side`: its verdict stands, and the boundary is
    /// searched again under the ceiling alone, between `side` and the end on its other side.
    pub(super) fn on_the_device(&self, s: &mut Searcher<'_>, side: Probe) -> AxisSearch {
        let capped = Search {
            free: false,
            ..*self
        };
        let (lo, hi) = self.ends;
        let (bottom, top) = match side.measurement.outcome {
            Outcome::Fits => (side, capped.probe(s, hi, lo, hi)),
            _ => (capped.probe(s, lo, lo, hi), side),
        };
        let options = AxisOptions {
            probe_without_ceiling: false,
            ..self.options
        };
        let mut predictor = Predictor::new(self.axis, &options);
        predictor.note(bottom.index, &bottom.measurement);
        predictor.note(top.index, &top.measurement);
        capped.narrowed(s, bottom, top, &mut predictor)
    }

    /// Re-runs each side as often as `reruns` says, alternating so that a drift over time shows
    /// on both.
    pub(super) fn confirm(
        &self,
        s: &mut Searcher<'_>,
        last_fit: Probe,
        first_oom: Probe,
        reruns: Sides,
    ) -> AxisVerdict {
        let purpose = Purpose::Confirm {
            axis: self.axis.name.clone(),
        };
        let (mut fit_again, mut oom_again) = (vec![], vec![]);
        for (side, n) in [(&last_fit, reruns.last_fit), (&first_oom, reruns.first_oom)] {
            if n > 0 {
                s.expect_reruns(std::slice::from_ref(&side.candidate), n);
            }
        }
        for k in 0..reruns.last_fit.max(reruns.first_oom) {
            if k < reruns.last_fit {
                fit_again.push(s.rerun(&last_fit.candidate, purpose.clone()).outcome);
            }
            if k < reruns.first_oom {
                oom_again.push(s.rerun(&first_oom.candidate, purpose.clone()).outcome);
            }
        }
        let stable = fit_again.iter().all(|o| *o == Outcome::Fits)
            && oom_again.iter().all(|o| *o == Outcome::Oom);
        let unmeasured = |v: &[Outcome]| v.contains(&Outcome::Inconclusive);
        if !stable && s.budget_exhausted && (unmeasured(&fit_again) || unmeasured(&oom_again)) {
            // The budget ran out before the re-runs: the boundary stands, unconfirmed; a re-run
            // that did run and disagreed still makes it unstable.
            let disagreed = fit_again.contains(&Outcome::Oom) || oom_again.contains(&Outcome::Fits);
            if !disagreed {
                return AxisVerdict::Boundary {
                    last_fit,
                    first_oom,
                    confirmed: false,
                };
            }
        }
        if stable {
            return AxisVerdict::Boundary {
                last_fit,
                first_oom,
                confirmed: !fit_again.is_empty() || !oom_again.is_empty(),
            };
        }
        let message = format!(
            "the {} boundary is not stable: {} gave {}; {} gave {}",
            self.axis.name,
            last_fit.label,
            tally(&fit_again, Outcome::Fits),
            first_oom.label,
            tally(&oom_again, Outcome::Oom)
        );
        AxisVerdict::Unstable {
            message,
            last_fit,
            first_oom,
        }
    }
}

/// `fits 2/3 runs (else oom)`: the first run (which gave `want`) counts too.
fn tally(outcomes: &[Outcome], want: Outcome) -> String {
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
}
