//! `--exec`: a user's own command as the trial, on the CPU, with a stdlib-only Python trainer
//! (`tests/exec/toy_trainer.py`) that fails the way PyTorch and TensorFlow do. Each outcome is
//! classified from how the command ended and what it printed, never from its cooperation; a
//! diagnosis through it finds the boundary the command itself has, and a re-run repeats nothing.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Needs 116,391,936 bytes in the toy's terms (`--need`): fits under 200 MiB, not under 100 MiB.
const TOY: &str = r#"
[model]
backbone = "resnet18"
output_stride = 16
classes = 4
aspp_channels = 32
attention_heads = 2

[data]
batch = 8
size = [128, 128]
"#;
const TOY_NEED: u64 = 116_391_936;

fn trainer() -> String {
    let p = root().join("tests/exec/toy_trainer.py");
    assert!(
        Command::new("python3").arg("--version").output().is_ok(),
        "these tests need python3 (3.11 or later, for tomllib)"
    );
    format!("python3 {} {{config}}", p.display())
}

/// `oom-bisect ARGS --exec TRAINER` in `dir` with `env`.
fn run_exec(dir: &Path, args: &[&str], command: &str, env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--backend", "cpu", "--exec", command])
        .current_dir(dir)
        .env("OOM_BISECT_KERNEL_CACHE", "")
        .envs(env.iter().copied())
        .output()
        .expect("run oom-bisect")
}

/// One `trial --exec` of the toy config under `limit` with `TOY_MODE=mode`: output and JSON.
fn toy_trial(name: &str, limit: &str, mode: &str) -> (Output, Value) {
    let d = tmp(name);
    let cfg = write(&d, "toy.toml", TOY);
    let j = d.join("t.json");
    let args = [
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        limit,
        "--json",
        j.to_str().unwrap(),
    ];
    let o = run_exec(&d, &args, &trainer(), &[("TOY_MODE", mode)]);
    (o, json_if_written(&j))
}

#[test]
fn a_command_that_ends_well_fits_with_its_peak() {
    let (o, r) = toy_trial("fits", "200MiB", "");
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(r["outcome"], "fits");
    let peak = r["peak_bytes"].as_u64().unwrap();
    assert!((TOY_NEED..TOY_NEED + (200 << 20)).contains(&peak), "{peak}");
    assert!(
        r["peak_source"].as_str().unwrap().contains("resident"),
        "{r}"
    );
    assert!(text(&o).contains("setup"), "its stage lines are readings");
    // Its finished step is a step, and what it left held is what does not grow with the batch
    // (resnet18's 12 MiB of weights, three copies with SGD's state): the search predicts from it.
    assert_eq!(r["steps"][0]["loss"], 0.5, "{r}");
    assert_eq!(r["base_bytes"].as_u64(), Some(36 << 20), "{r}");
    // Its own figure wins over what was sampled.
    let (o, r) = toy_trial("own-peak", "200MiB", "own-peak");
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(r["peak_bytes"].as_u64(), Some(TOY_NEED));
    assert_eq!(r["peak_source"], "the command's own figure");
}

/// The `.pyc` files under `dir`, at any depth.
fn bytecode_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.path() {
            p if p.is_dir() => bytecode_files(&p),
            p => usize::from(p.extension().is_some_and(|x| x == "pyc")),
        })
        .sum()
}

#[test]
fn a_command_keeps_its_python_bytecode_in_the_cache_even_where_told_not_to() {
    // A container's PYTHONDONTWRITEBYTECODE made every trial's process compile its imports anew.
    let d = tmp("bytecode");
    let cfg = write(&d, "toy.toml", TOY);
    let (kc, mine) = (d.join("kc"), d.join("mine"));
    let (kc_arg, mine_arg) = (kc.to_str().unwrap(), mine.to_str().unwrap());
    let trial = |cache: &str, prefix: &str| {
        let args = ["trial", "--config", cfg.to_str().unwrap()];
        let env = [
            ("PYTHONDONTWRITEBYTECODE", "1"),
            ("OOM_BISECT_KERNEL_CACHE", cache),
            ("PYTHONPYCACHEPREFIX", prefix),
        ];
        let o = run_exec(&d, &args, &trainer(), &env);
        assert_eq!(code(&o), 0, "{}", text(&o));
    };
    // An empty PYTHONPYCACHEPREFIX names no place, for Python as for us.
    trial(kc_arg, "");
    let ours = kc.join("python-bytecode");
    assert!(
        bytecode_files(&ours) > 0,
        "no bytecode in {}",
        ours.display()
    );
    // A place the user names is theirs: nothing more goes to ours.
    std::fs::remove_dir_all(&ours).unwrap();
    trial(kc_arg, mine_arg);
    assert_eq!(bytecode_files(&ours), 0);
    assert_eq!(
        bytecode_files(&mine),
        0,
        "the user's own setting still holds"
    );
    // Without a kernel cache (empty), the command's environment is its own.
    trial("", "");
    assert_eq!(bytecode_files(&ours), 0);
}

