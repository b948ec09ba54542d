//! The last step of a bisection: re-running both sides of the boundary, where a side may differ
//! from its first run, and saying whether the boundary held.

use super::{AxisVerdict, Probe, Search, Sides};
use crate::searcher::Searcher;
use crate::vocabulary::{Outcome, Purpose};

impl Search<'_> {
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
