//! The subcommands: each resolves its settings, does its one job, and returns the exit code.

use crate::cli::{BisectArgs, InspectArgs, TrialArgs};
use crate::exit_codes::{self as code, user};
use crate::journal::Journal;
use crate::progress::Progress;
use crate::runner::{backend_label, run_trial, TrialOracle};
use crate::settings::{check_writable, DeviceSettings, Workload};
use crate::{estimate, report, space};
use anyhow::Result;
use deeplab::{Architecture, Config};
use oom_search::{diagnose, Candidate, Diagnosis, Outcome, SearchOptions};
use oom_trial::{fmt_bytes, Fault, TrialOutcome};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn title(c: &Config) -> String {
    let m = &c.model;
    let mut extras = vec![];
    if m.separable {
        extras.push("separable".to_string());
    }
    if m.attention_heads > 0 {
        extras.push(format!("attention ×{}", m.attention_heads));
    }
    if m.aux_head {
        extras.push("aux head".into());
    }
    if !m.identity.is_empty() {
        extras.push(format!("identity {:?}", m.identity));
    }
    if let Some(t) = &m.truncate_after {
        extras.push(format!("truncated after {t}"));
    }
    format!(
        "DeepLabV3+ {} OS{}, batch {}, {}×{}, {} classes, {}, {:?}{}{}",
        m.backbone.name(),
        m.output_stride,
        c.data.batch,
        c.data.size[0],
        c.data.size[1],
        m.classes,
        c.train.precision.name(),
        c.train.optimizer,
        if c.train.checkpointing {
            ", checkpointing"
        } else {
            ""
        },
        if extras.is_empty() {
            String::new()
        } else {
            format!(", {}", extras.join(", "))
        }
    )
    .replace("Sgd", "SGD")
    .replace("Adamw", "AdamW")
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    crate::settings::create_parent(path)?;
    std::fs::write(path, text).map_err(|e| {
        user(
            code::UNWRITABLE,
            format!("cannot write {}: {e}", path.display()),
        )
    })
}

/// The journal file of one experiment: the workload, backend and ceiling.
fn experiment_id(w: &Workload, d: &DeviceSettings) -> String {
    let mut c = w.config.clone();
    c.device = Default::default();
    format!(
        "{}|{}|{:?}|{}",
        c.canonical_key(),
        d.backend.name(),
        d.ceiling,
        if d.fake { "fake" } else { "real" }
    )
}

fn short_hash(s: &str) -> String {
    // FNV-1a: stable across runs and platforms (std's hasher is not).
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{:08x}", h as u32)
}

pub struct BisectRun {
    pub diagnosis: Diagnosis,
    pub reports: HashMap<(Candidate, u32), oom_trial::TrialReport>,
    pub wall_seconds: f64,
    pub journal: PathBuf,
    /// Trials answered from an earlier run's journal.
    pub resumed: usize,
}

