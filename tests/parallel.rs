//! Trials in parallel: the report does not depend on `--jobs`, bad dispatch flags are refused with
//! exit 2, and inside a real Slurm allocation every trial runs as a job step through `--launcher`
//! with the same report as a local run (the one-node cluster of `tests/slurm/start.sh`).

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Fake trials take this long, so that trials really overlap.
const FAKE_SECONDS: &str = "0.05";

/// A fake diagnosis of the forum config with `extra` flags in `dir` (run through `prefix`, e.g.
/// `salloc`): the output, the report text with `dir` taken out, and the JSON without its timing.
fn diagnose(dir: &Path, prefix: &[&str], extra: &[&str]) -> (Output, String, Value) {
    let cfg = root().join("configs/forum-r101-os8-1024.toml");
    let (journal, j) = (dir.join("j"), dir.join("r.json"));
    let mut cmd = match prefix.split_first() {
        Some((p, rest)) => {
            let mut c = Command::new(p);
            c.args(rest).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    cmd.args(["bisect", "--config", cfg.to_str().unwrap(), "--fake-trials"])
        .args(["--backend", "cpu", "--memory-limit", "24GiB", "-q"])
        .args(["--journal", journal.to_str().unwrap()])
        .args(["--json", j.to_str().unwrap()])
        .args(extra)
        .current_dir(dir)
        .env("OOM_BISECT_KERNEL_CACHE", "")
        .env("OOM_BISECT_FAKE_TRIAL_SECONDS", FAKE_SECONDS);
    let o = cmd.output().expect("run oom-bisect");
    let d = dir.to_str().unwrap();
    let report = String::from_utf8_lossy(&o.stdout)
        .replace(d, "DIR")
        .lines()
        .filter(|l| !l.starts_with("Trials:"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut json: Value = std::fs::read_to_string(&j)
        .ok()
        .and_then(|t| serde_json::from_str(&t.replace(d, "DIR")).ok())
        .unwrap_or(Value::Null);
    if let Value::Object(m) = &mut json {
        m.remove("wall_seconds");
    }
    (o, report, json)
}

/// Journal records: (candidate, attempt, the trial's place).
fn journal(dir: &Path) -> Vec<Value> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir.join("j")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "jsonl") {
            for line in std::fs::read_to_string(&p).unwrap().lines() {
                out.push(serde_json::from_str(line).unwrap());
            }
        }
    }
    out
}

/// Three trials at once give the same report, JSON and trial list as one at a time; the extra
/// trials started ahead are journaled (nothing measured is lost) but never reported.
#[test]
fn the_report_does_not_depend_on_jobs() {
    let (a, b) = (tmp("jobs1"), tmp("jobs3"));
    let (o1, r1, j1) = diagnose(&a, &[], &["--jobs", "1"]);
    let (o3, r3, j3) = diagnose(&b, &[], &["--jobs", "3"]);
    assert_eq!(code(&o1), 0, "{}", text(&o1));
    assert_eq!(code(&o3), 0, "{}", text(&o3));
    assert!(r1.contains("Minimal failing"), "{r1}");
    assert_eq!(r1, r3);
    assert_eq!(j1, j3);
    let trials = j1["trials"]["list"].as_array().unwrap().len();
    assert_eq!(
        journal(&a).len(),
        trials,
        "one job runs only what it reports"
    );
    assert!(journal(&b).len() >= trials);
    let places: std::collections::BTreeSet<String> = journal(&b)
        .iter()
        .map(|e| {
            e["report"]["place"]["host"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert!(!places.contains(""), "every trial says where it ran");
}

#[test]
fn bad_dispatch_flags_are_refused_by_name() {
    let d = tmp("dispatch-flags");
    for (flags, says) in [
        (&["--devices", "0"][..], "--devices names CUDA devices"),
        (&["--jobs", "0"][..], "--jobs"),
        (&["--launcher", "srun --export='A B'"][..], "quotes"),
        (
            &["--launcher", "srun", "--devices", "0"][..],
            "do not go together",
        ),
    ] {
        let (o, _, _) = diagnose(&d, &[], flags);
        assert_eq!(code(&o), 2, "{flags:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{flags:?}: {}", text(&o));
    }
}

/// Whether this machine has a working Slurm; CI starts one (`tests/slurm/start.sh`) and sets
/// `OOM_BISECT_TEST_SLURM=1`, which makes a missing cluster a failure instead of a skip.
fn slurm_up() -> bool {
    let up = Command::new("srun")
        .args(["-N1", "-n1", "--immediate=10", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    let why = "no Slurm cluster here (bash tests/slurm/start.sh starts one)";
    can_run("SLURM", up, why)
}

/// Inside `salloc -N1 -n2`, `--jobs 2 --launcher 'srun -n1 --exact'` runs every trial as a job step
/// of the allocation (the step ids are in the journal), and the report equals the local one.
#[test]
fn a_slurm_allocation_runs_the_trials_as_job_steps() {
    if !slurm_up() {
        return;
    }
    let (local, slurm) = (tmp("slurm-local"), tmp("slurm"));
    let (_, want, want_json) = diagnose(&local, &[], &[]);
    let (o, got, got_json) = diagnose(
        &slurm,
        &["salloc", "-N1", "-n2", "--immediate=60"],
        &["--jobs", "2", "--launcher", "srun -n1 --exact"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(want, got);
    assert_eq!(want_json, got_json);
    let records = journal(&slurm);
    let steps: std::collections::BTreeSet<&str> = records
        .iter()
        .map(|e| e["report"]["place"]["slurm_step"].as_str().unwrap_or(""))
        .collect();
    assert!(
        !steps.contains(""),
        "a trial ran outside Slurm: {records:?}"
    );
    assert_eq!(
        steps.len(),
        records.len(),
        "each trial is a step of its own"
    );
    let jobs: std::collections::BTreeSet<&str> =
        steps.iter().map(|s| s.split('.').next().unwrap()).collect();
    assert_eq!(jobs.len(), 1, "all steps of one allocation: {jobs:?}");
}
