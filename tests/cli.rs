//! The real binary, driven as a user would: help, bad configs and their exit codes, trials of every
//! outcome on the CPU backend, the JSON reports, the journal resumed after an interruption, and a full
//! diagnosis of the quickstart config whose boundaries are re-run alone.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `cmd` (`bisect` or `bench`) on the forum config with fake trials, quiet, a journal and a JSON
/// report in a directory of its own, plus `extra`: the output, the JSON (Null when none was written)
/// and the directory.
fn fake_forum(cmd: &str, name: &str, extra: &[&str]) -> (Output, Value, PathBuf) {
    let d = tmp(name);
    let cfg = root().join("configs/forum-r101-os8-1024.toml");
    let (journal, j) = (d.join("j"), d.join("r.json"));
    let mut args = vec![
        cmd,
        "--config",
        cfg.to_str().unwrap(),
        "--fake-trials",
        "--journal",
        journal.to_str().unwrap(),
        "--json",
        j.to_str().unwrap(),
        "-q",
    ];
    args.extend(extra);
    let o = run(&args, &d);
    let r = json_if_written(&j);
    (o, r, d)
}

#[test]
fn help_lists_commands_and_exit_codes() {
    let d = tmp("help");
    let o = run(&["--help"], &d);
    assert_eq!(code(&o), 0);
    let t = text(&o);
    for w in [
        "bisect",
        "trial",
        "inspect",
        "bench",
        "Exit codes:",
        "125",
        "no CUDA driver",
    ] {
        assert!(t.contains(w), "help lacks {w}:\n{t}");
    }
    assert!(!t.contains("__trial"), "the internal subcommand is hidden");
    let o = run(&["bisect", "--help"], &d);
    for w in [
        "--memory-limit",
        "--memory-fraction",
        "--gpu",
        "--axes",
        "--max-trials",
        "--max-time",
        "--confirm-runs",
        "--trial-timeout",
        "--json",
        "--journal",
        "--quiet",
    ] {
        assert!(text(&o).contains(w), "bisect --help lacks {w}");
    }
    let o = run(&["bisect", "--config", "x.toml", "--gpu", "help"], &d);
    assert_eq!(code(&o), 0);
    assert!(text(&o).contains("rtx3090"));
    // The commit the binary was built from (what a benchmark's stamp names), where git knew it.
    let o = run(&["--version"], &d);
    let version = text(&o);
    let commit = version
        .trim()
        .strip_prefix(concat!(
            "oom-bisect ",
            env!("CARGO_PKG_VERSION"),
            " (commit "
        ))
        .and_then(|c| c.strip_suffix(')'))
        .unwrap_or_else(|| panic!("--version: {version}"));
    assert!(
        commit == "unknown" || commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "--version: {version}"
    );
}

#[test]
fn bad_configs_name_file_key_and_exit_code() {
    let d = tmp("bad");
    let good = write(&d, "good.toml", TINY);
    let cases: Vec<(PathBuf, Vec<&str>, i32, Vec<&str>)> = vec![
        (
            write(&d, "typo.toml", &TINY.replace("batch = 2", "bach = 2")),
            vec![],
            11,
            vec!["typo.toml", "data.bach", "did you mean `data.batch`"],
        ),
        (
            write(
                &d,
                "stride.toml",
                &TINY.replace("output_stride = 16", "output_stride = 12"),
            ),
            vec![],
            11,
            vec!["stride.toml", "model.output_stride", "allowed: 8, 16, 32"],
        ),
        (
            d.join("missing.toml"),
            vec![],
            10,
            vec!["cannot read config", "missing.toml"],
        ),
        (
            write(&d, "broken.toml", "[model\nbackbone ="),
            vec![],
            11,
            vec!["broken.toml", "not valid TOML"],
        ),
        (
            good.clone(),
            vec!["--set", "data.batch=0"],
            11,
            vec!["data.batch", "at least 1"],
        ),
        (
            good.clone(),
            vec!["--set", "data.size=[60, 64]"],
            11,
            vec!["data.size", "multiple of the output stride"],
        ),
        (
            good.clone(),
            vec!["--set", "model.identity=[\"aspp.branch7\"]"],
            11,
            vec!["model.identity", "not a module"],
        ),
        (
            good.clone(),
            vec!["--set", "model.depth=3"],
            11,
            vec!["model.depth", "unknown key"],
        ),
        // Huge values are refused with what is allowed, before anything is built.
        (
            good.clone(),
            vec!["--set", "data.batch=1000000000000"],
            11,
            vec!["data.batch", "at most 65536"],
        ),
        (
            good.clone(),
            vec!["--set", "data.size=[32, 4611686018427387904]"],
            11,
            vec!["data.size", "at most"],
        ),
        (
            good.clone(),
            vec!["--set", "model.aspp_channels=100000000000"],
            11,
            vec!["model.aspp_channels", "at most"],
        ),
        (
            good.clone(),
            vec!["--trial-timeout", "99999999999999999999"],
            2,
            vec!["trial-timeout"],
        ),
        (
            good.clone(),
            vec!["--memory-limit", "24 parsecs", "--backend", "cpu"],
            13,
            vec!["unknown unit"],
        ),
        (
            good.clone(),
            vec!["--memory-limit", "100TiB", "--backend", "cpu"],
            13,
            vec!["larger than"],
        ),
        (
            good.clone(),
            vec!["--gpu", "voodoo2", "--backend", "cpu"],
            13,
            vec!["unknown card", "rtx3090"],
        ),
        (
            good.clone(),
            vec!["--json", "/dev/null/report.json", "--backend", "cpu"],
            14,
            vec!["cannot"],
        ),
    ];
    for (cfg, extra, want, words) in cases {
        let mut args = vec!["trial", "--config", cfg.to_str().unwrap()];
        args.extend(extra.iter());
        let o = run(&args, &d);
        let t = text(&o);
        assert_eq!(code(&o), trial_code(want), "{args:?}:\n{t}");
        for w in words {
            assert!(t.contains(w), "{args:?}: message lacks `{w}`:\n{t}");
        }
        assert!(!t.contains("panicked"), "{args:?} panicked:\n{t}");
    }
}