/// Runs a diagnosis; shared by `bisect` and `bench`.
pub fn run_bisect(args: &BisectArgs) -> Result<(Workload, DeviceSettings, BisectRun)> {
    let w = Workload::load(&args.config)?;
    let device = DeviceSettings::resolve(&args.device, &w.config, args.quiet)?;
    if let Some(j) = &args.json {
        check_writable(j)?;
    }
    let exp = experiment_id(&w, &device);
    let journal_path = args
        .journal
        .join(format!("{}-{}.jsonl", w.stem(), short_hash(&exp)));
    let journal = Journal::open(&journal_path, &exp, args.fresh)?;
    if journal.loaded() > 0 && !args.quiet {
        eprintln!(
            "oom-bisect: resuming: {} trials already in {}",
            journal.loaded(),
            journal_path.display()
        );
    }
    let space = space::build(&w.config, &args.axes);
    let on = |s: crate::cli::Step| args.axes.is_empty() || args.axes.contains(&s);
    let opts = SearchOptions {
        ceiling: device.ceiling_bytes.unwrap_or(0),
        confirm_runs: if args.no_confirm {
            0
        } else {
            args.confirm_runs
        },
        predict: !args.no_predict,
        max_trials: args.max_trials,
        deadline: args.max_time.map(|t| std::time::Instant::now() + t),
        fixes: on(crate::cli::Step::Fixes),
        modules: on(crate::cli::Step::Modules),
        minimise: on(crate::cli::Step::Minimal),
    };
    let mut oracle = TrialOracle {
        base: w.config.clone(),
        device: &device,
        journal,
        reports: HashMap::new(),
        resumed: 0,
    };
    let mut progress = Progress::new(args.quiet, args.max_trials);
    let started = Instant::now();
    let mut d = {
        let mut on_event = |e: &oom_search::Event| progress.on(e);
        diagnose(&mut oracle, &mut on_event, &space, &opts)
    };
    progress.finish();
    // The effective ceiling, as the trials report it, when it was not known up front.
    if d.ceiling_bytes == 0 {
        d.ceiling_bytes = oracle
            .reports
            .values()
            .find_map(|r| r.ceiling_bytes)
            .unwrap_or(0);
    }
    let run = BisectRun {
        diagnosis: d,
        reports: std::mem::take(&mut oracle.reports),
        wall_seconds: started.elapsed().as_secs_f64(),
        journal: journal_path,
        resumed: oracle.resumed,
    };
    Ok((w, device, run))
}

pub fn bisect(args: &BisectArgs) -> Result<i32> {
    let (w, device, run) = run_bisect(args)?;
    report_run(args, &w, &device, &run)
}

/// Prints the report of a finished diagnosis, writes its JSON and the minimal failing config, and
/// gives the exit code; shared by `bisect` and `bench`.
fn report_run(
    args: &BisectArgs,
    w: &Workload,
    device: &DeviceSettings,
    run: &BisectRun,
) -> Result<i32> {
    let d = &run.diagnosis;
    let original_report = run.reports.get(&(Candidate::original(), 0));

    // The minimal failing configuration, as a config file the tool accepts back.
    let mut minimal_path = None;
    let mut minimal_config = None;
    let mut reproduce = None;
    if let Some(m) = &d.minimal_failing {
        if let Ok(mut c) = w.config.with_overrides(&m.candidate.to_sets()) {
            // The file reproduces on its own: the backend and the ceiling in force are written in.
            c.device = deeplab::DeviceConfig {
                backend: Some(device.backend.name().to_string()),
                memory_limit: (d.ceiling_bytes > 0).then(|| d.ceiling_bytes.to_string()),
                memory_fraction: None,
                gpu: None,
            };
            let path: PathBuf = args
                .journal
                .join(format!("{}-minimal-failing.toml", w.stem()));
            let text = format!(
                "# The smallest configuration that still runs out of memory under {} on {},\n\
                 # found by `oom-bisect bisect --config {}`. Overrides of the original: {}\n{}",
                fmt_bytes(d.ceiling_bytes),
                backend_label(device),
                w.path.display(),
                m.candidate,
                c.to_toml_string()
            );
            write_file(&path, &text)?;
            minimal_config = Some(c.to_table());
            reproduce = Some(format!(
                "oom-bisect trial --config {} {}",
                path.display(),
                device.reproduce_flags()
            ));
            minimal_path = Some(path.display().to_string());
        }
    }
    if reproduce.is_none() {
        let sets: String = args
            .config
            .sets
            .iter()
            .map(|s| format!(" --set '{s}'"))
            .collect();
        reproduce = Some(format!(
            "oom-bisect trial --config {}{sets} {}",
            w.path.display(),
            device.reproduce_flags()
        ));
    }
    let cx = report::Context {
        title: title(&w.config),
        backend: backend_label(device),
        original_report,
        minimal_path,
        minimal_config,
        reproduce,
        journal: Some(run.journal.display().to_string()),
        resumed: run.resumed,
        wall_seconds: run.wall_seconds,
        fake: device.fake,
    };
    print!("{}", report::text(d, &cx));
    if let Some(j) = &args.json {
        let v = report::json(d, &cx, &backend_label(device));
        write_file(j, &serde_json::to_string_pretty(&v).expect("json"))?;
    }
    Ok(match d.original.outcome {
        Outcome::Inconclusive => code::INCONCLUSIVE_ORIGINAL,
        _ => code::SUCCESS,
    })
}

