//! The search's side of the oracle: every trial is cached by candidate, an inconclusive trial is
//! retried once, re-runs are numbered, the trial budget is enforced, and every trial is told to the
//! display.

use crate::vocabulary::{Candidate, Event, Measurement, Oracle, Outcome, Purpose};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;

/// Time as the caller measures it: the search never reads the clock itself, so a test can run a
/// time budget without sleeping.
pub trait Clock {
    /// Time since the search began.
    fn elapsed(&self) -> Duration;
}

/// How much the search may spend. Trials already running finish; none starts past the budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Trials run now (answers replayed from a journal do not count).
    pub max_trials: Option<usize>,
    /// No trial starts once the clock reads this much.
    pub max_time: Option<Duration>,
}

/// One trial the search asked for, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    pub candidate: Candidate,
    pub purpose: Purpose,
    pub attempt: u32,
    pub measurement: Measurement,
}

/// What a search run apart measured: its settled results, attempt counters and trials.
type Parts = (
    HashMap<Candidate, Measurement>,
    HashMap<Candidate, u32>,
    Vec<TrialRecord>,
);

/// The clock of a search without a time budget.
struct NoClock;

impl Clock for NoClock {
    fn elapsed(&self) -> Duration {
        Duration::ZERO
    }
}

pub struct Searcher<'a> {
    oracle: &'a mut dyn Oracle,
    events: &'a mut dyn FnMut(&Event),
    /// The settled result of each candidate (after the retry of an inconclusive first run).
    cache: HashMap<Candidate, Measurement>,
    /// The next attempt number of each candidate.
    attempts: HashMap<Candidate, u32>,
    pub trials: Vec<TrialRecord>,
    budget: Budget,
    clock: &'a dyn Clock,
    pub budget_exhausted: bool,
    /// Re-runs are numbered from here up. Steps that may run on threads of their own (the axes)
    /// each get their own range, so that two axes confirming the same candidate (the original)
    /// re-run it apart, whether they run in turn or at once, under the same attempt numbers.
    rerun_floor: u32,
    /// A search run apart beside others ([`Searcher::run_apart`]): the workers are shared with
    /// their searches.
    apart: bool,
}

impl<'a> Searcher<'a> {
    pub fn new(
        oracle: &'a mut dyn Oracle,
        events: &'a mut dyn FnMut(&Event),
        budget: Budget,
        clock: &'a dyn Clock,
    ) -> Self {
        Searcher {
            oracle,
            events,
            cache: HashMap::new(),
            attempts: HashMap::new(),
            trials: Vec::new(),
            budget,
            clock,
            budget_exhausted: false,
            rerun_floor: 0,
            apart: false,
        }
    }

    /// Whether this is the only search asking for trials (not one of several run apart).
    pub fn searching_alone(&self) -> bool {
        !self.apart
    }

    /// Whether a trial or time budget is set (steps then run in order, so that what the budget
    /// cuts does not depend on timing).
    pub fn has_budget(&self) -> bool {
        self.budget.max_trials.is_some() || self.budget.max_time.is_some()
    }

