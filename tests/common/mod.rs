//! What the integration tests share: the real binary, scratch directories, configs, and readers of
//! its outputs and of the process table.
#![allow(dead_code)] // each test binary uses its own subset

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_oom-bisect");

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh directory of this test process: numbered, as the modules' tests share one process and
/// may give the same name.
pub fn tmp(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("oom-bisect-test-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn run(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("OOM_BISECT_KERNEL_CACHE", "")
        .output()
        .expect("run oom-bisect")
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A model small enough that a CPU trial takes about a second.
pub const TINY: &str = r#"
[model]
backbone = "resnet18"
output_stride = 16
classes = 4
aspp_channels = 32

[data]
batch = 2
size = [64, 64]

[train]
steps = 2
"#;

pub fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

pub fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The JSON report at `path`, or Null when the command wrote none.
pub fn json_if_written(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// A trial of the tiny config on the CPU backend with `extra` flags: its output and JSON report.
pub fn tiny_trial(name: &str, extra: &[&str]) -> (Output, Value) {
    let d = tmp(name);
    let cfg = write(&d, "c.toml", TINY);
    let j = d.join("r.json");
    let mut args = vec![
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--backend",
        "cpu",
        "--json",
        j.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = run(&args, &d);
    (o, json_if_written(&j))
}

pub fn processes_with(needle: &str) -> Vec<String> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                out.push(format!("{}: {c}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

/// (pid, parent pid, process group) of every process, from /proc.
pub fn process_table() -> Vec<(i32, i32, i32)> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`: comm may hold spaces, so split after its parenthesis.
        let Some((head, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let pid = head.split(' ').next().and_then(|p| p.parse().ok());
        let f: Vec<&str> = rest.split(' ').collect();
        if let (Some(pid), Some(ppid), Some(pgrp)) = (pid, f.get(1), f.get(2)) {
            if let (Ok(ppid), Ok(pgrp)) = (ppid.parse(), pgrp.parse()) {
                out.push((pid, ppid, pgrp));
            }
        }
    }
    out
}

/// The one `*.jsonl` file in `dir`.
pub fn journal_file(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("a journal")
}

/// Whether a test that needs something this machine may lack can run: `available`, or else it
/// says why it is skipped. With `OOM_BISECT_TEST_<SWITCH>=1` (CI, or a machine meant to have it), a
/// missing requirement is a failure instead of a skip.
pub fn can_run(switch: &str, available: bool, why: &str) -> bool {
    let var = format!("OOM_BISECT_TEST_{switch}");
    let required = std::env::var(&var).is_ok_and(|v| v == "1");
    assert!(available || !required, "{var}=1 but {why}");
    if !available {
        skipped(&format!("{why} ({var}=1 makes this a failure)"));
    }
    available
}

/// Says in the test command's own output, whichever test passes without running, that it was
/// skipped and why: written to stderr directly, past the harness's capture (which would show the
/// line only with `--nocapture`), so a skip never reads as a plain `ok`.
pub fn skipped(why: &str) {
    use std::io::Write;
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}