pub fn trial(args: &TrialArgs) -> Result<i32> {
    let w = Workload::load(&args.config)?;
    let device = DeviceSettings::resolve(&args.device, &w.config, false)?;
    if let Some(j) = &args.json {
        check_writable(j)?;
    }
    let fault = match args.fault.as_deref() {
        None => None,
        Some("sleep") => Some(Fault::Sleep),
        Some("broken-module") => Some(Fault::BrokenModule),
        Some("device-thread-oom") => Some(Fault::DeviceThreadOom),
        Some(f) => return Err(user(code::USAGE, format!("unknown fault `{f}`"))),
    };
    eprintln!(
        "oom-bisect: {} on {}",
        title(&w.config),
        backend_label(&device)
    );
    let r = run_trial(&w.config, &device, fault);
    print!("{}", report::trial_table(&r));
    if let Some(j) = &args.json {
        write_file(j, &serde_json::to_string_pretty(&r).expect("json"))?;
    }
    Ok(match r.outcome {
        TrialOutcome::Fits => code::SUCCESS,
        TrialOutcome::Oom => code::OOM,
        TrialOutcome::Error | TrialOutcome::Timeout => code::INCONCLUSIVE,
    })
}

pub fn inspect(args: &InspectArgs) -> Result<i32> {
    let w = Workload::load(&args.config)?;
    let c = &w.config;
    let arch = Architecture::new(c).map_err(|e| user(code::CONFIG_INVALID, e.to_string()))?;
    let (total, by_module) =
        oom_trial::count_params(c).map_err(|e| user(code::CONFIG_INVALID, e.to_string()))?;
    let params: HashMap<String, usize> = by_module.into_iter().collect();
    println!("{}", title(c));
    println!("trainable parameters: {total}");
    println!("\nModules (ids for `identity = [..]`):");
    println!("  {:<24} {:>11}  {:<40} swappable", "id", "params", "kind");
    for m in &arch.modules {
        let swapped = arch.is_identity(&m.id);
        println!(
            "  {:<24} {:>11}  {:<40} {}",
            m.id,
            params.get(&m.id).copied().unwrap_or(0),
            m.kind,
            match (&m.not_swappable, swapped) {
                (_, true) => "SWAPPED for identity".to_string(),
                (None, false) => "yes".to_string(),
                (Some(why), false) => format!("no: {why}"),
            }
        );
    }
    let est = estimate::stages(&arch, c);
    println!("\nStages (ids for `truncate_after`), output shapes and estimated activation memory kept for backward:");
    println!(
        "  {:<26} {:<22} {:>12} {:>12}",
        "stage", "output [B, C, H, W]", "estimate", "cumulative"
    );
    let mut acc = 0;
    for (i, s) in est.iter().enumerate() {
        acc += s.saved_bytes;
        let cut = if arch.runs(i) {
            ""
        } else {
            "  (not run: truncated)"
        };
        println!(
            "  {:<26} {:<22} {:>12} {:>12}{cut}",
            s.id,
            format!("{:?}", s.shape),
            fmt_bytes(s.saved_bytes),
            fmt_bytes(acc)
        );
    }
    let fixed = estimate::fixed_bytes(total as u64, c, c.train.phase);
    println!(
        "\nParameters, gradients and optimizer state ({}): {}. Estimated peak ≈ {} (an estimate; `trial` measures).",
        c.train.phase.name(),
        fmt_bytes(fixed),
        fmt_bytes(fixed + acc + acc / 4)
    );
    Ok(code::SUCCESS)
}

