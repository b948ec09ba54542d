//! The search's view of trials: a candidate becomes a config and then a request, the journal answers
//! what it already knows, the pool of workers answers the rest (starting what the search says it
//! will need ahead, on idle workers), and every new trial is journaled the moment it ends. Which
//! workers answer is the caller's choice; nothing here spawns.

use crate::journal::{Job, Journal};
use crate::settings::DeviceSettings;
use deeplab::Config;
use oom_search::{Candidate, Measurement, Oracle, Outcome};
use oom_trial::sync::lock;
use oom_trial::{Fault, Pool, Request, TrialOutcome, TrialReport};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The request that runs `config` on `device` with `engine`.
pub fn request(
    config: &Config,
    device: &DeviceSettings,
    engine: oom_trial::Engine,
    fault: Option<Fault>,
) -> Request {
    Request {
        config: config.to_full_toml_string(),
        backend: device.backend,
        ceiling: device.ceiling,
        engine,
        fault,
        timeout_seconds: None,
        switches: device.switches.clone(),
        // The runner sets it: it is how the worker holds the ceiling, not what is measured.
        ceiling_by: Default::default(),
        serve: false,
        probe: false,
        fresh: false,
        ahead: false,
    }
}

/// How a fit whose numbers diverged begins its note (see [`TrialReport::diverged`]).
const DIVERGED: &str = "the loss diverged";

/// The search's view of a trial report.
pub fn measurement(r: &TrialReport) -> Measurement {
    let outcome = match r.outcome() {
        TrialOutcome::Fits => Outcome::Fits,
        TrialOutcome::Oom => Outcome::Oom,
        TrialOutcome::Error | TrialOutcome::Timeout => Outcome::Inconclusive,
    };
    let note = match (&r.oom(), &r.error(), &r.diverged()) {
        (Some(o), _, _) => format!("out of memory {o}"),
        (None, Some(e), _) => format!("{}: {e}", r.outcome().name()),
        (None, None, Some(d)) => format!("{DIVERGED}: {d}"),
        _ => String::new(),
    };
    Measurement {
        outcome,
        peak_bytes: r.memory.peak_bytes,
        failed_at_bytes: r.failed_at(),
        peak_in_use_bytes: r.memory.peak_in_use_bytes,
        base_bytes: r.memory.base_bytes,
        need_bytes: r.need_bytes(),
        // Set by the oracle, which knows the steps the trial's config runs.
        need_at_least: false,
        need_floor_bytes: r.need_floor_bytes(),
        replay_disagrees: r.replay_disagrees(),
        note,
        diverged: r.diverged().map(str::to_string),
        replayed: false,
    }
}

/// What every handle on the trials (the oracle and its forks) adds to.
#[derive(Default)]
pub struct Learned {
    /// Every report, by candidate and attempt, for the report's details.
    pub reports: HashMap<(Candidate, u32), TrialReport>,
    /// Trials answered from the journal instead of run.
    pub resumed: usize,
    /// Verdicts the device certified against their streams' (see [`TrialOracle::certifier`]): the
    /// search takes the device's.
    pub overrides: HashMap<Candidate, TrialReport>,
}

pub struct TrialOracle<'a> {
    pub base: &'a Config,
    pub device: &'a DeviceSettings,
    pub pool: &'a Pool<Job>,
    pub journal: Arc<Mutex<Journal>>,
    pub learned: Arc<Mutex<Learned>>,
    /// Where the search runs on stream-only trials and the GPU certifies: the GPU's workers.
    pub certifier: Option<&'a Pool<Job>>,
    /// A fork: it tells the pool when it stops asking.
    forked: bool,
}

impl<'a> TrialOracle<'a> {
    pub fn new(
        base: &'a Config,
        device: &'a DeviceSettings,
        pool: &'a Pool<Job>,
        journal: Arc<Mutex<Journal>>,
    ) -> Self {
        TrialOracle {
            base,
            device,
            pool,
            journal,
            learned: Arc::default(),
            certifier: None,
            forked: false,
        }
    }
}

impl Drop for TrialOracle<'_> {
    fn drop(&mut self) {
        if self.forked {
            self.pool.join_searcher();
        }
    }
}

/// Where a candidate's result comes from.
enum Answer {
    /// This run's own trial, asked again (a search run again after a certificate disagreed).
    Known(Box<TrialReport>),
    /// An earlier run's journal.
    Earlier(Box<TrialReport>),
    /// A trial, run now (or already started ahead).
    Run(Job, Box<Request>),
}

