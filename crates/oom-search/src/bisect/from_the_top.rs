//! Searching an axis on needs from its top: the original's need predicts the last fit, and the
//! line through the needs nearest the ceiling the next probe, so that a boundary is found without
//! the values below it (nor, for a capacity, the top) ever running.

use super::*;

impl Search<'_> {
    /// Where the bottom fits with a need and the top is not yet measured (a capacity search from
    /// the original), the boundary is looked for on needs alone: probe the predicted last fit,
    /// draw the next line through the needs nearest the ceiling, until a fit and an out-of-memory
    /// are neighbours, which is the boundary without the top ever running (memory grows along
    /// the axis). `None` where it does not close within the predicted probes, or a probe cannot
    /// be measured: the bisection then goes on from what was measured.
    pub(super) fn secant_on_needs(
        &self,
        s: &mut Searcher<'_>,
        lo: usize,
        hi: usize,
        o: &AxisOptions,
    ) -> Option<(Probe, Probe)> {
        let at = |j: usize| self.axis.at(self.base, j);
        if s.known(&at(hi)).is_some() {
            return None;
        }
        let bottom = s.known(&at(lo)).cloned()?;
        let mut predictor = Predictor::new(self.axis, o);
        predictor.note(lo, &bottom);
        if bottom.outcome != Outcome::Fits || bottom.need_bytes.is_none() {
            return None;
        }
        let mut fit = self.probe(s, lo, lo, hi);
        let mut oom: Option<Probe> = None;
        for _ in 0..PREDICTED_PROBES {
            let end = oom.as_ref().map_or(hi, |p| p.index);
            let guess = predictor.last_fit_between(fit.index, end)?;
            // The prediction is the known fit: its neighbour says whether it is the last.
            let i = if guess == fit.index { guess + 1 } else { guess };
            let p = self.probe(s, i, lo, hi);
            predictor.note(i, &p.measurement);
            match p.measurement.outcome {
                Outcome::Fits => fit = p,
                Outcome::Oom => oom = Some(p),
                Outcome::Inconclusive => return None,
            }
            if let Some(o) = oom.as_ref().filter(|o| o.index == fit.index + 1) {
                return Some((fit, o.clone()));
            }
        }
        None
    }

    /// Where the bottom is already known to fit (a capacity search starts at the original), the
    /// first predicted probe depends on nothing but the top running out of memory, which the top
    /// of a capacity axis nearly always does: it starts beside the top instead of after it, its
    /// neighbours as guesses (one trial wasted where the top fits).
    pub(super) fn predict_beside_the_top(
        &self,
        s: &mut Searcher<'_>,
        lo: usize,
        hi: usize,
        o: &AxisOptions,
    ) {
        let at = |j: usize| self.axis.at(self.base, j);
        let Some(bottom) = s.known(&at(lo)).cloned() else {
            // The bottom is measured after the top: it may be asked for.
            s.guess(&[at(lo)]);
            return;
        };
        let mut predictor = Predictor::new(self.axis, o);
        predictor.note(lo, &bottom);
        let first = predictor
            .first_guess(lo, hi)
            .filter(|_| bottom.outcome == Outcome::Fits);
        let mut next = vec![];
        if let Some(i) = first {
            s.expect(&[at(i)]);
            let around = predictor.follow_ups(i).into_iter();
            next.extend(around.filter(|j| *j > lo && *j < hi && *j != i).map(at));
        }
        // Replaces what earlier steps guessed (the fan-out of an original that might have failed).
        s.guess(&next);
    }

    /// Where the top is known to run out of memory and says its need, the line through that need
    /// and the need's floor (what no value of the axis moves) predicts the last fit before the
    /// bottom is measured; where it lies above the bottom it is probed first, and where it runs out
    /// of memory, the next predicted probe below it (at most [`PROBES_FROM_THE_TOP`]). A fit says
    /// every value below fits (memory grows along the axis): the bottom never runs, one trial fewer
    /// on each axis whose prediction holds; the lowest out-of-memory is the new top, and the bottom
    /// is checked as it would have been.
    pub(super) fn down_from_the_top(
        &self,
        s: &mut Searcher<'_>,
        lo: usize,
        hi: usize,
        predictor: &mut Predictor,
    ) -> FromTheTop {
        let Some(mut top) = self.top_with_need(s, lo, hi, predictor) else {
            return FromTheTop::NotTried;
        };
        let mut guess = predictor.last_fit_above(lo, hi);
        for _ in 0..PROBES_FROM_THE_TOP {
            let Some(i) = guess else { break };
            let p = self.probe_predicted(s, i, lo, top.index, predictor);
            match p.measurement.outcome {
                Outcome::Fits => return FromTheTop::Fit(Box::new((p, top))),
                Outcome::Oom => top = p,
                // The search goes on from what it measured; the probe stays unmeasurable.
                Outcome::Inconclusive => break,
            }
            // Drawn again through its need where it said one, else the same line's last fit
            // below it; none leaves the predictor as it was for the search from the bottom.
            guess = predictor.last_fit_above(lo, top.index);
        }
        match top.index < hi {
            true => FromTheTop::Oom(top.index),
            false => FromTheTop::NotTried,
        }
    }

    /// The top, known to run out of memory with the bottom not yet measured, noted in `predictor`
    /// with its need.
    pub(super) fn top_with_need(
        &self,
        s: &Searcher<'_>,
        lo: usize,
        hi: usize,
        predictor: &mut Predictor,
    ) -> Option<Probe> {
        let at = |j: usize| self.axis.at(self.base, j);
        let m = s.known(&at(hi)).filter(|m| m.outcome == Outcome::Oom)?;
        if s.known(&at(lo)).is_some() {
            return None;
        }
        let top = Probe {
            index: hi,
            label: self.axis.values[hi].label.clone(),
            candidate: at(hi),
            measurement: m.clone(),
        };
        predictor.note(hi, &top.measurement);
        self.note_top_need(s, &top, predictor);
        Some(top)
    }

    /// The predicted probe at `i` inside `lo..hi`, its likely successors started ahead, its outcome
    /// noted.
    pub(super) fn probe_predicted(
        &self,
        s: &mut Searcher<'_>,
        i: usize,
        lo: usize,
        hi: usize,
        predictor: &mut Predictor,
    ) -> Probe {
        s.expect(&[self.inside(i, lo, hi, predictor)]);
        let next: Vec<Candidate> = (predictor.follow_ups(i).into_iter())
            .filter(|j| *j > lo && *j < hi && *j != i)
            .map(|j| self.axis.at(self.base, j))
            .collect();
        s.guess(&next);
        let p = self.probe_inside(s, i, lo, hi, predictor);
        predictor.note_predicted(i, &p.measurement);
        predictor.note(i, &p.measurement);
        p
    }
}
