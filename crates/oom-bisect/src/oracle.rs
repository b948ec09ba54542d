//! The search's view of trials: a candidate becomes a config and then a request, the journal answers
//! what it already knows, the runner answers the rest, and every new trial is journaled the moment
//! it ends. Which runner answers is the caller's choice; nothing here spawns.

use crate::journal::Journal;
use crate::settings::DeviceSettings;
use deeplab::Config;
use oom_search::{Candidate, Measurement, Oracle, Outcome};
use oom_trial::{Fault, Request, TrialOutcome, TrialReport, TrialRunner};
use std::collections::HashMap;

/// The request that runs `config` on `device`.
pub fn request(config: &Config, device: &DeviceSettings, fault: Option<Fault>) -> Request {
    Request {
        config: config.to_toml_string(),
        backend: device.backend,
        ceiling: device.ceiling,
        engine: device.engine,
        fault,
    }
}

/// The search's view of a trial report.
pub fn measurement(r: &TrialReport) -> Measurement {
    let outcome = match r.outcome {
        TrialOutcome::Fits => Outcome::Fits,
        TrialOutcome::Oom => Outcome::Oom,
        TrialOutcome::Error | TrialOutcome::Timeout => Outcome::Inconclusive,
    };
    let note = match (&r.oom, &r.error) {
        (Some(o), _) => format!("out of memory {o}"),
        (None, Some(e)) => format!("{}: {e}", r.outcome.name()),
        _ => String::new(),
    };
    Measurement {
        outcome,
        peak_bytes: r.peak_bytes,
        peak_in_use_bytes: r.peak_in_use_bytes,
        base_bytes: r.base_bytes,
        note,
        replayed: false,
    }
}

pub struct TrialOracle<'a, R: TrialRunner> {
    pub base: Config,
    pub device: &'a DeviceSettings,
    pub runner: &'a R,
    pub journal: Journal,
    /// Every report, by candidate and attempt, for the report's details.
    pub reports: HashMap<(Candidate, u32), TrialReport>,
    /// Trials answered from the journal instead of run.
    pub resumed: usize,
}

impl<R: TrialRunner> TrialOracle<'_, R> {
    /// The candidate as a config the model accepts, or why not.
    fn config(&self, candidate: &Candidate) -> Result<Config, String> {
        let config = self
            .base
            .with_overrides(&candidate.to_sets())
            .map_err(|e| e.to_string())?;
        deeplab::Architecture::new(&config).map_err(|e| e.to_string())?;
        Ok(config)
    }
}

impl<R: TrialRunner> Oracle for TrialOracle<'_, R> {
    fn run(&mut self, candidate: &Candidate, attempt: u32) -> Measurement {
        let config = match self.config(candidate) {
            Ok(c) => c,
            Err(e) => {
                let mut m = Measurement::new(Outcome::Inconclusive);
                m.note = format!("not a valid configuration: {e}");
                return m;
            }
        };
        let key = config.canonical_key();
        let (report, replayed) = match self.journal.lookup(&key, attempt) {
            Some(r) => {
                self.resumed += 1;
                (r, true)
            }
            None => {
                let r = self.runner.run(&request(&config, self.device, None));
                self.journal.append(&key, attempt, candidate, &r);
                (r, false)
            }
        };
        let mut m = measurement(&report);
        m.replayed = replayed;
        self.reports.insert((candidate.clone(), attempt), report);
        m
    }
}