impl TrialOracle<'_> {
    /// Where the result of `candidate`'s `attempt` comes from, or why it is not a valid
    /// configuration.
    fn answer(&self, candidate: &Candidate, attempt: u32) -> Result<Answer, String> {
        if let Some(r) = self.learned().reports.get(&(candidate.clone(), attempt)) {
            return Ok(Answer::Known(Box::new(r.clone())));
        }
        let (mut config, _) =
            crate::candidate::resolve(self.base, candidate).map_err(|e| e.to_string())?;
        let streams = self.device.streams.is_some();
        if candidate.unbounded
            || candidate.every_step
            || *candidate == Candidate::original()
            || streams
        {
            // Run for its need (the original's is the report's headline, a fix's names the cards
            // it fits on), which one step would understate. A stream-only trial always is: its
            // steps cost the host a fraction of a second each.
            config = config.measuring_need();
        }
        let mut key = config.canonical_key();
        let mut req = request(&config, self.device, self.device.search_engine(), None);
        // A re-run (a confirmation, a retry after an error) runs in a fresh process, never in a
        // served command that has run other trials.
        req.fresh = attempt > 0;
        if candidate.unbounded {
            // Filed apart from the same config under the ceiling, which it must not answer.
            key += " without the ceiling";
            req.ceiling = self.device.unbounded_ceiling();
        }
        if let Some(r) = lock(&self.journal).lookup(&key, attempt) {
            return Ok(Answer::Earlier(Box::new(r)));
        }
        let job = Job {
            candidate: candidate.clone(),
            attempt,
            key,
        };
        Ok(Answer::Run(job, Box::new(req)))
    }

    /// Whether `r`'s trial fitted after fewer steps than its config runs (a step far below its
    /// ceiling, `train.one_step_below`): its need is a lower bound. A command that reports no
    /// steps says nothing either way.
    fn stopped_early(&self, candidate: &Candidate, r: &TrialReport) -> bool {
        let Ok((config, _)) = crate::candidate::resolve(self.base, candidate) else {
            return false;
        };
        r.outcome() == TrialOutcome::Fits
            && !r.memory.steps.is_empty()
            && r.memory.steps.len() < config.steps()
    }

    fn learned(&self) -> MutexGuard<'_, Learned> {
        lock(&self.learned)
    }
}

impl Oracle for TrialOracle<'_> {
    fn run(&mut self, candidate: &Candidate, attempt: u32) -> Measurement {
        let (report, replayed) = match self.answer(candidate, attempt) {
            Err(e) => {
                let mut m = Measurement::new(Outcome::Inconclusive);
                m.note = format!("not a valid configuration: {e}");
                return m;
            }
            Ok(Answer::Known(r)) => (*r, true),
            Ok(Answer::Earlier(r)) => {
                self.learned().resumed += 1;
                (*r, true)
            }
            Ok(Answer::Run(job, req)) => (self.pool.get(&job, &req).report, false),
        };
        if let Some(device) = self.learned().overrides.get(candidate) {
            // The device certified otherwise: its verdict is the search's.
            let mut m = measurement(device);
            m.replayed = true;
            return m;
        }
        let mut m = measurement(&report);
        m.replayed = replayed;
        m.need_at_least = self.stopped_early(candidate, &report);
        self.learned()
            .reports
            .insert((candidate.clone(), attempt), report);
        m
    }

    /// With one worker nothing is started ahead, so the hints are not even turned into requests.
    fn prefetch(&mut self, asks: &[(Candidate, u32)], sure: bool) {
        if self.pool.workers() < 2 {
            return;
        }
        let jobs = asks
            .iter()
            .filter_map(|(c, a)| match self.answer(c, *a) {
                Ok(Answer::Run(job, req)) => Some((job, *req)),
                _ => None,
            })
            .collect();
        self.pool.prefetch(jobs, sure);
    }

    fn ready(&self, candidate: &Candidate, attempt: u32) -> bool {
        match self.answer(candidate, attempt) {
            Ok(Answer::Run(job, _)) => self.pool.is_done(&job),
            // Known, from the journal, or not a configuration at all: answered without a trial.
            Ok(Answer::Known(_) | Answer::Earlier(_)) | Err(_) => true,
        }
    }

    /// Forks only where trials can run at once: with one worker, a fork would only add threads.
    fn fork(&self) -> Option<Box<dyn Oracle + Send + '_>> {
        if self.pool.workers() < 2 {
            return None;
        }
        self.pool.fork_searcher();
        Some(Box::new(TrialOracle {
            base: self.base,
            device: self.device,
            pool: self.pool,
            journal: Arc::clone(&self.journal),
            learned: Arc::clone(&self.learned),
            certifier: self.certifier,
            forked: true,
        }))
    }
}
