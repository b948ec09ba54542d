//! The subcommands: each resolves its settings, does its one job, and returns the exit code. Text
//! comes from `output`; trials from a runner chosen here.

use crate::cli::{BenchArgs, BisectArgs, FaultArg, InspectArgs, TrialArgs};
use crate::exit_codes::{self as code, user};
use crate::files::{check_outputs, write_file};
use crate::journal::Journal;
use crate::oracle::{request, TrialOracle};
use crate::output::{self, progress::Progress, report};
use crate::settings::{BisectSettings, DeviceSettings, Workload};
use crate::space;
use anyhow::Result;
use deeplab::Architecture;
use oom_search::{Candidate, Clock, Diagnosis, Outcome};
use oom_trial::{
    fmt_bytes, BackendKind, Fault, Pool, ProcessRunner, TrialOutcome, TrialReport, TrialRunner,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The runner every command uses: a child process per trial (training, or the estimate with
/// `--fake-trials`).
fn runner(device: &DeviceSettings) -> ProcessRunner {
    // Only burn's CUDA trials compile kernels: a CPU run or a user's command neither checks nor
    // creates the cache. A user's command keeps its Python bytecode in the cache's folder.
    let burn_cuda =
        device.backend == BackendKind::Cuda && device.engine == oom_trial::Engine::Train;
    let dir = oom_trial::cache::dir().filter(|_| burn_cuda);
    let (kernel_cache, warning) = oom_trial::cache::usable(dir);
    if let Some(w) = warning {
        tell!("oom-bisect: warning: {w}");
    }
    let exec = matches!(device.engine, oom_trial::Engine::Exec { .. });
    ProcessRunner {
        timeout: device.trial_timeout,
        kernel_cache,
        python_bytecode: oom_trial::cache::python_bytecode_dir().filter(|_| exec),
        ceiling_by: device.ceiling_by,
        ..ProcessRunner::default()
    }
}

fn say(notes: &[String], quiet: bool) {
    if !quiet {
        for n in notes {
            tell!("oom-bisect: {n}");
        }
    }
}

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
    // A served worker with a spare starts its command ahead, for the original's ceiling.
    let serve = (st.device.serve != oom_trial::Serves::No).then(|| {
        (
            crate::oracle::request(&w.config, &st.device, st.device.engine.clone(), None),
            st.device.serve,
        )
    });
    progress.watch_compiling(runner.kernel_cache.as_deref());
    let _card_locks = crate::dispatch::CardLocks::of(&dispatch); // dropped after the pool
    let streams = st.device.streams.as_ref();
    // The GPU's workers: every trial's, or where the search runs on streams the certificates'.
    let device_pool = (streams.is_none_or(|s| s.certify)).then(|| {
        Pool::new(
            dispatch.workers(&runner, serve.as_ref()),
            progress.workers_view(&dispatch),
            crate::journal::journal_on_finish(Arc::clone(&journal)),
        )
    });
    let device_pool = device_pool.map(|p| match dispatch.guesses {
        true => p,
        false => p.without_guesses(),
    });
    // Stream-only trials take no device memory: one per core beside the GPU's own.
    let stream_pool = streams.map(|_| {
        let slots = crate::dispatch::stream_slots();
        let stream_runner = oom_trial::ProcessRunner {
            timeout: st.device.trial_timeout,
            ..oom_trial::ProcessRunner::default()
        };
        Pool::new(
            slots.workers(&stream_runner, None),
            progress.workers_view(&slots),
            crate::journal::journal_on_finish(Arc::clone(&journal)),
        )
        .without_guesses()
    });
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
        .or_else(|| reports.values().find_map(|r| r.ceiling_bytes));
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
fn unjournaled_error(run: &BisectRun) -> Option<anyhow::Error> {
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
fn minimal_path(journal: &std::path::Path) -> PathBuf {
    let stem = journal
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    journal.with_file_name(format!("{stem}-minimal-failing.toml"))
}

pub fn bisect(args: &BisectArgs) -> Result<i32> {
    let run = run_bisect(args)?;
    report_run(&run)
}

/// The minimal failing configuration as a file the tool accepts back: its path, its config, its
/// text and the line that reproduces it. Written after the report is printed.
struct MinimalFile {
    path: PathBuf,
    config: toml::Table,
    text: String,
    reproduce: String,
}

fn minimal_file(run: &BisectRun) -> Option<MinimalFile> {
    let (st, d) = (&run.settings, &run.diagnosis);
    let m = d.minimal_failing.as_ref()?;
    let w = &st.workload;
    let (mut c, _) = crate::candidate::resolve(&w.config, &m.candidate).ok()?;
    // The file reproduces on its own: the backend and the ceiling in force are written in.
    c.device = deeplab::DeviceConfig {
        backend: Some(st.device.backend.name().to_string()),
        memory_limit: run.ceiling.map(|c| format!("{c}B")),
        memory_fraction: None,
        gpu: None,
        memory_model: Some(w.config.device.memory_model()),
        fusion: w.config.device.fusion,
        convolution: w.config.device.convolution,
    };
    let path = minimal_path(&st.journal);
    let text = format!(
        "# The smallest configuration that still runs out of memory under {} on {},\n\
         # found by `oom-bisect bisect --config {}`. Overrides of the original: {}\n{}",
        run.ceiling
            .map(fmt_bytes)
            .unwrap_or_else(|| "an unknown ceiling".into()),
        st.device.label(),
        // A file name may hold a newline: it must not start a line of the config.
        output::one_line(&w.path.display().to_string(), 400),
        m.candidate,
        c.to_full_toml_string()
    );
    let reproduce = format!(
        "{} trial --config {} {}",
        output::program(),
        output::shell_word(&path.display().to_string()),
        st.device.reproduce_flags()
    );
    Some(MinimalFile {
        path,
        config: c.to_table(),
        text,
        reproduce,
    })
}

/// Prints the report of a finished diagnosis, then writes its JSON and the minimal failing config
/// (a file that cannot be written never costs the report), and gives the exit code; shared by
/// `bisect` and `bench`.
/// Under `--estimate`, the command that measures the same diagnosis on a GPU.
fn confirm(st: &BisectSettings, sets: &str) -> String {
    let ceiling = st.device.ceiling_arg.as_ref();
    format!(
        "{} bisect --config {}{sets} --backend cuda{}",
        output::program(),
        output::shell_word(&st.workload.path.display().to_string()),
        ceiling.map(|c| format!(" {c}")).unwrap_or_default()
    )
}

fn report_run(run: &BisectRun) -> Result<i32> {
    let (st, d) = (&run.settings, &run.diagnosis);
    let w = &st.workload;
    let minimal = minimal_file(run);
    let sets: String = st
        .sets
        .iter()
        .map(|s| format!(" --set {}", output::shell_word(s)))
        .collect();
    let reproduce = minimal
        .as_ref()
        .map(|m| m.reproduce.clone())
        .unwrap_or_else(|| {
            let flags = st.device.reproduce_flags();
            format!(
                "{} trial --config {}{sets} {flags}",
                output::program(),
                output::shell_word(&w.path.display().to_string())
            )
        });
    let cx = output::context::Context {
        title: output::title(&w.config),
        backend: st.device.label(),
        memory_model: w.config.device.memory_model(),
        steps: w.config.steps(),
        reports: &run.reports,
        config: &w.config,
        minimal_path: minimal.as_ref().map(|m| m.path.display().to_string()),
        minimal_config: minimal.as_ref().map(|m| m.config.clone()),
        reproduce: Some(reproduce),
        journal: Some(st.journal.display().to_string()),
        resumed: run.resumed,
        wall_seconds: run.wall_seconds,
        estimate: st.device.engine == oom_trial::Engine::Estimate,
        confirm: (st.device.engine == oom_trial::Engine::Estimate).then(|| confirm(st, &sets)),
        exec: st.device.exec_command(),
        served: run.reports.values().any(|r| r.served),
        verbose: st.verbose,
        ceiling: run.ceiling,
        notes: notes(st, d),
        streams: st.device.streams.as_ref().map(|s| s.card.label()),
        certify: st.device.streams.as_ref().is_some_and(|s| s.certify),
        certified: &run.certified,
    };
    let text = report::text(d, &cx);
    show!("{text}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // Each file is written whatever became of the others; the first failure is the exit code.
    let mut written = vec![];
    if let Some(m) = &minimal {
        written.push(write_file(&m.path, &m.text));
    }
    if let Some(j) = &st.json {
        let v = output::stamped(
            output::report_json::json(d, &cx),
            w.config.device.memory_model(),
        );
        written.push(write_file(
            j,
            &serde_json::to_string_pretty(&v).expect("json"),
        ));
    }
    if let Some(h) = &st.html {
        written.push(write_file(h, &output::html::page(d, &cx, &text)));
    }
    written.extend(unjournaled_error(run).map(Err));
    let mut failures = written.into_iter().filter_map(Result::err);
    if let Some(first) = failures.next() {
        failures.for_each(|e| tell!("error: {e}"));
        return Err(first);
    }
    Ok(match d.original.outcome {
        Outcome::Inconclusive => code::INCONCLUSIVE_ORIGINAL,
        _ => code::SUCCESS,
    })
}

/// Configurations that fit here but that PyTorch refuses to train (see
/// [`Architecture::pytorch_refusal`]), once per reason, naming the first such candidate.
fn refusals(base: &deeplab::Config, d: &oom_search::Diagnosis) -> Vec<String> {
    let mut notes: Vec<String> = vec![];
    for c in answers(d) {
        let arch = crate::candidate::resolve(base, c).ok();
        if let Some(why) = arch.and_then(|(_, a)| a.pytorch_refusal()) {
            if !notes.iter().any(|n| n.contains(&why)) {
                notes.push(format!("{c} fits here, but {why}"));
            }
        }
    }
    notes
}

/// What the report notes under its header: configurations it offers that PyTorch refuses (not
/// under --exec, whose trials are PyTorch's own: what fits there, PyTorch trained), and bf16 fixes
/// on a card without bf16.
fn notes(st: &BisectSettings, d: &oom_search::Diagnosis) -> Vec<String> {
    let mut notes = match st.device.engine {
        oom_trial::Engine::Exec { .. } => vec![],
        _ => refusals(&st.workload.config, d),
    };
    notes.extend(without_bf16(st.device.card, &d.fixes));
    notes
}

/// The bf16 fixes that fit, where the ceiling is a card without bf16 arithmetic: they hold what
/// they measured, but the card computes bf16 slowly, if at all.
fn without_bf16(card: Option<&str>, fixes: &[oom_search::FixResult]) -> Option<String> {
    let card = crate::gpus::by_name(card?).filter(|c| !c.has_bf16())?;
    let bf16 = |f: &&oom_search::FixResult| {
        f.measurement.outcome == Outcome::Fits
            && crate::kinds::FixKind::of(f.tag).is_some_and(crate::kinds::FixKind::is_bf16)
    };
    let changes: Vec<&str> = fixes
        .iter()
        .filter(bf16)
        .map(|f| f.change.as_str())
        .collect();
    (!changes.is_empty()).then(|| {
        format!(
            "{} fit{} the memory, but the {} has no bf16 arithmetic (it came with Ampere): it \
             runs bf16 slowly, if at all; f16 holds as little",
            changes.join(" and "),
            if changes.len() == 1 { "s" } else { "" },
            card.desc
        )
    })
}

/// The fitting configurations the report offers as answers: each axis's last fit, the fixes that
/// fit, the minimal configuration's neighbours that fit. A refusal matters only there.
fn answers(d: &oom_search::Diagnosis) -> Vec<&oom_search::Candidate> {
    use oom_search::AxisVerdict;
    let fits = |m: &oom_search::Measurement| m.outcome == Outcome::Fits;
    let axes = d
        .axes
        .iter()
        .chain(&d.capacity)
        .filter_map(|a| match &a.verdict {
            AxisVerdict::Boundary { last_fit, .. } => Some(&last_fit.candidate),
            AxisVerdict::AllFit { highest, .. } => Some(&highest.candidate),
            _ => None,
        });
    let fixes = d.fixes.iter().filter(|f| fits(&f.measurement));
    let neighbours = d.minimal_failing.iter().flat_map(|m| &m.neighbours);
    axes.chain(fixes.map(|f| &f.candidate))
        .chain(
            neighbours
                .filter(|n| fits(&n.measurement))
                .map(|n| &n.candidate),
        )
        .collect()
}

pub fn trial(args: &TrialArgs) -> Result<i32> {
    let w = Workload::load(&args.config)?;
    let device = DeviceSettings::resolve(&args.device, &w.config)?;
    say(&device.notes, false);
    if let Some(j) = &args.json {
        check_outputs(
            &[("config", args.config.config.as_path())],
            &[("--json", j)],
        )?;
    }
    let fault = args.fault.map(|f| match f {
        FaultArg::Sleep => Fault::Sleep,
        FaultArg::BrokenModule => Fault::BrokenModule,
        FaultArg::DeviceThreadOom => Fault::DeviceThreadOom,
    });
    let answered_by = match device.exec_command() {
        Some(command) => format!("your command: {}", output::one_line(&command, 400)),
        None => format!("memory model {}", w.config.device.memory_model().name()),
    };
    tell!(
        "oom-bisect: {} on {}, {answered_by}",
        output::title(&w.config),
        device.label(),
    );
    if let Some(why) = Architecture::new(&w.config)
        .ok()
        .and_then(|a| a.pytorch_refusal())
    {
        tell!("oom-bisect: note: {why}");
    }
    // One trial is read for its need, which a run stopped after one step would understate:
    // every step runs, unless the config says otherwise.
    let config = match w.config.train.one_step_below {
        Some(_) => w.config.clone(),
        None => w.config.measuring_need(),
    };
    let req = request(&config, &device, device.trial_engine(), fault);
    // Served, the command gets its trial as a served one: a check of its side of the protocol.
    // One trial gains nothing from a command that serves: served only where asked for, as a
    // check of the command's side; otherwise in a process of its own, whose peak is its largest
    // resident set rather than a sampled one.
    let r = match device.serve {
        oom_trial::Serves::Yes => {
            oom_trial::ServedRunner::new(runner(&device), None, device.serve).run(&req)
        }
        _ => runner(&device).run(&req),
    };
    let estimate = device.engine == oom_trial::Engine::Estimate;
    show!("{}", output::trial_table::trial_table(&r, estimate));
    if let Some(j) = &args.json {
        let v = serde_json::to_value(&r).expect("a trial report serialises");
        let v = output::stamped(v, w.config.device.memory_model());
        write_file(j, &serde_json::to_string_pretty(&v).expect("json"))?;
    }
    Ok(match r.outcome {
        TrialOutcome::Fits => code::SUCCESS,
        TrialOutcome::Oom => code::OOM,
        TrialOutcome::Error | TrialOutcome::Timeout => code::INCONCLUSIVE,
    })
}

pub fn inspect(args: &InspectArgs) -> Result<i32> {
    let w = Workload::load(&args.config)?;
    if let Some(j) = &args.json {
        check_outputs(&[("config", w.path.as_path())], &[("--json", j.as_path())])?;
    }
    let (ceiling, notes) = crate::settings::check_device_section(&w.config, &args.ceiling)?;
    let arch =
        Architecture::new(&w.config).map_err(|e| user(code::CONFIG_INVALID, e.to_string()))?;
    for n in notes {
        tell!("oom-bisect: note: {n}");
    }
    show!("{}", output::inspect::inspect(&w.config, &arch, ceiling));
    if let Some(j) = &args.json {
        let v = output::inspect::json(&w.config, &arch, ceiling);
        let v = output::stamped(v, w.config.device.memory_model());
        write_file(j, &serde_json::to_string_pretty(&v).expect("json"))?;
    }
    Ok(code::SUCCESS)
}

/// `bench`: one diagnosis (its full report first), then where its time went.
pub fn bench(args: &BenchArgs) -> Result<i32> {
    let run = run_bisect(&args.bisect)?;
    let code = report_run(&run)?;
    let st = &run.settings;
    showln!(
        "\nbench: {} on {}",
        output::title(&st.workload.config),
        st.device.label()
    );
    show!(
        "{}",
        output::bench::bench(
            &run.diagnosis,
            &run.reports,
            run.wall_seconds,
            run.resumed,
            run.kernel_cache.as_deref(),
            matches!(st.device.engine, oom_trial::Engine::Exec { .. })
        )
    );
    let slots: Vec<&str> = run
        .dispatch
        .slots
        .iter()
        .map(|s| s.label.as_str())
        .collect();
    let used = run.diagnosis.trials.len() - run.resumed;
    let walls: Vec<f64> = run.reports.values().map(|r| r.wall_seconds).collect();
    let mean_trial = output::bench::mean(&walls);
    show!(
        "{}",
        output::bench::slots(&slots, &run.pool, (run.trials_finished, used), mean_trial)
    );
    show!("{}", run.steps.line(&run.pool));
    Ok(code)
}

#[cfg(test)]
mod tests {
    use crate::kinds::FixKind;
    use oom_search::{FixResult, Measurement, Outcome};

    fn fix(kind: FixKind, outcome: Outcome) -> FixResult {
        FixResult {
            change: kind.label().into(),
            tag: kind.tag(),
            candidate: oom_search::Candidate::original(),
            measurement: Measurement::new(outcome),
            implied_by: None,
            not_run: None,
        }
    }

    /// On a T4 the bf16 fixes that fit are said to fit the memory only; on a 3090, or a ceiling
    /// that is no card, nothing is said.
    #[test]
    fn a_bf16_fix_on_a_card_without_bf16_says_so() {
        let fixes = [
            fix(FixKind::MixedBf16, Outcome::Fits),
            fix(FixKind::PureBf16, Outcome::Oom),
            fix(FixKind::MixedF16, Outcome::Fits),
        ];
        let note = super::without_bf16(Some("t4"), &fixes).unwrap();
        assert!(
            note.starts_with("mixed precision bf16 fits the memory, but the NVIDIA T4 16 GB has"),
            "{note}"
        );
        assert!(!note.contains("pure bf16"), "{note}");
        assert_eq!(super::without_bf16(Some("rtx3090"), &fixes), None);
        assert_eq!(super::without_bf16(None, &fixes), None);
    }
}
