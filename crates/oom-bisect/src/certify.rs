//! Certificates. Where the search runs on stream-only trials (`--evidence certified`), every probe
//! is the training issued for a virtual copy of this host's card, its stream replayed through
//! PyTorch's allocator; the GPU then runs, under the real ceiling, the verdicts the report rests on
//! (`oom_search::to_certify`). A certificate that disagrees with its stream is reported, and the
//! search runs again with the device's verdict in its place, until the device agrees with every
//! verdict it was asked to certify (or a few rounds have passed).

use crate::journal::Job;
use crate::oracle::{request, TrialOracle};
use oom_search::{
    Candidate, Clock, Diagnosis, Event, Measurement, Outcome, SearchOptions, Space, ToCertify,
};
use oom_trial::{Request, TrialOutcome, TrialReport};

/// The share of the ceiling within which an answer's need is certified though the report does not
/// rest on it: a stream's need and the device's agreed to the byte wherever both were measured
/// (docs/fidelity.md), so this only covers what the comparison did not.
pub const NEAR: f64 = 0.02;

/// Rounds of search and certification at most: each round's disagreements move a verdict, and a
/// third round that still disagrees is reported as it stands.
const ROUNDS: usize = 3;

/// A verdict run again on the GPU under the ceiling.
#[derive(Debug, Clone)]
pub struct Certificate {
    pub what: String,
    pub candidate: Candidate,
    /// What the stream said.
    pub stream: Measurement,
    /// What the device measured.
    pub device: TrialReport,
}

impl Certificate {
    /// The device's verdict, where it reached one.
    pub fn device_outcome(&self) -> Option<Outcome> {
        match self.device.outcome() {
            TrialOutcome::Fits => Some(Outcome::Fits),
            TrialOutcome::Oom => Some(Outcome::Oom),
            TrialOutcome::Error | TrialOutcome::Timeout => None,
        }
    }

    /// Whether the device reached the stream's verdict (`None`: it reached none).
    pub fn agrees(&self) -> Option<bool> {
        self.device_outcome().map(|o| o == self.stream.outcome)
    }
}

/// What the GPU certified, over every round.
#[derive(Debug, Clone, Default)]
pub struct Certified {
    pub certificates: Vec<Certificate>,
    /// Searches run: one, plus one for each round whose certificates disagreed.
    pub rounds: usize,
    /// What the last search's report rests on that no certificate covers: the rounds ran out
    /// while the GPU still moved verdicts, and the last search's own verdicts were not run again.
    pub uncertified: Vec<String>,
}

impl Certified {
    /// The certificate of `candidate` (under the ceiling), if one ran.
    pub fn of(&self, candidate: &Candidate) -> Option<&Certificate> {
        let under = Candidate {
            unbounded: false,
            ..candidate.clone()
        };
        self.certificates
            .iter()
            .rev()
            .find(|c| c.candidate == under)
    }
}

/// What starts certificates on the GPU's workers while the search still runs (it holds the
/// oracle): the original's at the start, which on a cold cache compiles the kernels of every
/// certificate of its precision while the streams run; each axis's sides as the axis settles.
#[derive(Clone, Copy)]
pub struct Starter<'a> {
    base: &'a deeplab::Config,
    device: &'a crate::settings::DeviceSettings,
    pool: Option<&'a oom_trial::Pool<Job>>,
    journal: &'a std::sync::Mutex<crate::journal::Journal>,
}

impl<'a> Starter<'a> {
    pub fn of(
        oracle: &TrialOracle<'a>,
        journal: &'a std::sync::Mutex<crate::journal::Journal>,
    ) -> Self {
        Starter {
            base: oracle.base,
            device: oracle.device,
            pool: oracle.certifier,
            journal,
        }
    }