#[test]
fn out_of_memory_messages_are_ooms_with_where_and_how_much() {
    let (o, r) = toy_trial("oom", "100MiB", "");
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert_eq!(r["outcome"], "oom");
    let oom = &r["oom"];
    assert_eq!(
        oom["stage"], "backbone.layer4",
        "the last stage it named: {oom}"
    );
    assert_eq!(oom["in_use_bytes"].as_u64(), Some(100 << 20), "{oom}");
    assert_eq!(oom["bytes"].as_u64(), Some(11 << 20), "11.00 MiB: {oom}");
    let (o, r) = toy_trial("tf", "100MiB", "tf");
    assert_eq!((code(&o), r["outcome"].as_str()), (3, Some("oom")), "{r}");
    // A command that met an out-of-memory and recovered (a batch-size finder) fits.
    let (o, r) = toy_trial("recovered", "100MiB", "oom-exit0");
    assert_eq!((code(&o), r["outcome"].as_str()), (0, Some("fits")), "{r}");
}

#[test]
fn other_failures_are_errors_never_ooms() {
    let (o, r) = toy_trial("error", "200MiB", "error");
    assert_eq!(code(&o), 125, "{}", text(&o));
    assert_eq!(r["outcome"], "error");
    assert!(
        r["error"].as_str().unwrap().contains("exited with code 1"),
        "{r}"
    );
    assert!(r["error"].as_str().unwrap().contains("ValueError"), "{r}");
    // Killed, but not by the kernel's OOM killer.
    let (o, r) = toy_trial("killed", "200MiB", "killed");
    assert_eq!(code(&o), 125, "{}", text(&o));
    assert!(r["error"].as_str().unwrap().contains("signal 9"), "{r}");
}

/// A caught out-of-memory a program logged on stdout reaches the holder when the buffer is
/// flushed at exit, after the traceback of what really failed: the failure is read stream by
/// stream, so the traceback's error is the verdict, not the logged line.
#[test]
fn a_logged_out_of_memory_flushed_after_a_traceback_is_not_the_failure() {
    let d = tmp("flushed-oom");
    let cfg = write(&d, "toy.toml", TOY);
    let j = d.join("t.json");
    let command = "python3 -c \"print('torch.OutOfMemoryError: CUDA out of memory. Tried to \
                   allocate 2.00 GiB (caught, batch halved)'); raise ValueError('labels out of \
                   range')\"";
    let args = [
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        "200MiB",
        "--json",
        j.to_str().unwrap(),
    ];
    let o = run_exec(&d, &args, command, &[]);
    assert_eq!(code(&o), 125, "{}", text(&o));
    let r = json(&j);
    assert_eq!(r["outcome"], "error", "{r}");
    assert!(r["error"].as_str().unwrap().contains("ValueError"), "{r}");
}

/// Whether `pid` runs: it exists and is not a zombie waiting for its new parent to reap it.
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    matches!(state, Some(s) if s != "Z" && s != "X")
}

#[test]
fn a_command_past_its_time_dies_with_everything_it_started() {
    let d = tmp("exec-timeout");
    let cfg = write(&d, "toy.toml", TOY);
    let pids = d.join("pids");
    let args = [
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--trial-timeout",
        "3",
    ];
    let env = [
        ("TOY_MODE", "sleep"),
        ("TOY_PIDFILE", pids.to_str().unwrap()),
    ];
    let o = run_exec(&d, &args, &trainer(), &env);
    assert_eq!(code(&o), 125, "{}", text(&o));
    assert!(text(&o).contains("TIMEOUT"), "{}", text(&o));
    let text = std::fs::read_to_string(&pids).expect("the toy wrote its pids");
    std::thread::sleep(std::time::Duration::from_millis(300));
    for pid in text.split_whitespace().map(|p| p.parse::<i32>().unwrap()) {
        assert!(!alive(pid), "process {pid} outlived its trial");
    }
}