/// `trial`'s exit code for an error that other commands report as `code`: `git bisect run`'s
/// skip (125) where this commit's config is at fault, 200 + the code where nothing can be measured
/// at any commit (README, "Exit codes").
fn trial_code(code: i32) -> i32 {
    match code {
        10 | 11 => 125,
        c => 200 + c,
    }
}

/// Checkpointed blocks (the `pytorch` model's `torch.utils.checkpoint`) keep only each block's
/// input: on the CPU the same trial's peak drops. R18 at OS8, 160², batch 4, up to layer4, where
/// the blocks' activations are about a third of the peak.
#[test]
fn checkpointing_lowers_a_trials_peak() {
    let peak = |on: &str| {
        let sets = [
            "model.output_stride=8",
            "data.batch=4",
            "data.size=[160, 160]",
            "model.truncate_after=\"backbone.layer4.1\"",
            on,
        ];
        let mut args = vec!["--memory-limit", "none"];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let (o, r) = tiny_trial("checkpointing", &args);
        assert_eq!(code(&o), 0, "{}", text(&o));
        r["peak_bytes"].as_u64().unwrap()
    };
    let (plain, checkpointed) = (
        peak("train.checkpointing=false"),
        peak("train.checkpointing=true"),
    );
    assert!(
        checkpointed + (10 << 20) < plain,
        "checkpointed {checkpointed} against {plain}"
    );
}

#[test]
fn no_cuda_device_suggests_cpu() {
    // On a machine with a GPU the error case cannot happen.
    let no_gpu = !Path::new("/dev/nvidia0").exists();
    if !can_run("NO_GPU", no_gpu, "this machine has a GPU") {
        return;
    }
    let d = tmp("nocuda");
    let cfg = write(&d, "c.toml", TINY);
    let o = run(
        &[
            "trial",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "cuda",
        ],
        &d,
    );
    assert_eq!(code(&o), 212, "{}", text(&o));
    assert!(text(&o).contains("--backend cpu"));
}

/// Every step of `train.steps`, the optimizer's state made by the first update (as before
/// `train.one_step_below`): what a test of the steps themselves needs.
const LAZY: &str = "train.one_step_below=0";

/// The policy of a diagnosis's trials (`train.one_step_below`, 0.9 by default).
const ONE_STEP: &str = "train.one_step_below=0.9";