    /// Runs `step` for each item on a thread of its own, each with a fork of the oracle and a
    /// search that starts with what this one knows; their events reach this search's display as
    /// they happen. Their measurements are taken in afterwards in the order of `items`, so the
    /// record does not depend on which thread finished first. `None` (nothing run) when the oracle
    /// cannot fork or a budget is set.
    pub fn run_apart<I: Sync, T: Send>(
        &mut self,
        items: &[I],
        step: &(dyn Fn(&mut Searcher<'_>, &I) -> T + Sync),
    ) -> Option<Vec<T>> {
        if self.has_budget() {
            return None;
        }
        let oracle: &dyn Oracle = &*self.oracle;
        let forks = items
            .iter()
            .map(|_| oracle.fork())
            .collect::<Option<Vec<_>>>()?;
        let (cache, attempts) = (&self.cache, &self.attempts);
        let events = &mut self.events;
        let done: Vec<(T, Parts)> = std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::channel::<Event>();
            let handles: Vec<_> = items
                .iter()
                .zip(forks)
                .map(|(item, mut fork)| {
                    let tx = tx.clone();
                    // The fork moves into its thread and drops when the step ends: the oracle
                    // then knows this searcher asks for nothing more.
                    scope.spawn(move || {
                        let mut send = |e: &Event| drop(tx.send(e.clone()));
                        let mut sub = Searcher {
                            oracle: fork.as_mut(),
                            events: &mut send,
                            cache: cache.clone(),
                            attempts: attempts.clone(),
                            trials: vec![],
                            budget: Budget::default(),
                            clock: &NoClock,
                            budget_exhausted: false,
                            rerun_floor: 0,
                            apart: true,
                        };
                        let out = step(&mut sub, item);
                        (out, (sub.cache, sub.attempts, sub.trials))
                    })
                })
                .collect();
            drop(tx);
            for e in rx {
                events(&e);
            }
            handles
                .into_iter()
                .map(|h| h.join().expect("a search step panicked"))
                .collect()
        });
        let mut out = vec![];
        for (t, (cache, attempts, trials)) in done {
            self.cache.extend(cache);
            for (c, n) in attempts {
                let a = self.attempts.entry(c).or_insert(0);
                *a = (*a).max(n);
            }
            self.trials.extend(trials);
            out.push(t);
        }
        Some(out)
    }

    pub fn event(&mut self, e: Event) {
        (self.events)(&e);
    }

    fn run_once(&mut self, c: &Candidate, purpose: &Purpose) -> Measurement {
        let spent = if self
            .budget
            .max_trials
            .is_some_and(|m| self.trials_run() >= m)
        {
            Some("the trial budget")
        } else if self
            .budget
            .max_time
            .is_some_and(|t| self.clock.elapsed() >= t)
        {
            Some("the time budget")
        } else {
            None
        };
        if let Some(budget) = spent {
            self.budget_exhausted = true;
            let mut m = Measurement::new(Outcome::Inconclusive);
            m.note = format!("not run: {budget} is spent");
            return m;
        }
        let attempt = self.attempts.get(c).copied().unwrap_or(0);
        self.attempts.insert(c.clone(), attempt + 1);
        (self.events)(&Event::TrialStarted {
            candidate: c.clone(),
            purpose: purpose.clone(),
            attempt,
        });
        let m = self.oracle.run(c, attempt);
        (self.events)(&Event::TrialFinished {
            candidate: c.clone(),
            purpose: purpose.clone(),
            attempt,
            measurement: m.clone(),
        });
        self.trials.push(TrialRecord {
            candidate: c.clone(),
            purpose: purpose.clone(),
            attempt,
            measurement: m.clone(),
        });
        m
    }

    /// The settled result of a candidate: cached if known, else run, and run once more if the first
    /// run was inconclusive (then skipped like `git bisect skip` if it stays so).
    pub fn measure(&mut self, c: &Candidate, purpose: Purpose) -> Measurement {
        if let Some(m) = self.known(c) {
            return m.clone();
        }
        let mut m = self.run_once(c, &purpose);
        if m.outcome == Outcome::Inconclusive && !self.budget_exhausted {
            m = self.run_once(c, &purpose);
        }
        if !self.budget_exhausted || m.outcome != Outcome::Inconclusive {
            self.cache.insert(c.clone(), m.clone());
        }
        m
    }

    /// The settled result of a candidate, if it has one; runs nothing. A configuration measured
    /// over every step answers the same one measured plainly (the same verdict, and a need that
    /// is not a lower bound), and a plain run answers one over every step where it stopped after
    /// no fewer steps ([`Candidate::every_step`]).
    pub fn known(&self, c: &Candidate) -> Option<&Measurement> {
        if let Some(m) = self.cache.get(c) {
            return Some(m);
        }
        let twin = Candidate {
            every_step: !c.every_step,
            ..c.clone()
        };
        let m = self.cache.get(&twin)?;
        let whole = twin.every_step || !m.need_at_least;
        (whole && m.outcome != Outcome::Inconclusive).then_some(m)
    }