/// `bench`: one diagnosis, timed. Where the time goes: per trial, the child's whole life against the
/// training steps it measured, and the first trial (cold kernel caches) against the later ones.
pub fn bench(args: &crate::cli::BenchArgs) -> Result<i32> {
    let (w, device, run) = run_bisect(&args.bisect)?;
    // The diagnosis itself first (and its JSON and minimal config), then where its time went.
    let code = report_run(&args.bisect, &w, &device, &run)?;
    let d = &run.diagnosis;
    println!(
        "\nbench: {} on {}",
        title(&w.config),
        backend_label(&device)
    );
    println!(
        "diagnosis: {} trials, {:.1} s wall ({} answered from the journal)",
        d.trials.len(),
        run.wall_seconds,
        run.resumed
    );
    println!(
        "\n  {:<8} {:>7} {:>14} {:>16}",
        "axis", "trials", "confirmations", "plain bisection"
    );
    for a in d.axes.iter().chain(d.capacity.iter()) {
        println!(
            "  {:<8} {:>7} {:>14} {:>16}",
            a.axis,
            a.trials - a.confirmations,
            a.confirmations,
            a.plain_bisection
        );
    }
    // Reports in the order the trials ran.
    let reports: Vec<&oom_trial::TrialReport> = d
        .trials
        .iter()
        .filter_map(|t| run.reports.get(&(t.candidate.clone(), t.attempt)))
        .collect();
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let walls: Vec<f64> = reports.iter().map(|r| r.wall_seconds).collect();
    let ready: Vec<f64> = reports.iter().filter_map(|r| r.ready_seconds).collect();
    let built: Vec<f64> = reports
        .iter()
        .filter_map(|r| Some(r.built_seconds? - r.ready_seconds?))
        .collect();
    // Trials that finished every step: their first step against their later ones.
    let finished: Vec<&oom_trial::TrialReport> = reports
        .iter()
        .copied()
        .filter(|r| r.outcome == oom_trial::TrialOutcome::Fits && r.steps.len() > 1)
        .collect();
    let first_steps: Vec<f64> = finished.iter().map(|r| r.steps[0].seconds).collect();
    let later: Vec<f64> = finished
        .iter()
        .flat_map(|r| r.steps.iter().skip(1).map(|s| s.seconds))
        .collect();
    let step_time: Vec<f64> = finished
        .iter()
        .map(|r| r.steps.iter().map(|s| s.seconds).sum())
        .collect();
    // Everything a finished trial spent beyond its steps at their steady speed.
    let overhead: Vec<f64> = finished
        .iter()
        .map(|r| {
            let steady = r
                .steps
                .iter()
                .skip(1)
                .map(|s| s.seconds)
                .fold(f64::INFINITY, f64::min);
            r.wall_seconds - steady * r.steps.len() as f64
        })
        .collect();
    println!(
        "\nper trial (means; {} trials ran, {} finished every step):",
        reports.len(),
        finished.len()
    );
    println!(
        "  process start to device ready (context, ceiling)   {:>8.2} s",
        mean(&ready)
    );
    println!(
        "  building model, optimizer and batch                {:>8.2} s",
        mean(&built)
    );
    println!(
        "  whole trial, any outcome                           {:>8.2} s",
        mean(&walls)
    );
    println!(
        "  finished trials: whole trial                       {:>8.2} s",
        mean(&finished.iter().map(|r| r.wall_seconds).collect::<Vec<_>>())
    );
    println!(
        "  finished trials: all training steps                {:>8.2} s",
        mean(&step_time)
    );
    println!(
        "  finished trials: first step (compilation included) {:>8.2} s",
        mean(&first_steps)
    );
    println!(
        "  finished trials: a later step                      {:>8.2} s",
        mean(&later)
    );
    println!(
        "  finished trials: overhead beyond steady steps      {:>8.2} s",
        mean(&overhead)
    );
    if let (Some(first), true) = (walls.first(), walls.len() > 1) {
        println!(
            "  first trial {:.2} s, later trials {:.2} s on average",
            first,
            mean(&walls[1..])
        );
    }
    println!(
        "  kernel cache: {}",
        crate::cache::dir()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "off".into())
    );
    Ok(code)
}