#[test]
fn the_command_gets_the_config_the_ceiling_and_every_override() {
    let d = tmp("exec-env");
    let cfg = write(&d, "toy.toml", TOY);
    let check = "test \"$OOM_BISECT_MEMORY_LIMIT\" = 209715200 && cmp -s {config} \
                 \"$OOM_BISECT_CONFIG\" && grep -q '^batch = 3$' {config} && grep -q \
                 '^output_stride = 8$' \"$OOM_BISECT_CONFIG\"";
    let args = [
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        "200MiB",
        "--set",
        "data.batch=3",
        "--set",
        "model.output_stride=8",
    ];
    let o = run_exec(&d, &args, check, &[]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let o = run_exec(&d, &args, "exit 7", &[]);
    assert_eq!(code(&o), 125, "{}", text(&o));
    assert!(text(&o).contains("exited with code 7"), "{}", text(&o));
    let o = run_exec(&d, &args, " ", &[]);
    assert_eq!(code(&o), 202, "{}", text(&o));
    assert!(text(&o).contains("--exec"), "{}", text(&o));
}

/// The toy's own need for the toy config at `batch`, from the toy itself.
fn need_at(dir: &Path, batch: usize) -> u64 {
    let cfg = write(
        dir,
        &format!("b{batch}.toml"),
        &TOY.replace("batch = 8", &format!("batch = {batch}")),
    );
    let p = root().join("tests/exec/toy_trainer.py");
    let o = Command::new("python3")
        .arg(p)
        .arg(&cfg)
        .arg("--need")
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

fn journal_lines(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p: &PathBuf| p.extension().is_some_and(|x| x == "jsonl"))
        .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
        .sum()
}

#[test]
fn a_diagnosis_through_a_command_finds_its_boundary_and_resumes() {
    let d = tmp("exec-bisect");
    let cfg = write(&d, "toy.toml", TOY);
    let (journal, j) = (d.join("j"), d.join("r.json"));
    let limit: u64 = 80 << 20;
    let limit_arg = format!("{limit}B");
    let args = [
        "bisect",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        &limit_arg,
        "--axes",
        "batch,fixes",
        "-q",
        "--journal",
        journal.to_str().unwrap(),
        "--json",
        j.to_str().unwrap(),
    ];
    let o = run_exec(&d, &args, &trainer(), &[]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(
        text(&o).contains("every trial runs your command"),
        "{}",
        text(&o)
    );
    let r = json(&j);
    assert_eq!(batch_boundary(&r), toy_boundary(&d, limit));
    let before = journal_lines(&journal);
    let o = run_exec(&d, &args, &trainer(), &[]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(
        journal_lines(&journal),
        before,
        "a resumed run repeats no trial"
    );
    assert_eq!(json(&j)["boundaries"], r["boundaries"]);
}

/// The PyTorch reference builds the burn model: the same module ids with the same parameters
/// (`tools/pytorch/parity.py`). Only where PyTorch is installed; it says so when it is not.
#[test]
fn the_pytorch_reference_is_the_burn_model() {
    let torch = Command::new("python3")
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    let why = "PyTorch is not installed here (tools/pytorch/parity.py needs it)";
    if !can_run("PYTORCH", torch, why) {
        return;
    }
    let o = Command::new("python3")
        .arg(root().join("tools/pytorch/parity.py"))
        .args(["--bin", BIN])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// On the CPU the ceiling is passed on to the command, not enforced, so any size is accepted, a
/// GPU's larger than this host included, and the command sees it.
#[test]
fn a_cpu_exec_takes_any_ceiling_and_passes_it_on() {
    let d = tmp("exec-any-ceiling");
    let cfg = write(&d, "toy.toml", TOY);
    let o = run_exec(
        &d,
        &[
            "trial",
            "--config",
            cfg.to_str().unwrap(),
            "--memory-limit",
            "4TiB",
        ],
        "python3 -c \"import os; print(os.environ['OOM_BISECT_MEMORY_LIMIT'])\"",
        &[],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("passed on to your command"), "{t}");
    assert!(t.contains("4.00 TiB") || t.contains("4096.00 GiB"), "{t}");
}

/// Who holds the ceiling is checked before any trial: `command` only for a command, `cap` never
/// for one (the allocator's cap cannot reach another process), each with what to use instead.
#[test]
fn only_a_command_holds_its_own_ceiling() {
    let d = tmp("exec-ceiling-by");
    let cfg = write(&d, "toy.toml", TOY);
    let cfg = cfg.to_str().unwrap();
    let args = |by| {
        [
            "trial",
            "--config",
            cfg,
            "--memory-limit",
            "200MiB",
            "--ceiling-by",
            by,
        ]
    };
    let own = Command::new(BIN)
        .args(args("command"))
        .args(["--backend", "cpu"])
        .output()
        .unwrap();
    // `trial` speaks `git bisect run`: 200 + the usage code stops it.
    assert_eq!(code(&own), 202, "{}", text(&own));
    assert!(text(&own).contains("`ballast` or `cap`"), "{}", text(&own));
    let capped = run_exec(&d, &args("cap"), &trainer(), &[]);
    assert_eq!(code(&capped), 202, "{}", text(&capped));
    assert!(
        text(&capped).contains("--ceiling-by command"),
        "{}",
        text(&capped)
    );
    // On the CPU nothing is enforced either way: the command hears its ceiling.
    let cpu = run_exec(&d, &args("command"), &trainer(), &[]);
    assert_eq!(code(&cpu), 0, "{}", text(&cpu));
}

/// One served trial, as the toy trainer writes it: the process, how many trials it has served
/// (this one included), the batch.
type ServedTrial = (String, usize, usize);

/// `bisect --serve` of the toy config on batch under 80 MiB, `--jobs jobs`, with `TOY_MODE=mode`
/// and `OOM_BISECT_SPARES=spares`: the output, the JSON, and the served trials in the order they
/// ran.
fn served_bisect(
    name: &str,
    mode: &str,
    jobs: &str,
    spares: &str,
) -> (Output, Value, Vec<ServedTrial>) {
    let d = tmp(name);
    let cfg = write(&d, "toy.toml", TOY);
    let (j, pids, journal) = (d.join("r.json"), d.join("served"), d.join("j"));
    let args = [
        "bisect",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        "83886080B",
        "--axes",
        "batch",
        "--jobs",
        jobs,
        "--serve",
        "-q",
        "--fresh",
        "--journal",
        journal.to_str().unwrap(),
        "--json",
        j.to_str().unwrap(),
    ];
    let env = [
        ("TOY_MODE", mode),
        ("TOY_SERVED", pids.to_str().unwrap()),
        ("OOM_BISECT_SPARES", spares),
    ];
    let o = run_exec(&d, &args, &trainer(), &env);
    let served = std::fs::read_to_string(&pids).unwrap_or_default();
    let served = served
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (
                w[0].to_string(),
                w[1].parse().unwrap(),
                w[2].parse().unwrap(),
            )
        })
        .collect();
    (o, json_if_written(&j), served)
}

/// The batch boundary of a report: (last fit, first OOM) as `data.batch=N`.
fn batch_boundary(r: &Value) -> (String, String) {
    let b = r["boundaries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["axis"] == "batch" && b["capacity"] == false)
        .expect("a batch boundary");
    assert_eq!(b["kind"], "boundary", "{b}");
    let value = |p: &Value| p["candidate"][0].as_str().unwrap().to_string();
    (value(&b["last_fit"]), value(&b["first_oom"]))
}

/// The toy config's batch boundary under `limit`, from the toy's own need (brute force).
fn toy_boundary(dir: &Path, limit: u64) -> (String, String) {
    let fits = (1..=8).filter(|b| need_at(dir, *b) <= limit).max().unwrap();
    (
        format!("data.batch={fits}"),
        format!("data.batch={}", fits + 1),
    )
}

/// A served command answers several trials in one process, and the boundary it finds is the one
/// of a command started for every trial; each confirmation is served too, as the first trial of
/// a command of its own (a command that serves may not run a trial any other way).
#[test]
fn a_served_command_answers_trials_in_one_process_and_each_rerun_in_a_fresh_one() {
    let (o, r, served) = served_bisect("served", "", "1", "off");
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(
        batch_boundary(&r),
        toy_boundary(&tmp("served-need"), 80 << 20)
    );
    let list = r["trials"]["list"].as_array().unwrap();
    let reruns = list.iter().filter(|t| t["attempt"] != 0).count();
    assert!(reruns >= 2, "a confirmation of both sides: {reruns}");
    assert_eq!(served.len(), list.len(), "every trial served: {served:?}");
    for (i, (_, n, batch)) in served.iter().enumerate() {
        let again = served[..i].iter().any(|(_, _, b)| b == batch);
        assert!(
            !again || *n == 1,
            "re-run {i} of {batch} not fresh: {served:?}"
        );
    }
    // One worker: the re-runs in between stop the served process, the next trial starts another.
    assert!(
        served.iter().any(|(_, n, _)| *n > 1),
        "one process served several: {served:?}"
    );
}

/// Where a served worker keeps a spare (a command started ahead that has run no trial), every
/// re-run is its command's first trial, as in a process of its own, but served; the boundary is
/// the command's own.
#[test]
fn a_spare_answers_each_rerun_as_its_first_trial() {
    let (o, r, served) = served_bisect("served-spares", "", "1", "on");
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(
        batch_boundary(&r),
        toy_boundary(&tmp("served-spares-need"), 80 << 20)
    );
    let list = r["trials"]["list"].as_array().unwrap();
    let reruns = list.iter().filter(|t| t["attempt"] != 0).count();
    assert!(reruns >= 2, "a confirmation of both sides: {reruns}");
    assert_eq!(served.len(), list.len(), "every trial served: {served:?}");
    // One worker runs them in turn: a batch's later runs are re-runs, each a command's first.
    for (i, (_, n, batch)) in served.iter().enumerate() {
        let again = served[..i].iter().any(|(_, _, b)| b == batch);
        assert!(
            !again || *n == 1,
            "re-run {i} of {batch} not fresh: {served:?}"
        );
    }
    assert!(
        served.iter().any(|(_, n, _)| *n > 1),
        "first runs served in one process: {served:?}"
    );
}

/// A served command that dies in the trial after an out-of-memory (without a word) is an error,
/// never that earlier out-of-memory again; the retry, in a fresh process, measures it, so the
/// boundary is still the command's own.
#[test]
fn a_served_command_dying_after_an_oom_is_an_error_not_that_oom() {
    let (o, r, _) = served_bisect("served-dies", "die-after-oom", "1", "off");
    assert_eq!(code(&o), 0, "{}", text(&o));
    let list = r["trials"]["list"].as_array().unwrap();
    let gave_up: Vec<&Value> = list
        .iter()
        .filter(|t| {
            t["measurement"]["note"]
                .as_str()
                .unwrap_or("")
                .contains("giving up")
        })
        .collect();
    assert!(!gave_up.is_empty(), "{}", r["trials"]);
    for t in gave_up {
        assert_eq!(t["measurement"]["outcome"], "inconclusive", "{t}");
    }
    let want = toy_boundary(&tmp("served-dies-need"), 80 << 20);
    assert_eq!(batch_boundary(&r), want);
}

/// `trial --serve` hands the command its one trial as a served one (a check of the command's side
/// of the protocol): a fit, and an out-of-memory told by the message of its `trial_done`.
#[test]
fn a_served_trial_is_classified_from_its_trial_done() {
    for (limit, want, code_want) in [("200MiB", "fits", 0), ("100MiB", "oom", 3)] {
        let d = tmp(&format!("served-trial-{want}"));
        let cfg = write(&d, "toy.toml", TOY);
        let (j, pids) = (d.join("t.json"), d.join("served"));
        let args = [
            "trial",
            "--config",
            cfg.to_str().unwrap(),
            "--memory-limit",
            limit,
        ];
        let args = [&args[..], &["--serve", "--json", j.to_str().unwrap()]].concat();
        let o = run_exec(
            &d,
            &args,
            &trainer(),
            &[("TOY_SERVED", pids.to_str().unwrap())],
        );
        assert_eq!(code(&o), code_want, "{}", text(&o));
        assert_eq!(json(&j)["outcome"], want, "{}", text(&o));
        let served = std::fs::read_to_string(&pids).unwrap_or_default();
        assert_eq!(served.lines().count(), 1, "served once: {served:?}");
    }
}

/// A stand-in for PyTorch: `torch.cuda.memory` records and hands back the allocator trace in
/// `_events` (`events`: Python that starts the list), named as PyTorch names its entries (an
/// out-of-memory's has `device_free` where the others have `addr`). The trace is recorded through
/// the sitecustomize `--exec` puts first on the command's PYTHONPATH, without a change to the
/// command.
fn stand_in_torch(events: &str) -> String {
    format!(
        r#"
MIB = 1 << 20
_events = {events}

class _Memory:
    recording = None

    def _record_memory_history(self, **how):
        _Memory.recording = how

    def _snapshot(self):
        assert _Memory.recording, "recording was turned on at import"
        return {{"device_traces": [[dict(action=a, size=s, stream=0,
                                         **{{"device_free" if a == "oom" else "addr": x}})
                                    for a, x, s in _events]]}}

class cuda:
    memory = _Memory()

    @staticmethod
    def is_available():
        return True
"#
    )
}

/// A fixed trace: 30 MiB, 12 MiB, the 30 MiB freed, 31 MiB (PyTorch's allocator needs a 44 MiB
/// cap for it, 74 MiB without one).
const FIXED_TRACE: &str = r#"[("alloc", 1, 30 * MIB), ("alloc", 2, 12 * MIB),
           ("free_completed", 1, 30 * MIB), ("alloc", 3, 31 * MIB)]"#;

/// `trial --exec` of a command that imports the stand-in torch, under `limit`, with `env` in its
/// environment.
fn traced_trial(name: &str, limit: &str, env: &[(&str, &str)]) -> (Output, Value) {
    let d = tmp(name);
    std::fs::create_dir_all(d.join("fake/torch")).unwrap();
    write(
        &d.join("fake/torch"),
        "__init__.py",
        &stand_in_torch(FIXED_TRACE),
    );
    let cfg = write(&d, "toy.toml", TOY);
    let j = d.join("t.json");
    let fake = d.join("fake");
    let args = [
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        limit,
    ];
    let args = [&args[..], &["--json", j.to_str().unwrap()]].concat();
    let path = [("PYTHONPATH", fake.to_str().unwrap())];
    let o = run_exec(
        &d,
        &args,
        "python3 -c 'import torch'",
        &[&path[..], env].concat(),
    );
    (o, json_if_written(&j))
}

#[test]
fn a_pytorch_commands_allocator_trace_is_replayed_without_touching_its_script() {
    let (o, r) = traced_trial("traced-fits", "44MiB", &[]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let a = &r["allocator"];
    assert_eq!(a["need_bytes"], 44u64 << 20, "{r}");
    assert_eq!(a["reserved_bytes"], 74u64 << 20);
    assert_eq!(
        (a["retries"].as_u64(), a["events"].as_u64()),
        (Some(1), Some(4))
    );
    assert!(a["source"].as_str().unwrap().contains("trace"), "{a}");
    assert!(text(&o).contains("needs 44.0 MiB"), "{}", text(&o));
    // A MiB less: the command itself ended well (the CPU enforces nothing), the replay says OOM.
    let (o, r) = traced_trial("traced-oom", "43MiB", &[]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert_eq!(r["outcome"], "oom");
    assert!(
        r["oom"]["message"].as_str().unwrap().contains("replaying"),
        "{r}"
    );
}

/// The replay follows the command's allocator settings: under `expandable_segments:True` the same
/// trace needs 72 MiB (pages of 20 MiB; the third request's own 32 MiB segment checked against what
/// stays mapped), and a setting it does not model leaves the trace unreplayed (the holder says why
/// on its stderr): the command's own readings stand.
#[test]
fn a_trace_is_replayed_as_the_commands_allocator_is_configured() {
    let conf = "PYTORCH_CUDA_ALLOC_CONF";
    let (o, r) = traced_trial(
        "traced-expandable",
        "80MiB",
        &[(conf, "expandable_segments:True")],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let a = &r["allocator"];
    assert_eq!(a["need_bytes"], 72u64 << 20, "{r}");
    assert_eq!(a["expandable_need_bytes"], 72u64 << 20, "{r}");
    assert!(a["source"].as_str().unwrap().contains("expandable"), "{a}");
    assert_eq!(a["expandable_segments"], true);
    let (o, r) = traced_trial("traced-default", "80MiB", &[]);
    assert_eq!(r["allocator"]["need_bytes"], 44u64 << 20, "{}", text(&o));
    assert_eq!(r["allocator"]["expandable_need_bytes"], 72u64 << 20);
    let (o, r) = traced_trial(
        "traced-unmodelled",
        "80MiB",
        &[(conf, "max_split_size_mb:128")],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(r["allocator"].is_null(), "{r}");
}

/// A served bisect over `command` (the toy config under 80 MiB, batch axis): its output and JSON.
fn served_command_bisect(name: &str, command: &str) -> (Output, Value) {
    command_bisect(name, command, &["--serve"], &[])
}

/// The toy config's batch axis bisected through `command` with `serve` (the `--serve` flags) and
/// `env` in its environment.
fn command_bisect(
    name: &str,
    command: &str,
    serve: &[&str],
    env: &[(&str, &str)],
) -> (Output, Value) {
    let d = tmp(name);
    let cfg = write(&d, "toy.toml", TOY);
    let (j, journal) = (d.join("r.json"), d.join("j"));
    let args = [
        "bisect",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        "80MiB",
        "--axes",
        "batch",
        "--jobs",
        "1",
        "-q",
        "--fresh",
        "--journal",
        journal.to_str().unwrap(),
        "--json",
        j.to_str().unwrap(),
    ];
    let o = run_exec(&d, &[&args[..], serve].concat(), command, env);
    (o, json_if_written(&j))
}

/// Without `--serve`, a command that serves is served (found out from its first answer) and one
/// that does not runs each trial in a process of its own (found out from its first trial, whose
/// exit is its verdict); both find the toy's own boundary, and the report says which path ran. A
/// command that would serve but has its input detached (`</dev/null`, `srun --input=none`) reads
/// the end of its input and exits 0 having trained nothing: that is no fit, and its trials run
/// in processes of their own.
#[test]
fn whether_a_command_serves_is_found_out_from_its_first_trial() {
    let want = toy_boundary(&tmp("auto-need"), 80 << 20);
    let not_serving = format!("OOM_BISECT_SERVE=0 {}", trainer());
    let detached = format!("{} </dev/null", trainer());
    for (name, command, flags) in [
        ("auto-serves", trainer(), &[][..]),
        ("auto-alone", not_serving.clone(), &[][..]),
        ("auto-off", trainer(), &["--serve", "off"][..]),
        ("auto-detached", detached.clone(), &[][..]),
    ] {
        let (o, r) = command_bisect(name, &command, flags, &[]);
        assert_eq!(code(&o), 0, "{name}: {}", text(&o));
        assert_eq!(batch_boundary(&r), want, "{name}");
        let said = text(&o).contains("your command (served:");
        assert_eq!(said, name == "auto-serves", "{name}: {}", text(&o));
    }
}

/// An answer nobody asked for is never a fit: a command that says `trial_done` before reading its
/// request (even naming an id) breaks the protocol, and the trial is an error.
#[test]
fn an_answer_before_its_request_is_an_error_never_a_fit() {
    let spoof = r#"echo '{"oom_bisect":{"trial_done":"fits","id":"0000"}}'"#;
    let d = tmp("served-spoof");
    let cfg = write(&d, "toy.toml", TOY);
    let j = d.join("t.json");
    let args = [
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        "100MiB",
    ];
    let args = [&args[..], &["--serve", "--json", j.to_str().unwrap()]].concat();
    let o = run_exec(&d, &args, &format!("{spoof}; exec {}", trainer()), &[]);
    assert_eq!(code(&o), 125, "{}", text(&o));
    let r = json(&j);
    assert_eq!(r["outcome"], "error", "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("served protocol"),
        "{r}"
    );
}

/// Each answer counts once: a command that prints each answer twice, and one that serves one
/// trial then leaves (exit 0) with the next request unanswered, break the protocol on the next
/// trial, which is an error (retried in a fresh command), never a fit; the boundary is the
/// command's own.
#[test]
fn a_second_answer_or_none_is_an_error_and_the_boundary_holds() {
    let want = toy_boundary(&tmp("served-twice-need"), 80 << 20);
    let twice = format!("{} | sed -u '/trial_done/p'", trainer());
    let once = format!("{} | sed -u '/trial_done/q'", trainer());
    for (name, command) in [("served-twice", twice), ("served-once", once)] {
        let (o, r) = served_command_bisect(name, &command);
        assert_eq!(code(&o), 0, "{name}: {}", text(&o));
        assert_eq!(batch_boundary(&r), want, "{name}");
        let list = r["trials"]["list"].as_array().unwrap();
        let broken = list
            .iter()
            .filter(|t| {
                t["measurement"]["note"]
                    .as_str()
                    .unwrap_or("")
                    .contains("protocol")
            })
            .count();
        assert!(broken > 0, "{name}: {}", r["trials"]);
    }
}

/// A command that only serves (it reads requests until the end of its input, whatever its
/// command line) is served every trial, re-runs included: its boundary is stable.
#[test]
fn a_command_that_only_serves_gets_every_trial_served() {
    let command = format!("OOM_BISECT_SERVE=1 {}", trainer());
    let (o, r) = served_command_bisect("served-only", &command);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(
        batch_boundary(&r),
        toy_boundary(&tmp("served-only-need"), 80 << 20)
    );
}

/// On the CPU nothing holds a command to its ceiling: what its processes held is reported as that,
/// never as its need, and a need this machine cannot measure (it ran out of memory under the most
/// the machine could give, below the ceiling) is said to be unknown, never "more than" a figure
/// below the ceiling.
#[test]
fn a_cpu_command_resident_memory_is_never_called_its_need() {
    let d = tmp("exec-cpu-need");
    let cfg = write(&d, "toy.toml", TOY);
    let grow = "python3 -c \"import os; b = bytearray(150 << 20); \
        raise MemoryError if int(os.environ['OOM_BISECT_MEMORY_LIMIT']) < (150 << 20) else SystemExit(0)\"";
    let always = "echo MemoryError >&2; exit 1";
    for (limit, command, want) in [
        ("100MiB", grow, "resident in its processes"),
        ("100TiB", always, "how much it needs is not known"),
    ] {
        let args = [
            "bisect",
            "--config",
            cfg.to_str().unwrap(),
            "--memory-limit",
            limit,
        ];
        let args = [
            &args[..],
            &["--axes", "need", "--fresh", "-q", "--exec", command],
        ]
        .concat();
        let o = run(&args, &d);
        let t = text(&o);
        let verdict = t.lines().find(|l| l.starts_with("Verdict:")).unwrap_or("");
        assert!(
            verdict.contains(want) && !verdict.contains(": it needs"),
            "{t}"
        );
    }
}

/// A command on the stand-in torch whose trace grows trial by trial (from an empty `_events`) and
/// that serves: batch × 10 MiB allocated, more than 4 runs out of memory.
const GROWING_COMMAND: &str = r#"
import json, os, sys, tomllib, torch
def trial(path, n):
    b = tomllib.load(open(path, "rb"))["data"]["batch"]
    torch._events.append(("alloc", n, b * 10 * torch.MIB))
    if b > 4:
        torch._events.append(("oom", 0, 0))
        return "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"
    torch._events.append(("free_completed", n, b * 10 * torch.MIB))
if os.environ.get("OOM_BISECT_SERVE") == "1":
    for n, line in enumerate(sys.stdin):
        r = json.loads(line)
        failed = trial(r["config"], n)
        done = {"trial_done": "failed", "message": failed} if failed else {"trial_done": "fits"}
        print(json.dumps({"oom_bisect": {**done, "id": r["id"]}}), flush=True)
elif failed := trial(sys.argv[1], 0):
    sys.exit(failed)
"#;

/// Each served trial is replayed from its own part of the command's trace, also after a trial that
/// ran out of memory in the same process: every fit carries its need.
#[test]
fn a_served_pytorch_command_is_replayed_trial_by_trial() {
    let d = tmp("served-traced-command");
    std::fs::create_dir_all(d.join("fake/torch")).unwrap();
    write(&d.join("fake/torch"), "__init__.py", &stand_in_torch("[]"));
    let script = write(&d, "serve.py", GROWING_COMMAND);
    let command = format!("python3 {} {{config}}", script.display());
    let fake = d.join("fake");
    let env = [("PYTHONPATH", fake.to_str().unwrap())];
    let (o, r) = command_bisect("served-traced", &command, &[], &env);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(
        batch_boundary(&r),
        ("data.batch=4".into(), "data.batch=5".into())
    );
    let list = r["trials"]["list"].as_array().unwrap();
    assert!(
        list[0]["measurement"]["outcome"] == "oom",
        "{}",
        r["trials"]
    );
    for t in list
        .iter()
        .filter(|t| t["measurement"]["outcome"] == "fits")
    {
        let batch: u64 = t["candidate"]["sets"]["data.batch"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(t["measurement"]["need_bytes"], (batch * 10) << 20, "{t}");
    }
}
