//! The search's side of the oracle: every trial is cached by candidate, an inconclusive trial is
//! retried once, re-runs are numbered, the trial budget is enforced, and every trial is told to the
//! display.

use crate::{Candidate, Event, Measurement, Oracle, Outcome, Purpose};
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

pub struct Session<'a> {
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
}

impl<'a> Session<'a> {
    pub fn new(
        oracle: &'a mut dyn Oracle,
        events: &'a mut dyn FnMut(&Event),
        budget: Budget,
        clock: &'a dyn Clock,
    ) -> Self {
        Session {
            oracle,
            events,
            cache: HashMap::new(),
            attempts: HashMap::new(),
            trials: Vec::new(),
            budget,
            clock,
            budget_exhausted: false,
        }
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
        if let Some(m) = self.cache.get(c) {
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

    /// A deliberate re-run of a candidate (boundary confirmation); does not replace the cached result.
    pub fn rerun(&mut self, c: &Candidate, purpose: Purpose) -> Measurement {
        self.run_once(c, &purpose)
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