    /// Every candidate measured so far, with its settled result.
    pub(crate) fn settled(&self) -> impl Iterator<Item = (&Candidate, &Measurement)> {
        self.cache.iter()
    }

    /// Whether measuring `c` will answer without waiting on a trial: known here, or already there
    /// for the oracle (finished ahead, or from an earlier run).
    pub fn ready(&self, c: &Candidate) -> bool {
        self.known(c).is_some() || {
            let attempt = self.attempts.get(c).copied().unwrap_or(0);
            self.oracle.ready(c, attempt)
        }
    }

    /// A deliberate re-run of a candidate (boundary confirmation); does not replace the cached result.
    pub fn rerun(&mut self, c: &Candidate, purpose: Purpose) -> Measurement {
        let next = self.next_rerun(c, 0, 0);
        self.attempts.insert(c.clone(), next);
        self.run_once(c, &purpose)
    }

    /// The attempt number of the `r`-th next re-run of `c` once `ahead` more runs of it have been
    /// made: at least the current re-run floor.
    fn next_rerun(&self, c: &Candidate, ahead: u32, r: u32) -> u32 {
        (self.attempts.get(c).copied().unwrap_or(0) + ahead).max(self.rerun_floor) + r
    }

    /// Re-runs from here on are numbered from `floor` up (see `rerun_floor`).
    pub fn set_rerun_floor(&mut self, floor: u32) {
        self.rerun_floor = floor;
    }

    /// Candidates the search will measure soon: the oracle may start them ahead (see
    /// [`Oracle::prefetch`]). Known results are left out, and so is anything past the trial budget.
    pub fn expect(&mut self, candidates: &[Candidate]) {
        self.hint(candidates, true);
    }

    /// Candidates the search may measure next (the neighbours of a probe whose outcome is not yet
    /// known); they replace the earlier guesses.
    pub fn guess(&mut self, candidates: &[Candidate]) {
        self.hint(candidates, false);
    }

    /// `runs` re-runs of each candidate that [`Searcher::rerun`] will ask for, alternating between
    /// the candidates as a confirmation does. A candidate not measured yet is about to be (its
    /// probe starts beside its re-runs): its re-runs come after that first run.
    pub fn expect_reruns(&mut self, candidates: &[Candidate], runs: u32) {
        let mut asks = vec![];
        for r in 0..runs {
            for c in candidates {
                let first_run_ahead = u32::from(!self.cache.contains_key(c));
                asks.push((c.clone(), self.next_rerun(c, first_run_ahead, r)));
            }
        }
        self.send_hints(asks, true);
    }

    fn hint(&mut self, candidates: &[Candidate], sure: bool) {
        let mut asks: Vec<(Candidate, u32)> = vec![];
        for c in candidates {
            if self.known(c).is_some() || asks.iter().any(|(a, _)| a == c) {
                continue;
            }
            asks.push((c.clone(), self.attempts.get(c).copied().unwrap_or(0)));
        }
        self.send_hints(asks, sure);
    }

    fn send_hints(&mut self, mut asks: Vec<(Candidate, u32)>, sure: bool) {
        if self.budget_exhausted
            || self
                .budget
                .max_time
                .is_some_and(|t| self.clock.elapsed() >= t)
        {
            return;
        }
        if let Some(max) = self.budget.max_trials {
            asks.truncate(max.saturating_sub(self.trials_run()));
        }
        if !asks.is_empty() || !sure {
            self.oracle.prefetch(&asks, sure);
        }
    }

    pub fn trial_count(&self) -> usize {
        self.trials.len()
    }

    /// Trials run now, not replayed from a journal (what the trial budget counts).
    pub fn trials_run(&self) -> usize {
        self.trials
            .iter()
            .filter(|t| !t.measurement.replayed)
            .count()
    }
}
