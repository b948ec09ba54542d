//! Checking an axis's ends and narrowing the interval between them, probing where the needs
//! predict the boundary, else the middle; what could not be measured is skipped, never guessed.

use super::*;

impl Search<'_> {
    /// The top end must run out of memory and the bottom end fit; otherwise the verdict is settled
    /// here (all fit, not the cause, or an end that could not be measured).
    pub(super) fn check_ends(&self, s: &mut Searcher<'_>, lo: usize, hi: usize) -> Ends {
        let top = self.probe(s, hi, lo, hi);
        match top.measurement.outcome {
            Outcome::Fits => {
                // The axis's top is as far as it goes: what fits is at least that.
                let message = format!(
                    "{} {} fits, the top of the axis: the largest that fits is at least {}",
                    self.axis.name, top.label, top.label
                );
                return Ends::Settled(AxisVerdict::AllFit {
                    highest: top,
                    message,
                });
            }
            Outcome::Inconclusive => {
                return Ends::Settled(AxisVerdict::Inconclusive {
                    message: self.unmeasured(&top),
                    lo: None,
                    hi: None,
                    skipped: vec![top.label],
                })
            }
            Outcome::Oom => {}
        }
        let (bottom, below) = self.lowest_measured(s, lo, hi);
        match (bottom.measurement.outcome, below.first()) {
            (Outcome::Oom, None) => {
                let message = format!(
                    "{} {} still runs out of memory: the {} is not the cause",
                    self.axis.name, bottom.label, self.axis.noun
                );
                Ends::Settled(AxisVerdict::NotTheCause {
                    lowest: bottom,
                    message,
                })
            }
            // Below an OOM, only values that could not be measured: they may fit.
            (Outcome::Oom, Some(first)) => Ends::Settled(AxisVerdict::Inconclusive {
                message: format!(
                    "{} {} runs out of memory, and {}",
                    self.axis.name,
                    bottom.label,
                    self.unmeasured_note(first)
                ),
                lo: None,
                hi: Some(bottom),
                skipped: below.iter().map(|p| p.label.clone()).collect(),
            }),
            (Outcome::Inconclusive, first) => Ends::Settled(AxisVerdict::Inconclusive {
                message: self.unmeasured(first.unwrap_or(&bottom)),
                lo: None,
                hi: Some(top),
                skipped: below
                    .iter()
                    .chain([&bottom])
                    .map(|p| p.label.clone())
                    .collect(),
            }),
            (Outcome::Fits, _) => Ends::Open { bottom, top },
        }
    }

    /// The lowest value that can be measured, from `lo` up: a value that cannot (PyTorch refuses
    /// batch 1 with an image-pooling BatchNorm) is skipped like `git bisect skip`, at most
    /// `SKIP_UP` of them. Returns that probe and the ones skipped below it.
    pub(super) fn lowest_measured(
        &self,
        s: &mut Searcher<'_>,
        lo: usize,
        hi: usize,
    ) -> (Probe, Vec<Probe>) {
        let mut below = vec![];
        let mut bottom = self.probe(s, lo, lo, hi);
        while bottom.measurement.outcome == Outcome::Inconclusive
            && below.len() < SKIP_UP
            && bottom.index + 1 < hi
        {
            let next = bottom.index + 1;
            below.push(bottom);
            bottom = self.probe(s, next, lo, hi);
        }
        (bottom, below)
    }

    /// Shrinks the open interval between a fit and an OOM until they are neighbours or only
    /// unmeasurable values lie between; returns both sides and the indices skipped.
    pub(super) fn narrow(
        &self,
        s: &mut Searcher<'_>,
        mut lo_p: Probe,
        mut hi_p: Probe,
        predictor: &mut Predictor,
    ) -> (Probe, Probe, BTreeSet<usize>) {
        let mut skipped = BTreeSet::new();
        loop {
            let (lo, hi) = (lo_p.index, hi_p.index);
            let open: Vec<usize> = (lo + 1..hi).filter(|i| !skipped.contains(i)).collect();
            if open.is_empty() {
                return (lo_p, hi_p, skipped);
            }
            let guess = predictor.next_guess(lo, hi, &open);
            let i = guess.unwrap_or_else(|| nearest_middle(lo, hi, &open));
            let follow_ups = match guess {
                Some(_) => predictor.follow_ups(i),
                None => middles(i, lo, hi, &open),
            };
            let next: Vec<Candidate> = follow_ups
                .into_iter()
                .filter(|j| open.contains(j) && *j != i)
                .map(|j| self.inside(j, lo, hi, predictor))
                .collect();
            // A probe already measured (started ahead) answers at once, and the step after it
            // guesses anew: guesses for it would only start trials that step no longer wants.
            if !s.ready(&self.inside(i, lo, hi, predictor)) {
                s.guess(&next);
                self.confirm_ahead(s, i, &lo_p, hi);
            }
            let p = self.probe_inside(s, i, lo, hi, predictor);
            if guess.is_some() {
                predictor.note_predicted(p.index, &p.measurement);
            }
            predictor.note(p.index, &p.measurement);
            match p.measurement.outcome {
                Outcome::Fits => lo_p = p,
                Outcome::Oom => hi_p = p,
                Outcome::Inconclusive => {
                    skipped.insert(i);
                }
            }
        }
    }

    /// Where probe `i` is next to an end of the interval, one of its outcomes closes it (a fit next
    /// to the first OOM, an OOM next to the last fit): the confirmation's re-runs of that pair start
    /// beside the probe instead of a round after it. Started as sure although they are not: a
    /// probe next to an end is where a prediction's gallop lands on the boundary, each re-run is
    /// needed whenever the pair closes the interval, and `i`'s own is needed either way; the
    /// capacity search's last round is two fits near the ceiling in a row otherwise. Only where
    /// this search is the only one: beside others (the forum's axes) the workers are busy with
    /// their trials, and a re-run not needed takes from them (the CPU quickstart, two workers:
    /// 40 s → 48 s with five started for nothing, `docs/bench-rounds.sh`).
    pub(super) fn confirm_ahead(&self, s: &mut Searcher<'_>, i: usize, lo_p: &Probe, hi: usize) {
        if self.confirm_runs == 0 || !s.searching_alone() {
            return;
        }
        // `i` with the end (or both ends) it is next to: the sides of the pairs it may close; an
        // end that would not be re-run is left out. Only where every side is re-run whatever it
        // measured: elsewhere whether `i` is re-run depends on what it measures.
        if self.rerun_within.is_some() {
            return;
        }
        let lo = lo_p.index;
        let below = (i == lo + 1).then_some(lo);
        let above = (i + 1 == hi).then_some(hi);
        let sides: Vec<usize> = below.into_iter().chain([i]).chain(above).collect();
        if sides.len() > 1 {
            let candidates: Vec<Candidate> =
                sides.iter().map(|j| self.axis.at(self.base, *j)).collect();
            s.expect_reruns(&candidates, self.confirm_runs);
        }
    }

    /// A boundary with unmeasurable values between its sides.
    pub(super) fn gap(&self, lo_p: Probe, hi_p: Probe, skipped: &BTreeSet<usize>) -> AxisVerdict {
        let skipped: Vec<String> = skipped
            .iter()
            .filter(|i| **i > lo_p.index && **i < hi_p.index)
            .map(|i| self.axis.values[*i].label.clone())
            .collect();
        let message = format!(
            "the {} boundary lies between {} (fits) and {} (out of memory), but {} could not be measured",
            self.axis.name,
            lo_p.label,
            hi_p.label,
            skipped.join(", ")
        );
        AxisVerdict::Inconclusive {
            lo: Some(lo_p),
            hi: Some(hi_p),
            skipped,
            message,
        }
    }
}