/// A trial stops after one step only where that step stayed under 90% of its ceiling; nearer,
/// and with the policy off, it runs both steps. A trial run alone is read for its need, which one
/// step understates: it runs both, with the state made first as under the policy.
#[test]
fn a_trial_measures_one_step_only_far_below_its_ceiling() {
    let steps = |r: &Value| r["steps"].as_array().unwrap().len();
    let need = |r: &Value| r["allocator"]["need_bytes"].as_u64().unwrap();
    let far_args = ["--memory-limit", "2GiB", "--set", ONE_STEP];
    let (o, far) = tiny_trial("steps-far", &far_args);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(steps(&far), 1, "{far}");
    let (o, lazy) = tiny_trial("steps-off", &["--memory-limit", "2GiB", "--set", LAZY]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(steps(&lazy), 2, "{lazy}");
    let (o, alone) = tiny_trial("steps-alone", &["--memory-limit", "2GiB"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(steps(&alone), 2, "{alone}");
    assert!(need(&alone) >= need(&far), "{alone} {far}");
    // A ceiling the first step's peak takes 95% of: the second step runs, and still fits.
    let near = (far["peak_bytes"].as_u64().unwrap() as f64 / 0.95) as u64;
    let (o, r) = tiny_trial(
        "steps-near",
        &["--memory-limit", &format!("{near}B"), "--set", ONE_STEP],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(steps(&r), 2, "{r}");
}

#[test]
fn trial_fits_and_reports_json() {
    let (o, r) = tiny_trial("fits", &["--memory-limit", "2GiB"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("backbone.layer4.1") && t.contains("backward") && t.contains("needs "),
        "{t}"
    );
    assert_eq!(r["outcome"], "fits");
    assert_eq!(r["backend"], "cpu");
    assert_eq!(r["ceiling_bytes"], 2u64 << 30);
    assert!(r["peak_bytes"].as_u64().unwrap() > 10 << 20);
    assert!(r["stages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == "aspp"));
    // Alone, every step: a trial run for its need (see a_trial_measures_one_step_only_far_…).
    assert_eq!(r["steps"].as_array().unwrap().len(), 2);
    assert!(r["oom"].is_null() && r["error"].is_null());
    // Where the time went: device ready, model built, then every reading in order, inside the trial.
    let ready = r["ready_seconds"].as_f64().unwrap();
    let built = r["built_seconds"].as_f64().unwrap();
    let at: Vec<f64> = r["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["seconds"].as_f64().unwrap())
        .collect();
    assert!(ready <= built && built <= at[0], "{ready} {built} {at:?}");
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
    assert!(at[at.len() - 1] <= r["wall_seconds"].as_f64().unwrap());
}

#[test]
fn every_phase_holds_the_same_memory_after_each_step() {
    // A forward-only step never calls backward; its autodiff graph (and every activation it saved)
    // must still be released before the next step, or memory grows step after step and the phase
    // axis is wrong (seen on the H200: R50 forward-only at batch 3 ran out where a full step at
    // batch 6 fits).
    let mut held = vec![];
    for phase in ["forward", "backward", "step"] {
        let set = format!("train.phase=\"{phase}\"");
        let (o, r) = tiny_trial(
            &format!("phase-{phase}"),
            &[
                "--set",
                &set,
                "--set",
                "train.steps=3",
                "--set",
                "train.one_step_below=0",
            ],
        );
        assert_eq!(code(&o), 0, "{}", text(&o));
        let after: Vec<u64> = r["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["in_use_after_bytes"].as_u64().unwrap())
            .collect();
        assert_eq!(after.len(), 3, "{phase}");
        // A step that keeps its graph keeps about what it works with (peak less what was held
        // before it: about 15 MiB here); one buffer made the first time a thread runs some
        // kernel (1 MiB, after the first step or after the second by the threads' timing) is no
        // leak.
        let working = r["peak_bytes"].as_u64().unwrap() - after[0];
        assert!(
            after.windows(2).all(|w| w[1] <= w[0] + working / 8),
            "{phase}: in use after each step grows: {after:?} (working set {working})"
        );
        held.push(after[0]);
    }
    // Without an optimizer step nothing but the parameters and the batch outlives a step: a
    // forward-only step leaves what a forward + backward step leaves, not its activations.
    assert!(
        held[0] <= held[1] + held[1] / 20,
        "forward leaves {} in use, forward + backward {}",
        held[0],
        held[1]
    );
}

/// Mixed precision is PyTorch's autocast: the weights and the optimizer state stay f32 (what a step
/// leaves in use equals f32's), the activations are computed in f16 (the forward pass adds about
/// half of f32's, plus the f16 copies of the weights); pure f16 halves everything.
#[test]
fn mixed_precision_keeps_f32_weights_and_halves_activations() {
    let mut held = vec![];
    let mut forward = vec![];
    // The three trials side by side: the f16 ones take three times as long on a CPU.
    let trials: Vec<_> = ["f32", "mixed-f16", "f16"]
        .map(|p| {
            std::thread::spawn(move || {
                let set = format!("train.precision=\"{p}\"");
                let size = "data.size=[256, 256]";
                let args = ["--set", &set, "--set", size, "--set", LAZY];
                (p, tiny_trial(&format!("precision-{p}"), &args))
            })
        })
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    for (p, (o, r)) in trials {
        assert_eq!(code(&o), 0, "{p}: {}", text(&o));
        let after = r["steps"][0]["in_use_after_bytes"].as_u64().unwrap();
        let loss = r["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "loss")
            .unwrap()["in_use_bytes"]
            .as_u64()
            .unwrap();
        held.push(after as f64);
        forward.push(loss.saturating_sub(after) as f64);
    }
    let (f32_, mixed, f16) = (0, 1, 2);
    assert!(
        (held[mixed] / held[f32_] - 1.0).abs() < 0.02,
        "held {held:?}"
    );
    assert!((held[f16] / held[f32_] - 0.5).abs() < 0.05, "held {held:?}");
    assert!(forward[mixed] < 0.7 * forward[f32_], "forward {forward:?}");
    assert!(forward[f16] < 0.6 * forward[f32_], "forward {forward:?}");
}

#[test]
fn each_memory_model_keeps_what_it_claims_and_bad_values_are_named() {
    const BURN: &str = "device.memory_model=\"burn\"";
    let (o, plain) = tiny_trial("bn-burn", &["--set", BURN]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let (o, lean) = tiny_trial(
        "bn-lean",
        &["--set", BURN, "--set", "model.batch_norm=\"lean\""],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    // Two lazy steps, as burn's model runs them: what step 0 leaves is then the baseline.
    let (o, torch) = tiny_trial("bn-torch", &["--set", LAZY]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("memory model pytorch"), "{}", text(&o));
    // What the forward pass keeps for backward: in use at the loss of step 1, less what step 0
    // left (parameters, momentum, batch). Per conv-BN-ReLU layer burn-nn keeps 5 input-sized
    // tensors, lean 3, PyTorch's 2 (CPU counting allocator: deterministic).
    let kept = |r: &Value| {
        let at_loss = r["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step"] == 1 && s["name"] == "loss")
            .unwrap()["in_use_bytes"]
            .as_u64()
            .unwrap();
        at_loss - r["steps"][0]["in_use_after_bytes"].as_u64().unwrap()
    };
    let (plain, lean, torch) = (kept(&plain), kept(&lean), kept(&torch));
    assert!(
        lean * 10 < plain * 8,
        "lean keeps {lean} against burn-nn's {plain}"
    );
    assert!(
        torch * 10 < lean * 9,
        "pytorch keeps {torch} against lean's {lean}"
    );
    for (set, key, allowed) in [
        ("model.batch_norm=\"fast\"", "model.batch_norm", "lean"),
        (
            "device.memory_model=\"tf\"",
            "device.memory_model",
            "pytorch",
        ),
        (
            "model.batch_norm=\"lean\"",
            "model.batch_norm",
            "device.memory_model",
        ),
    ] {
        let (o, _) = tiny_trial("bn-bad", &["--set", set]);
        assert_eq!(code(&o), 125, "{}", text(&o));
        let t = text(&o);
        assert!(
            t.contains(key) && t.contains(allowed),
            "the error names the key and what is allowed: {t}"
        );
    }
}

#[test]
fn trial_under_a_small_ceiling_is_oom_with_its_stage() {
    let (o, r) = tiny_trial("oom", &["--memory-limit", "48MiB"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert_eq!(r["outcome"], "oom");
    assert!(r["oom"]["stage"].is_string(), "{r}");
    assert!(r["oom"]["bytes"].as_u64().unwrap() > 0);
    assert!(text(&o).contains("OUT OF MEMORY"));
}

#[test]
fn inspect_prints_ids_and_the_exact_parameter_count() {
    let d = tmp("inspect");
    let o = run(
        &[
            "inspect",
            "--config",
            root()
                .join("configs/deeplabv3plus-r50-os8.toml")
                .to_str()
                .unwrap(),
        ],
        &d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("trainable parameters: 40,352,181"), "{t}");
    for id in [
        "backbone.layer3.5",
        "aspp.branch2",
        "aspp.pool",
        "decoder.fuse.1",
        "classifier",
    ] {
        assert!(t.contains(id), "{id}");
    }
    let o = run(
        &[
            "inspect",
            "--config",
            root()
                .join("configs/deeplabv3plus-r101-os8.toml")
                .to_str()
                .unwrap(),
        ],
        &d,
    );
    assert!(text(&o).contains("trainable parameters: 59,344,309"));
}

#[test]
fn max_time_reports_what_was_measured_and_rejects_bad_durations() {
    let (o, r, _) = fake_forum("bisect", "maxtime", &["--max-time", "0s"]);
    let t = text(&o);
    assert!(t.contains("--max-time") && t.contains("ran out"), "{t}");
    assert_eq!(r["trials"]["budget_exhausted"], true);
    assert_eq!(r["trials"]["count"], 0);
    assert_eq!(r["original"]["outcome"], "inconclusive");
    let (o, _, _) = fake_forum("bisect", "maxtime-bad", &["--max-time", "5 parsecs"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("use s, m or h"), "{}", text(&o));
    // A duration past what `Duration` holds is a usage error, not a panic.
    let (o, _, _) = fake_forum(
        "bisect",
        "maxtime-huge",
        &["--max-time", "99999999999999999999"],
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("at most 7 days") && !text(&o).contains("panicked"));
}

#[test]
fn fake_bisect_json_has_every_field() {
    let (o, r, d) = fake_forum("bisect", "fakejson", &[]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    // The first line names the stage that fails as the depth axis measured it, with the step and
    // pass; the second puts the other answers to "where" together: what dominates, where it
    // crosses, the block whose removal saves most.
    let lines: Vec<&str> = t
        .split("\nDiagnosis:\n  - ")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .collect();
    assert!(
        lines[0].starts_with("It fails in the layer4.0, in step 1's forward pass"),
        "{t}"
    );
    let short = lines[1].trim_start_matches("  - ");
    assert!(
        short.starts_with("In short: activations are")
            && short.contains("after backbone.layer3.22")
            && short.contains("saves most is backbone.layer3.1-22"),
        "{t}"
    );
    assert!(t.contains("ESTIMATE: every figure below is the model's memory estimate"));
    let reproduce = t.lines().find(|l| l.starts_with("Reproduce with: "));
    // The estimate runs no backend: the line names none.
    assert!(
        reproduce.is_some_and(|l| l.contains(" trial --config")
            && l.contains(" --estimate")
            && !l.contains("--backend")),
        "{t}"
    );
    assert_eq!(r["original"]["outcome"], "oom");
    // The forum's `gpu = "rtx3090"`: the 23.70 GiB CUDA reports for the card, not the box's 24.
    assert_eq!(
        r["ceiling_bytes"].as_u64().unwrap(),
        (23.70 * (1u64 << 30) as f64) as u64
    );
    assert!(r["backend"].is_string());
    let b = r["boundaries"].as_array().unwrap();
    assert!(
        b.iter()
            .any(|x| x["axis"] == "batch" && x["last_fit"]["peak_bytes"].is_u64()),
        "{b:?}"
    );
    assert!(r["minimal_failing"]["config"]["model"].is_object());
    assert!(r["fixes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["change"].is_string() && f["outcome"].is_string()));
    assert!(r["trials"]["count"].as_u64().unwrap() > 5);
    assert!(r["trials"]["list"].as_array().unwrap().len() > 5);
    assert_eq!(
        r["steps_per_trial"], 2,
        "the forum config under the pytorch model"
    );
    let costs = r["modules"]["costs"].as_array().unwrap();
    assert!(costs.len() > 5, "{costs:?}");
    assert!(costs
        .iter()
        .all(|c| c["item"].is_string() && c["outcome"].is_string()));
    assert!(r["modules"]["culprits"].is_array());
    let min = r["minimal_failing"]["file"].as_str().unwrap();
    assert!(Path::new(&d.join(min)).exists() || Path::new(min).exists());
}

#[test]
fn fake_bench_prints_the_report_writes_json_and_confirms_three_times() {
    let (o, r, _) = fake_forum("bench", "fakebench", &["--confirm-runs", "2"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    for w in [
        "Verdict:",
        "+4 repeated)",
        "bench:",
        "per trial",
        "plain bisection",
        "critical path: ",
        "rounds of dependent trials",
        "busy: ",
        "rounds by step: original ",
    ] {
        assert!(t.contains(w), "bench output lacks {w}:\n{t}");
    }
    // One worker (the estimate's default): every trial is a round of its own.
    let number_before = |w: &str| -> usize {
        let at = t.find(w).unwrap_or_else(|| panic!("no {w}:\n{t}"));
        let head = t[..at].trim_end();
        head[head.rfind(' ').unwrap() + 1..].parse().unwrap()
    };
    let (rounds, ran) = (
        number_before(" rounds of dependent trials"),
        number_before(" trials run,"),
    );
    assert!(t.contains("workers: 1;"), "{t}");
    assert_eq!(rounds, ran, "{t}");
    let b = r["boundaries"].as_array().unwrap();
    assert!(
        b.iter().any(|x| x["confirmations"] == 4),
        "two re-runs of each side: {b:?}"
    );
    // --no-confirm and --confirm-runs contradict each other.
    let (o, _, _) = fake_forum(
        "bisect",
        "fakebench-both",
        &["--no-confirm", "--confirm-runs", "2"],
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
}

#[test]
fn the_journal_resumes_an_interrupted_bisect() {
    let d = tmp("resume");
    let cfg = write(&d, "c.toml", TINY);
    let journal = d.join("j");
    let args = [
        "bisect",
        "--config",
        cfg.to_str().unwrap(),
        "--backend",
        "cpu",
        "--memory-limit",
        "80MiB",
        "--axes",
        "batch,size",
        "--journal",
        journal.to_str().unwrap(),
        // One trial at a time: the third is running when the interrupt comes (two at once can
        // finish together, and then the run is over before it).
        "--jobs",
        "1",
    ];
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(&d)
        .env("OOM_BISECT_KERNEL_CACHE", "")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once two trials are in the journal.
    let t0 = Instant::now();
    let lines = || -> usize {
        std::fs::read_dir(&journal)
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .map(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap_or_default()
                    .lines()
                    .count()
            })
            .sum()
    };
    while lines() < 2 && t0.elapsed() < Duration::from_secs(240) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signals our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let before = lines();
    assert!(before >= 2);
    let o = run(&args, &d);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(&format!("resuming: {before} trials already in")),
        "{t}"
    );
    assert!(t.contains("answered from the journal"), "{t}");
}

/// The README's main command, then every reported boundary re-run alone with `trial`.
/// The quickstart's report: the need (the original's run replayed), more than the ceiling, with a
/// breakdown that adds up to it; the size boundary at the model's own step.
fn need_breakdown_and_fine_size(r: &Value) {
    // More than the ceiling, and the breakdown adds up to it.
    let need = r["original"]["needed_bytes"].as_u64().unwrap();
    assert!(need > r["ceiling_bytes"].as_u64().unwrap(), "{need}");
    let parts: u64 = r["original"]["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(parts, need, "the parts of the peak add up to it");
    // The size boundary at the model's own step (the output stride, 8), not the coarse 32.
    let size = r["boundaries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["axis"] == "size" && b["kind"] == "boundary")
        .expect("a size boundary");
    let side = |p: &str| {
        size[p]["value"]
            .as_str()
            .unwrap()
            .split('×')
            .next()
            .unwrap()
            .parse::<u32>()
            .unwrap()
    };
    assert_eq!(side("first_oom") - side("last_fit"), 8, "{size}");
}

/// The values on both sides of each boundary in a report's "Boundaries" section.
fn boundary_words(report: &str) -> Vec<String> {
    let side = |l: &str, key: &str| {
        l.split_once(key)
            .map(|(_, rest)| rest.split(" (").next().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    report
        .lines()
        .skip_while(|l| !l.starts_with("Boundaries"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| match l.contains("last fit") {
            true => format!("{} | {}", side(l, "last fit "), side(l, "first OOM ")),
            false => l.split(':').next().unwrap_or("").trim().to_string(),
        })
        .collect()
}

/// A report's lines, in order of their text, with each boundary's trial counts left out (trials run
/// one per core, so a search's probes follow the machine; never a need: trial streams are
/// deterministic) and padding collapsed; the lines naming this run's files and its time are left out.
fn report_words(report: &str) -> Vec<String> {
    let ours = ["saved to ", "Trials: ", "Reproduce with: "];
    let mut lines: Vec<String> = report
        .lines()
        .filter(|l| !ours.iter().any(|p| l.trim_start().starts_with(p)))
        .map(|l| {
            let counted = l.find(" trials ").map_or(l, |i| &l[..i]);
            counted.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .collect();
    lines.sort();
    lines
}

/// `report` with the needs of its mixed-precision rows taken out, and those needs in MiB. The
/// mixed-precision trials' streams differ between CPUs by one 2 MiB segment (an AMD EPYC needs
/// 242.0 MiB where an Intel Xeon needs 240.0: burn-flex's f16 conversions ask for other buffers
/// on them); pure f16 and everything else repeat on any CPU.
fn mixed_precision_needs(report: &str) -> (String, Vec<f64>) {
    let mut out = String::new();
    let mut needs = vec![];
    for line in report.lines() {
        let mut rest = line;
        let mut kept = String::new();
        while let Some(i) = rest.find("mixed precision") {
            let (before, after) = rest.split_at(i);
            kept += before;
            // The first figure after the mention (`needs 240.0 MiB`, `needs at most 240.0 MiB`).
            let Some(j) = after.find(" MiB") else {
                kept += after;
                rest = "";
                break;
            };
            let start = after[..j].rfind(' ').map_or(0, |s| s + 1);
            if let Ok(n) = after[start..j].parse::<f64>() {
                needs.push(n);
                kept += &after[..start];
                kept += "#";
                rest = &after[j..];
            } else {
                kept += &after[..j];
                rest = &after[j..];
            }
        }
        out += &kept;
        out += rest;
        out.push('\n');
    }
    (out, needs)
}

/// The report pasted in README.md, between its markers.
fn readme_report() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let begin = "<!-- report: begin -->\n```\n";
    let i = readme.find(begin).expect("README.md's report marker") + begin.len();
    let j = readme.find("\n```\n<!-- report: end -->").expect("its end");
    readme[i..j].to_string()
}

/// Each boundary's two sides and the minimal failing configuration of the quickstart's report `r`,
/// as trials of their own, side by side (one core each): each gives the bisect's verdict alone.
/// A configuration on several sides (the original is every axis's first out-of-memory) runs once;
/// the minimal failing one runs from the file the report saved.
fn each_verdict_alone(r: &Value, cfg: &Path, d: &Path) {
    let min = &r["minimal_failing"];
    let mut seen = vec![min["candidate"].clone()];
    let mut retrials: Vec<(Vec<String>, i32)> = vec![(
        vec![
            "trial".into(),
            "--config".into(),
            min["file"].as_str().unwrap().into(),
        ],
        3,
    )];
    for b in r["boundaries"].as_array().unwrap() {
        if b["kind"] != "boundary" {
            continue;
        }
        for (side, want) in [("last_fit", 0), ("first_oom", 3)] {
            let candidate = &b[side]["candidate"];
            if seen.contains(candidate) {
                continue;
            }
            seen.push(candidate.clone());
            let mut args: Vec<String> = vec![
                "trial".into(),
                "--config".into(),
                cfg.to_str().unwrap().into(),
            ];
            for s in candidate.as_array().unwrap() {
                args.push("--set".into());
                args.push(s.as_str().unwrap().into());
            }
            retrials.push((args, want));
        }
    }
    // The original, the minimal failing configuration and a fit on each axis at least.
    assert!(retrials.len() >= 7, "{r}");
    // One worker per core, each taking the next trial as it finishes one.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..cores {
            s.spawn(|| {
                while let Some((args, want)) =
                    retrials.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let o = run(&args, d);
                    assert_eq!(code(&o), *want, "{args:?} alone:\n{}", text(&o));
                }
            });
        }
    });
}

#[test]
fn quickstart_bisect_on_cpu_boundaries_hold() {
    let d = tmp("quickstart");
    let cfg = root().join("configs/quickstart.toml");
    let j = d.join("q.json");
    let o = run(
        &[
            "bisect",
            "--config",
            cfg.to_str().unwrap(),
            "--journal",
            d.join("out").to_str().unwrap(),
            "--json",
            j.to_str().unwrap(),
        ],
        &d,
    );
    let t = text(&o);
    assert_eq!(code(&o), 0, "{t}");
    assert!(
        t.contains("Verdict: the original configuration runs OUT OF MEMORY: it needs "),
        "{t}"
    );
    assert!(
        t.contains("\nDiagnosis:\n") && t.contains("Where the memory is"),
        "{t}"
    );
    assert!(
        t.contains("Reproduce with: ") && t.contains(" trial --config"),
        "{t}"
    );
    // The README's report is this run's: the same boundaries, and every line the same, needs
    // included, but for its trial counts (CPU trials replay a deterministic stream, on any CPU;
    // `tools/readme-report.sh` regenerates it).
    let readme = readme_report();
    let stale =
        "README.md's report is not what the quickstart gives now: run tools/readme-report.sh";
    assert_eq!(boundary_words(&readme), boundary_words(&t), "{stale}");
    let fresh = String::from_utf8_lossy(&o.stdout);
    let (readme, pasted) = mixed_precision_needs(&readme);
    let (fresh, measured) = mixed_precision_needs(&fresh);
    assert_eq!(report_words(&readme), report_words(&fresh), "{stale}");
    assert_eq!(pasted.len(), measured.len(), "{stale}");
    for (a, b) in pasted.iter().zip(&measured) {
        assert!(
            (a - b).abs() <= 2.0,
            "mixed precision: {a} MiB pasted, {b} MiB now: {stale}"
        );
    }
    let r = json(&j);
    // The phase's last fit (no update, far below the ceiling) stopped after its first step: its
    // need is a lower bound, and says so.
    let bounds = r["boundaries"].as_array().unwrap();
    let phase = bounds.iter().find(|b| b["axis"] == "phase").unwrap();
    assert_eq!(phase["last_fit"]["need_is_lower_bound"], true, "{phase}");
    assert_eq!(phase["first_oom"]["need_is_lower_bound"], false, "{phase}");
    need_breakdown_and_fine_size(&r);
    each_verdict_alone(&r, &cfg, &d);
}

#[test]
fn a_changed_switch_measures_again() {
    let d = tmp("switch");
    let cfg = root().join("configs/quickstart.toml");
    let journal = d.join("j");
    let bisect = |conv: &str, env: &[(&str, &str)]| {
        Command::new(BIN)
            .args(["bisect", "--config", cfg.to_str().unwrap(), "--fake-trials"])
            .args(["--axes", "batch", "--journal", journal.to_str().unwrap()])
            .args(["--set", &format!("device.convolution={conv}")])
            .current_dir(&d)
            .env("OOM_BISECT_KERNEL_CACHE", "")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let first = bisect("gemm", &[]);
    assert_eq!(code(&first), 0, "{}", text(&first));
    assert!(!text(&first).contains("resuming"), "{}", text(&first));
    // Another kernel setting: another experiment, measured afresh.
    let other = bisect("direct", &[]);
    assert_eq!(code(&other), 0, "{}", text(&other));
    assert!(!text(&other).contains("resuming"), "{}", text(&other));
    // The same setting again: answered from the journal.
    let again = bisect("gemm", &[]);
    assert!(text(&again).contains("resuming"), "{}", text(&again));
    // A value no trial accepts is refused before any trial, naming the key and what it takes.
    let bad = bisect("sideways", &[]);
    assert_eq!(code(&bad), 11, "{}", text(&bad));
    assert!(text(&bad).contains("device.convolution"), "{}", text(&bad));
    assert!(text(&bad).contains("gemm"), "{}", text(&bad));
    // The variable the kernel is passed to the trial in is not a setting: set, it is refused.
    let var = bisect("gemm", &[("OOM_BISECT_CONV", "direct")]);
    assert_eq!(code(&var), 2, "{}", text(&var));
    assert!(
        text(&var).contains("`device.convolution`"),
        "{}",
        text(&var)
    );
}

/// `--memory-limit none` drops the ceiling a config sets: a trial that runs out of memory under the
/// config's 1 MiB fits without it.
#[test]
fn memory_limit_none_drops_the_configs_ceiling() {
    let d = tmp("limit-none");
    let cfg = write(
        &d,
        "c.toml",
        &format!("{TINY}\n[device]\nmemory_limit = \"1MiB\"\n"),
    );
    let c = cfg.to_str().unwrap();
    let o = run(&["trial", "--config", c, "--backend", "cpu"], &d);
    assert_eq!(code(&o), 3, "{}", text(&o));
    let o = run(
        &[
            "trial",
            "--config",
            c,
            "--backend",
            "cpu",
            "--memory-limit",
            "none",
        ],
        &d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
}

/// The numbers under each plot of `--html` (each `data-bytes` of a figure): what the tests compare
/// with the JSON report.
fn html_series(html: &str) -> Vec<Vec<u64>> {
    html.split("<figure>")
        .skip(1)
        .map(|f| {
            f.split("data-bytes=\"")
                .skip(1)
                .map(|b| b[..b.find('"').unwrap()].parse().unwrap())
                .collect()
        })
        .collect()
}

/// `--html`: one page, a plot per measured series, each with the trials' own figures: the batch
/// plot carries every first-run batch trial's peak (or, for an OOM, what it tried to hold) from
/// the JSON report, and the module plot one bar per module cost; the text report is on the page.
#[test]
fn the_html_report_carries_the_measured_series() {
    let d = tmp("html");
    let page = d.join("r.html");
    let (o, r, _) = fake_forum("bisect", "html", &["--html", page.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("Verdict: "),
        "{html:.300}"
    );
    assert!(
        !html.contains("<script") && !html.contains("src=\"http"),
        "self-contained"
    );
    let series = html_series(&html);
    assert!(series.len() >= 3, "{} figures", series.len());
    assert!(html.matches("<svg").count() == series.len());
    // The batch axis: every first run that changes only the batch, by batch.
    let mut want: Vec<(u64, u64)> = r["trials"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["attempt"] == 0 && t["candidate"]["sets"].as_object().unwrap().len() == 1)
        .filter_map(|t| {
            let b = t["candidate"]["sets"]["data.batch"]
                .as_str()?
                .parse()
                .ok()?;
            let m = &t["measurement"];
            let bytes = match m["outcome"].as_str()? {
                "fits" => m["peak_bytes"].as_u64(),
                _ => m["failed_at_bytes"].as_u64().or(m["peak_bytes"].as_u64()),
            };
            Some((b, bytes?))
        })
        .collect();
    want.sort();
    want.dedup_by_key(|w| w.0);
    let want: Vec<u64> = want.iter().map(|w| w.1).collect();
    assert!(want.len() >= 2, "{want:?}");
    let close = |a: &[u64], b: &[u64]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.abs_diff(*y) <= 1)
    };
    assert!(
        close(&series[0], &want),
        "batch plot {:?} against the trials {want:?}",
        series[0]
    );
    let costs: Vec<u64> = r["modules"]["costs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["peak_bytes"].as_u64())
        .collect();
    assert!(
        series.iter().any(|s| s.len() == costs.len()),
        "a bar per module: {costs:?} in {series:?}"
    );
}

/// Developer detail (plain-bisection counts, 1-minimality) only with `--verbose`; the saved minimal
/// config is named after its experiment's journal and has every key written out.
#[test]
fn verbose_detail_and_a_minimal_config_keyed_by_experiment() {
    let (o, r, d) = fake_forum("bisect", "terse", &[]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        !t.contains("plain bisection") && !t.contains("1-minimal"),
        "{t}"
    );
    let min = r["minimal_failing"]["file"].as_str().unwrap().to_string();
    assert!(
        min.ends_with("-minimal-failing.toml") && min.contains("forum-r101-os8-1024-"),
        "{min}"
    );
    let saved = std::fs::read_to_string(d.join(&min)).or_else(|_| std::fs::read_to_string(&min));
    let saved = saved.unwrap();
    for key in [
        "steps = ",
        "aspp_rates = ",
        "identity = ",
        "memory_limit = ",
    ] {
        assert!(saved.contains(key), "{key} in {saved}");
    }
    let (o, _, _) = fake_forum("bisect", "verbose", &["--verbose"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("plain bisection") && t.contains("(1-minimal)"),
        "{t}"
    );
}

/// `completions` writes a script for each shell from the parser's own definition: every command
/// and flag a user types, `--estimate` among them.
#[test]
fn completions_for_bash_zsh_and_fish() {
    let d = tmp("completions");
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&["completions", shell], &d);
        assert_eq!(code(&o), 0, "{shell}: {}", text(&o));
        let t = String::from_utf8_lossy(&o.stdout);
        for word in ["bisect", "inspect", "estimate", "ceiling-by"] {
            assert!(t.contains(word), "{shell} completions lack {word}");
        }
    }
    // Bash completes a subcommand's options (each case is named as its loop names it), and
    // never offers the internal `__trial`.
    let o = run(&["completions", "bash"], &d);
    let script = d.join("c.bash");
    std::fs::write(&script, &o.stdout).unwrap();
    let probe = format!(
        "source '{}'; COMP_WORDS=(oom-bisect bisect --con); COMP_CWORD=2; \
         _oom__bisect oom-bisect --con bisect; echo \"${{COMPREPLY[@]}}\"; \
         COMP_WORDS=(oom-bisect ''); COMP_CWORD=1; _oom__bisect oom-bisect '' oom-bisect; \
         echo \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &probe])
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    let mut lines = t.lines();
    assert!(lines.next().unwrap_or("").contains("--config"), "{t}");
    let top = lines.next().unwrap_or("");
    assert!(top.contains("bisect") && !top.contains("__trial"), "{t}");
}

/// `inspect` takes the ceiling flags, and a decimal size near a card's is questioned.
#[test]
fn inspect_takes_a_ceiling_and_questions_decimal_units() {
    let d = tmp("inspect-ceiling");
    let config = root().join("configs/quickstart.toml");
    let config = config.to_str().unwrap();
    let o = run(
        &["inspect", "--config", config, "--memory-limit", "24GB"],
        &d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("Against the ceiling of 22.35 GiB"), "{t}");
    assert!(
        t.contains("write --gpu with its name") && t.contains("rtx3090 (23.70 GiB)"),
        "{t}"
    );
    let o = run(&["inspect", "--config", config, "--gpu", "rtx3090"], &d);
    assert!(
        text(&o).contains("Against the ceiling of 23.70 GiB"),
        "{}",
        text(&o)
    );
}

/// `inspect --json` carries the stamp of every JSON output, the exact parameter count, and an
/// estimate whose parts add up to its peak.
#[test]
fn inspect_writes_stamped_json() {
    let d = tmp("inspect-json");
    let config = root().join("configs/deeplabv3plus-r50-os8.toml");
    let json = d.join("inspect.json");
    let o = run(
        &[
            "inspect",
            "--config",
            config.to_str().unwrap(),
            "--memory-limit",
            "24GiB",
            "--json",
            json.to_str().unwrap(),
        ],
        &d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["tool"], "oom-bisect");
    assert_eq!(v["memory_model"], "pytorch");
    assert_eq!(v["params"], 40_352_181);
    assert_eq!(v["ceiling_bytes"], 24u64 << 30);
    let e = &v["estimate"];
    let parts: u64 = [
        "weights",
        "gradients",
        "optimizer_state",
        "batch",
        "activations",
    ]
    .iter()
    .map(|k| e[format!("{k}_bytes")].as_u64().unwrap())
    .sum();
    assert_eq!(parts, e["peak_bytes"].as_u64().unwrap());
    assert!(v["modules"].as_array().unwrap().len() > 20);
    assert!(v["stages"][0]["shape"].is_array());
}

/// The timing switches (`--guesses`, `--spares`, or their variables `OOM_BISECT_GUESSES`,
/// `OOM_BISECT_SPARES`) take `on` or `off`; anything else is refused before any trial, naming the
/// flag and what it takes.
#[test]
fn a_bad_timing_switch_is_refused_by_name() {
    let d = tmp("overrides");
    let cfg = root().join("configs/quickstart.toml");
    for (flag, var) in [
        ("--guesses", "OOM_BISECT_GUESSES"),
        ("--spares", "OOM_BISECT_SPARES"),
    ] {
        let o = Command::new(BIN)
            .args(["bisect", "--config", cfg.to_str().unwrap(), "--fake-trials"])
            .args(["--axes", "batch", "--fresh", "-q"])
            .current_dir(&d)
            .env(var, "sometimes")
            .output()
            .unwrap();
        assert_eq!(code(&o), 2, "{var}: {}", text(&o));
        assert!(text(&o).contains(flag), "{var}: {}", text(&o));
        assert!(text(&o).contains("on, off"), "{var}: {}", text(&o));
    }
}

/// Every environment variable the code reads (`env::var`, `var_os`, a clap `env =`, a `*_ENV`
/// constant) is in the guide's table of settings, so that no setting hides in the environment.
#[test]
fn every_environment_variable_read_is_in_the_guide() {
    let guide = std::fs::read_to_string(root().join("docs/guide.md")).unwrap();
    let mut files = vec![root().join("crates")];
    let mut missing = vec![];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for var in env_names(&text) {
            if !guide.contains(&format!("`{var}`")) {
                missing.push(format!("{var} ({})", p.display()));
            }
        }
    }
    assert!(missing.is_empty(), "not in docs/guide.md: {missing:?}");
}

/// The names of environment variables `text` reads or declares.
fn env_names(text: &str) -> Vec<String> {
    let mut out = vec![];
    for (i, _) in text.match_indices('"') {
        let before = &text[..i];
        let reads = ["env::var(", "var_os(", "env = ", "_ENV: &str = "]
            .iter()
            .any(|w| before.ends_with(w));
        let name: String = text[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if reads && name.len() > 2 && text[i + 1 + name.len()..].starts_with('"') {
            out.push(name);
        }
    }
    out
}

/// A CPU trial's stream is the same in every process (burn's autodiff visits its graph in a fixed
/// order: vendor/README.md; the host's small bookkeeping requests are not noted: `alloc.rs`), so
/// its replay, and so its need, repeats to the byte, two trials at once included: what makes the
/// README's report a fresh run's.
#[test]
fn a_cpu_trial_needs_the_same_in_every_run() {
    let d = tmp("repeat");
    let cfg = root().join("configs/quickstart.toml");
    let need = |n: u32| {
        let j = d.join(format!("t{n}.json"));
        // Output stride 16: before the fixed order, its need moved by 2 MiB from run to run.
        let args = [
            "trial",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "cpu",
        ];
        let set = [
            "--set",
            "model.output_stride=16",
            "--json",
            j.to_str().unwrap(),
        ];
        let o = run(&[&args[..], &set[..]].concat(), &d);
        assert_eq!(code(&o), 0, "{}", text(&o));
        let r = json(&j);
        let a = &r["allocator"];
        (
            a["need_bytes"].as_u64().unwrap(),
            a["allocated_bytes"].as_u64().unwrap(),
        )
    };
    let alone = need(0);
    let together = std::thread::scope(|t| {
        let other = t.spawn(|| need(1));
        (need(2), other.join().unwrap())
    });
    assert_eq!((alone, alone), together);
}

/// A trial's weights and batch come from one seed: under mixed f16 the loss scaler skips a step
/// whose gradients overflow, so its memory depends on the values; two runs give the same losses and
/// the same need.
#[test]
fn a_mixed_f16_trial_repeats_its_losses_and_need() {
    let d = tmp("repeat-f16");
    let cfg = write(&d, "c.toml", TINY);
    let run_once = |n: u32| {
        let j = d.join(format!("t{n}.json"));
        let args = [
            "trial",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "cpu",
            "--set",
            "train.precision=\"mixed-f16\"",
            "--json",
            j.to_str().unwrap(),
        ];
        let o = run(&args, &d);
        assert_eq!(code(&o), 0, "{}", text(&o));
        let r = json(&j);
        let losses: Vec<Value> = r["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["loss"].clone())
            .collect();
        (losses, r["allocator"]["need_bytes"].as_u64().unwrap())
    };
    assert_eq!(run_once(0), run_once(1));
}