    /// The device's trial of `candidate` under the ceiling, as a certificate: filed in the journal
    /// apart from its stream.
    fn certificate(&self, candidate: &Candidate) -> Result<(Job, Request), String> {
        let (mut config, _) =
            crate::candidate::resolve(self.base, candidate).map_err(|e| e.to_string())?;
        if candidate.every_step || *candidate == Candidate::original() {
            config = config.measuring_need();
        }
        let engine = match &self.device.streams {
            Some(s) => s.certifier.clone(),
            None => self.device.engine.clone(),
        };
        let mut req = request(&config, self.device, engine, None);
        req.fresh = true;
        let key = config.canonical_key() + " certified on the device";
        let job = Job {
            candidate: Candidate {
                unbounded: false,
                ..candidate.clone()
            },
            attempt: 0,
            key,
        };
        Ok((job, req))
    }

    /// Starts the certificates of `candidates` (those no earlier run certified) on the GPU's free
    /// workers.
    pub fn start(&self, candidates: &[Candidate]) {
        let Some(pool) = self.pool else { return };
        let journal = oom_trial::sync::lock(self.journal);
        let jobs = candidates
            .iter()
            .filter_map(|c| self.certificate(c).ok())
            .filter(|(job, _)| journal.lookup(&job.key, 0).is_none())
            .collect();
        drop(journal);
        pool.prefetch(jobs, true);
    }
}

impl TrialOracle<'_> {
    /// Runs the certificates of `list` on the GPU (all started at once), each answered from the
    /// journal where an earlier run certified it.
    fn certify(&self, list: Vec<ToCertify>) -> Vec<Certificate> {
        let Some(pool) = self.certifier else {
            return vec![];
        };
        let starter = Starter::of(self, &self.journal);
        starter.start(&list.iter().map(|c| c.candidate.clone()).collect::<Vec<_>>());
        list.into_iter()
            .filter_map(|c| {
                let (job, req) = starter.certificate(&c.candidate).ok()?;
                let earlier = oom_trial::sync::lock(&self.journal).lookup(&job.key, 0);
                let device = earlier.unwrap_or_else(|| pool.get(&job, &req).report);
                Some(Certificate {
                    what: c.what,
                    candidate: c.candidate,
                    stream: c.stream,
                    device,
                })
            })
            .collect()
    }
}

/// The diagnosis on stream-only trials, certified on the GPU: search, certify what the report
/// rests on, and where the device disagrees search again with its verdicts. Events of a search run
/// again are told only for trials it had not asked for before.
pub fn diagnose_certified(
    oracle: &mut TrialOracle<'_>,
    events: &mut dyn FnMut(&Event),
    clock: &dyn Clock,
    space: &Space,
    opts: &SearchOptions,
    ceiling: Option<u64>,
) -> (Diagnosis, Certified) {
    let mut certified = Certified::default();
    let mut d = oom_search::diagnose(oracle, events, clock, space, opts);
    certified.rounds = 1;
    let Some(ceiling) = ceiling.filter(|_| oracle.certifier.is_some()) else {
        return (d, certified);
    };
    for _ in 0..ROUNDS {
        let new: Vec<ToCertify> = oom_search::to_certify(&d, ceiling, NEAR)
            .into_iter()
            .filter(|c| certified.of(&c.candidate).is_none())
            .collect();
        let round = oracle.certify(new);
        let moved: Vec<(Candidate, TrialReport)> = round
            .iter()
            .filter(|c| c.agrees() == Some(false))
            .map(|c| (c.candidate.clone(), c.device.clone()))
            .collect();
        certified.certificates.extend(round);
        if moved.is_empty() {
            break;
        }
        oom_trial::sync::lock(&oracle.learned)
            .overrides
            .extend(moved);
        let mut new_only = |e: &Event| match e {
            Event::TrialFinished { measurement, .. } if measurement.replayed => {}
            e => events(e),
        };
        d = oom_search::diagnose(oracle, &mut new_only, clock, space, opts);
        certified.rounds += 1;
    }
    certified.uncertified = oom_search::to_certify(&d, ceiling, NEAR)
        .into_iter()
        .filter(|c| certified.of(&c.candidate).is_none())
        .map(|c| c.what)
        .collect();
    (d, certified)
}
