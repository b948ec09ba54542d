//! `bisect`: the diagnosis. Settings resolved, the journal opened, the pools of workers made (the
//! GPU's, and where the search runs on stream-only trials one of its own), the search run and
//! certified, and what it found handed to the report (`report.rs`).

use super::shared::{runner, say};
use crate::cli::BisectArgs;
use crate::exit_codes::{self as code, user};
use crate::files::check_outputs;
use crate::journal::{Job, Journal};
use crate::oracle::TrialOracle;
use crate::output::{self, progress::Progress};
use crate::settings::BisectSettings;
use crate::space;
use anyhow::Result;
use oom_search::{Candidate, Clock, Diagnosis};
use oom_trial::{BackendKind, Pool, TrialReport};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The wall clock, for the search's time budget.
struct WallClock(Instant);

impl Clock for WallClock {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

pub struct BisectRun {
    pub settings: BisectSettings,
    /// Where the trials ran (`--devices`, `--jobs`, `--launcher`).
    pub dispatch: crate::dispatch::Dispatch,
    pub diagnosis: Diagnosis,
    /// What the GPU certified where the search ran on stream-only trials.
    pub certified: crate::certify::Certified,
    pub reports: HashMap<(Candidate, u32), TrialReport>,
    pub wall_seconds: f64,
    /// The ceiling the trials ran under, where known (see `Context::ceiling`).
    pub ceiling: Option<u64>,
    /// Trials answered from an earlier run's journal.
    pub resumed: usize,
    /// Trials the workers finished, the ones started ahead and never asked for included.
    pub trials_finished: usize,
    /// Rounds of dependent trials and the workers' busy time (for `bench`).
    pub pool: oom_trial::pool::PoolStats,
    /// The rounds by step of the search (for `bench`).
    pub steps: output::bench::Steps,
    /// The kernel cache the trials used (burn's CUDA trials only).
    pub kernel_cache: Option<PathBuf>,
    /// Trial records the journal could not take, and why: an exit code after the report.
    pub unjournaled: Option<(usize, String)>,
}

/// Runs a diagnosis; shared by `bisect` and `bench`.
pub fn run_bisect(args: &BisectArgs) -> Result<BisectRun> {
    let st = BisectSettings::resolve(args)?;
    let dispatch = st.dispatch.clone();
    say(&st.device.notes, st.quiet);
    let w = &st.workload;
    check_bisect_outputs(&st)?;
    let journal = Arc::new(Mutex::new(open_journal(&st)?));
    let space = space::build(&w.config, &st.steps);
    if let (Some(line), false) = (dispatch.describe(), st.quiet) {
        tell!("oom-bisect: {line}");
    }
    let mut progress = progress_for(
        &st,
        &dispatch,
        oom_search::expected_trials(&space, &st.search),
    );
    let journal_seen = Arc::clone(&journal);
    let runner = runner(&st.device);
    progress.watch_compiling(runner.kernel_cache.as_deref());
    let _card_locks = crate::dispatch::CardLocks::of(&dispatch); // dropped after the pool
    let (device_pool, stream_pool) = pools(&st, &dispatch, &runner, &progress, &journal);
    let pool = stream_pool
        .as_ref()
        .or(device_pool.as_ref())
        .expect("a pool for the search");
    let mut oracle = TrialOracle::new(&w.config, &st.device, pool, journal);
    if stream_pool.is_some() {
        oracle.certifier = device_pool.as_ref();
    }
    let journal_ref = Arc::clone(&oracle.journal);
    let starter = crate::certify::Starter::of(&oracle, &journal_ref);
    starter.start(&[Candidate::original()]);
    let clock = WallClock(Instant::now());
    let mut steps = output::bench::Steps::default();
    let (d, certified) = crate::certify::diagnose_certified(
        &mut oracle,
        &mut |e| {
            match e {
                oom_search::Event::Step { name } => steps.mark(name, &pool.stats()),
                oom_search::Event::Settled { candidates } => starter.start(candidates),
                _ => {}
            }
            progress.on(e)
        },
        &clock,
        &space,
        &st.search,
        st.device.ceiling_bytes,
    );
    let learned = std::mem::take(&mut *oom_trial::sync::lock(&oracle.learned));
    let (reports, resumed) = (learned.reports, learned.resumed);
    drop(oracle);
    let trials_finished = pool.finished();
    let pool_stats = pool.stats();
    // Trials started ahead that the search never asked for are killed, not waited for.
    drop(stream_pool);
    drop(device_pool);
    let unjournaled = unjournaled(&journal_seen);
    progress.finish();
    // The ceiling as given, else as the trials report it (a fraction of a device not seen before).
    let ceiling = st
        .device
        .ceiling_bytes
        .or_else(|| reports.values().find_map(|r| r.ceiling_bytes()));
    Ok(BisectRun {
        diagnosis: d,
        certified,
        reports,
        wall_seconds: clock.elapsed().as_secs_f64(),
        ceiling,
        resumed,
        trials_finished,
        pool: pool_stats,
        steps,
        kernel_cache: runner.kernel_cache,
        unjournaled,
        settings: st,
        dispatch,
    })
}

/// The progress display for `about` trials; built-in CPU trials are slow enough to be timed.
/// The pools the trials run in: the GPU's workers (every trial's, or where the search runs on
/// streams the certificates'), and the stream-only trials' (no device memory: one per core beside
/// the GPU's own), each trial journaled as it ends.
fn pools(
    st: &BisectSettings,
    dispatch: &crate::dispatch::Dispatch,
    runner: &oom_trial::ProcessRunner,
    progress: &Progress,
    journal: &Arc<Mutex<Journal>>,
) -> (Option<Pool<Job>>, Option<Pool<Job>>) {
    let w = &st.workload;
    // A served worker with a spare starts its command ahead, for the original's ceiling.
    let serve = (st.device.serve != oom_trial::Serves::No).then(|| {
        (
            crate::oracle::request(&w.config, &st.device, st.device.engine.clone(), None),
            st.device.serve,
        )
    });
    let streams = st.device.streams.as_ref();
    let device_pool = (streams.is_none_or(|s| s.certify)).then(|| {
        let p = Pool::new(
            dispatch.workers(runner, serve.as_ref()),
            progress.workers_view(dispatch),
            crate::journal::journal_on_finish(Arc::clone(journal)),
        );
        match dispatch.guesses {
            true => p,
            false => p.without_guesses(),
        }
    });
    let stream_pool = streams.map(|_| {
        let slots = crate::dispatch::stream_slots();
        let stream_runner = oom_trial::ProcessRunner {
            timeout: st.device.trial_timeout,
            ..oom_trial::ProcessRunner::default()
        };
        Pool::new(
            slots.workers(&stream_runner, None),
            progress.workers_view(&slots),
            crate::journal::journal_on_finish(Arc::clone(journal)),
        )
        .without_guesses()
    });
    (device_pool, stream_pool)
}

fn progress_for(
    st: &BisectSettings,
    dispatch: &crate::dispatch::Dispatch,
    about: usize,
) -> Progress {
    let mut progress = Progress::new(st.quiet, st.search.budget.max_trials, about);
    progress.verbose = st.verbose;
    if st.device.backend == BackendKind::Cpu && st.device.engine == oom_trial::Engine::Train {
        progress.slow_cpu = Some(output::progress::SlowCpu {
            about,
            jobs: dispatch.slots.len(),
        });
    }
    progress
}

/// The records the journal could not take, and the first reason.
fn unjournaled(journal: &Mutex<Journal>) -> Option<(usize, String)> {
    let j = oom_trial::sync::lock(journal);
    j.unwritten_why.clone().map(|why| (j.unwritten, why))
}

/// A journal that stopped taking records is the run's exit code, after the report.
pub(super) fn unjournaled_error(run: &BisectRun) -> Option<anyhow::Error> {
    let (n, why) = run.unjournaled.as_ref()?;
    Some(user(
        code::UNWRITABLE,
        format!(
            "{n} trial records could not be written to the journal {} ({why}): the report above \
             is complete, but a resumed run measures those trials again",
            run.settings.journal.display()
        ),
    ))
}

/// The experiment's journal, locked for this run, saying what it found in it.
fn open_journal(st: &BisectSettings) -> Result<Journal> {
    let journal = Journal::open(&st.journal, &st.experiment, st.fresh)?;
    if journal.skipped > 0 && !st.quiet {
        tell!(
            "oom-bisect: warning: {} lines of {} are not trial records (cut short by a crash?{}) \
             and were skipped",
            journal.skipped,
            st.journal.display(),
            match journal.undecodable {
                0 => String::new(),
                n => format!("; {n} of them not even UTF-8"),
            }
        );
    }
    if journal.loaded() > 0 && !st.quiet {
        tell!(
            "oom-bisect: resuming: {} trials already in {}",
            journal.loaded(),
            st.journal.display()
        );
    }
    Ok(journal)
}

/// Every file a diagnosis writes, checked before its first trial: none is an input or another
/// output, and each can be written.
fn check_bisect_outputs(st: &BisectSettings) -> Result<()> {
    let minimal = minimal_path(&st.journal);
    let mut outputs = vec![
        ("journal", st.journal.as_path()),
        ("minimal failing config", minimal.as_path()),
    ];
    outputs.extend(st.json.as_deref().map(|p| ("--json", p)));
    outputs.extend(st.html.as_deref().map(|p| ("--html", p)));
    check_outputs(&[("config", st.workload.path.as_path())], &outputs)
}

/// Where the minimal failing configuration goes: beside its journal, named after it (a run with
/// another ceiling, backend or command writes its own).
pub(super) fn minimal_path(journal: &std::path::Path) -> PathBuf {
    let stem = journal
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    journal.with_file_name(format!("{stem}-minimal-failing.toml"))
}
