//! Faults and hostile input, driven through the real binary: trials that break, hang or panic are
//! never fits or out-of-memory; a killed parent leaves no trial behind; a cut, held or unwritable
//! journal loses no record; a full disk costs no report; malformed input gets a clear message and a
//! documented exit code, never a panic. `docs/reliability.md` says what is covered and how to run it.

use crate::common::*;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_broken_module_is_an_error_not_an_oom() {
    let (o, r) = tiny_trial("broken", &["--fault", "broken-module"]);
    assert_eq!(code(&o), 125, "{}", text(&o));
    assert_eq!(r["outcome"], "error");
    assert!(r["error"]
        .as_str()
        .unwrap()
        .contains("deliberately broken module"));
    assert!(r["oom"].is_null());
}

#[test]
fn a_panic_on_a_device_thread_is_never_a_fit() {
    // burn-cuda's OOM: the device thread panics, the main thread may carry on and "finish".
    let (o, r) = tiny_trial("devthread", &["--fault", "device-thread-oom"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert_eq!(r["outcome"], "oom");
    assert_eq!(r["oom"]["bytes"], 42949672960u64);
}

#[test]
fn a_trial_past_its_limit_is_a_timeout_and_leaves_nothing_behind() {
    let t0 = Instant::now();
    let (o, r) = tiny_trial("timeout", &["--fault", "sleep", "--trial-timeout", "3"]);
    assert_eq!(code(&o), 125, "{}", text(&o));
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert_eq!(r["outcome"], "timeout");
    std::thread::sleep(Duration::from_millis(300));
    // The child's own child (`sleep 6017`) was killed with its process group.
    assert!(
        processes_with("sleep 6017").is_empty(),
        "{:?}",
        processes_with("sleep 6017")
    );
}

#[test]
fn a_killed_parent_leaves_no_trial_behind() {
    for signal in [libc::SIGKILL, libc::SIGHUP] {
        let d = tmp(&format!("orphan-{signal}"));
        let cfg = write(&d, "c.toml", TINY);
        let mut parent = Command::new(BIN)
            .args([
                "trial",
                "--config",
                cfg.to_str().unwrap(),
                "--backend",
                "cpu",
            ])
            .args(["--fault", "sleep", "--trial-timeout", "300"])
            .current_dir(&d)
            .env("OOM_BISECT_KERNEL_CACHE", "")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let ppid = parent.id() as i32;
        // The trial, and its own child (the fault's `sleep`), in the trial's process group.
        let t0 = Instant::now();
        let group = loop {
            let table = process_table();
            let trial = table.iter().find(|p| p.1 == ppid).map(|p| p.0);
            if let Some(g) = trial.filter(|g| table.iter().filter(|p| p.2 == *g).count() >= 2) {
                break g;
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "no trial started");
            std::thread::sleep(Duration::from_millis(100));
        };
        // SAFETY: signals our own child process.
        unsafe { libc::kill(ppid, signal) };
        let _ = parent.wait();
        let t0 = Instant::now();
        while process_table().iter().any(|p| p.2 == group) && t0.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        let left: Vec<_> = process_table()
            .into_iter()
            .filter(|p| p.2 == group)
            .collect();
        assert!(
            left.is_empty(),
            "signal {signal}: the trial's group outlived its parent: {left:?}"
        );
    }
}

#[test]
fn a_cut_journal_line_loses_no_record_and_a_held_journal_is_refused() {
    let d = tmp("cutline");
    let cfg = root().join("configs/quickstart.toml");
    let journal = d.join("j");
    let bisect = || {
        Command::new(BIN)
            .args(["bisect", "--config", cfg.to_str().unwrap(), "--fake-trials"])
            .args(["--axes", "batch", "--journal", journal.to_str().unwrap()])
            .current_dir(&d)
            .env("OOM_BISECT_KERNEL_CACHE", "")
            .output()
            .unwrap()
    };
    let first = bisect();
    assert_eq!(code(&first), 0, "{}", text(&first));
    let file = journal_file(&journal);
    let records = std::fs::read_to_string(&file).unwrap().lines().count();
    // A crash mid-write leaves a line without its end.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"key\": \"cut sho").unwrap();
    drop(f);
    let second = bisect();
    let t = text(&second);
    assert!(t.contains("1 lines of") && t.contains("skipped"), "{t}");
    assert!(t.contains(&format!("resuming: {records} trials")), "{t}");
    // Nothing was measured again, so nothing new was appended; the cut line was ended.
    let body = std::fs::read_to_string(&file).unwrap();
    assert!(body.ends_with('\n'), "the cut line is terminated");
    // A run holding the journal: a second one is refused with the reason.
    let held = std::fs::File::open(&file).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) },
        0
    );
    let refused = bisect();
    assert_eq!(code(&refused), 14, "{}", text(&refused));
    assert!(text(&refused).contains("another oom-bisect is using the journal"));
}

/// `oom-bisect` with `args` in `dir`, every file it writes limited to `max_bytes` (RLIMIT_FSIZE, with
/// SIGXFSZ ignored): a write past it fails with EFBIG, as on a full disk.
fn run_with_file_limit(
    args: &[&str],
    dir: &std::path::Path,
    max_bytes: u64,
) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(BIN);
    c.args(args)
        .current_dir(dir)
        .env("OOM_BISECT_KERNEL_CACHE", "");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: max_bytes,
                rlim_max: max_bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.output().unwrap()
}

#[test]
fn a_full_disk_costs_no_report_and_no_record_already_written() {
    let d = tmp("fulldisk");
    let cfg = root().join("configs/quickstart.toml");
    let (journal, j) = (d.join("j"), d.join("r.json"));
    let args = [
        "bisect",
        "--config",
        cfg.to_str().unwrap(),
        "--fake-trials",
        "--axes",
        "batch,size",
        "--journal",
        journal.to_str().unwrap(),
        "--json",
        j.to_str().unwrap(),
    ];
    // How long one journal record is, from a run with room (in a directory of its own).
    let d0 = tmp("fulldisk-room");
    let roomy: Vec<&str> = args
        .iter()
        .map(|a| {
            if *a == journal.to_str().unwrap() {
                "j"
            } else {
                a
            }
        })
        .collect();
    let roomy: Vec<&str> = roomy
        .iter()
        .map(|a| {
            if *a == j.to_str().unwrap() {
                "r.json"
            } else {
                a
            }
        })
        .collect();
    assert_eq!(code(&run(&roomy, &d0)), 0);
    let first = std::fs::read_to_string(journal_file(&d0.join("j"))).unwrap();
    let line = first.lines().next().unwrap().len() as u64 + 1;
    assert!(std::fs::metadata(d0.join("r.json")).unwrap().len() > line + 100);
    // Room for one record and part of the next, then every write fails, as on a full disk.
    let full = run_with_file_limit(&args, &d, line + 100);
    let t = text(&full);
    assert_eq!(code(&full), 14, "the unwritable JSON is the exit code: {t}");
    assert!(t.contains("could not append to the journal"), "{t}");
    assert!(t.contains(&format!("cannot write {}", j.display())), "{t}");
    assert!(
        String::from_utf8_lossy(&full.stdout).contains("Verdict:"),
        "the report is printed whatever cannot be written: {t}"
    );
    // With room again: what was recorded is replayed, the rest measured, the report the same.
    let recorded = std::fs::read_to_string(journal_file(&journal)).unwrap();
    let whole = recorded.lines().filter(|l| l.ends_with('}')).count();
    let again = run(&args, &d);
    let t2 = text(&again);
    assert_eq!(code(&again), 0, "{t2}");
    assert!(t2.contains(&format!("resuming: {whole} trials")), "{t2}");
    let verdict = |o: &std::process::Output| {
        let s = String::from_utf8_lossy(&o.stdout).to_string();
        s.lines()
            .filter(|l| {
                l.contains("Verdict") || l.contains("last fit") || l.contains("not the cause")
            })
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(verdict(&full), verdict(&again));
}

#[test]
fn hostile_configs_get_a_clear_message_and_never_a_panic() {
    let d = tmp("hostile");
    let base = "[model]\nbackbone = \"resnet18\"\noutput_stride = 16\nclasses = 4\n\
                [data]\nbatch = 2\nsize = [64, 64]\n";
    // (file body, exit code, what the message must say)
    let long = "x".repeat(5000);
    let cases: Vec<(String, i32, Vec<&str>)> = vec![
        (
            format!("{base}[train\n"),
            11,
            vec!["not valid TOML at line 8, column"],
        ),
        (
            format!("{base}[device]\nmemory_fraction = \"x\"\n"),
            11,
            vec!["`device.memory_fraction`"],
        ),
        (
            format!("{base}[device]\nmemory_limit = 1e3\n"),
            11,
            vec!["`device.memory_limit`", "bytes"],
        ),
        (
            format!("{base}[device]\ngpu = \"{long}\"\n"),
            13,
            vec!["characters in all"],
        ),
        (
            format!("{base}[device]\nbackend = \"cu\u{202e}da\\u001b[2J\"\n"),
            11,
            vec!["\\u{202e}", "\\u{1b}"],
        ),
        (
            format!("{base}[device]\ngpu = \"rtx9999\"\n"),
            13,
            vec!["unknown card"],
        ),
    ];
    for (i, (body, want, says)) in cases.iter().enumerate() {
        let cfg = write(&d, &format!("c{i}.toml"), body);
        // `inspect` takes no device flags; `trial` on the CPU.
        for cmd in [&["inspect"][..], &["trial", "--backend", "cpu"]] {
            let o = run(&[cmd, &["--config", cfg.to_str().unwrap()]].concat(), &d);
            let cmd = cmd[0];
            let t = text(&o);
            // `trial` speaks `git bisect run`: an invalid config skips, a bad ceiling stops.
            let want = match (cmd, *want) {
                ("trial", 11) => 125,
                ("trial", w) => 200 + w,
                (_, w) => w,
            };
            assert_eq!(code(&o), want, "{cmd} case {i}: {t}");
            for s in says {
                assert!(t.contains(s), "{cmd} case {i}: {s:?} missing from: {t}");
            }
            assert!(
                !t.contains("panicked") && t.len() < 3000,
                "{cmd} case {i}: {t}"
            );
            assert!(
                !t.contains('\u{202e}') && !t.contains('\u{1b}'),
                "{cmd} case {i}: raw control characters echoed"
            );
        }
    }
    // `memory_limit` in plain bytes, as documented, as an integer.
    let cfg = write(
        &d,
        "bytes.toml",
        &format!("{base}[device]\nmemory_limit = 1000000000\n"),
    );
    let o = run(&["inspect", "--config", cfg.to_str().unwrap()], &d);
    assert_eq!(code(&o), 0, "{}", text(&o));
    // A negative size reaches the size parser, which names the flag.
    let cfg = write(&d, "ok.toml", base);
    let args = [
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--memory-limit",
        "-5GiB",
    ];
    let o = run(&args, &d);
    assert_eq!(code(&o), 213, "{}", text(&o));
    assert!(text(&o).contains("--memory-limit"), "{}", text(&o));
    // The list of cards needs no config.
    let o = run(&["bisect", "--gpu", "help"], &d);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("rtx3090"), "{}", text(&o));
}

// ---- Issue 26: a failure is an OOM only when it is one; files, outputs and bounds. ----

/// `trial --exec COMMAND` of the tiny config on the CPU under 200 MiB, with `extra` flags and
/// environment: its output and JSON report.
fn exec_trial(name: &str, command: &str, extra: &[&str], env: &[(&str, &str)]) -> (Output, Value) {
    let d = tmp(name);
    let cfg = write(&d, "c.toml", TINY);
    let j = d.join("r.json");
    let o = Command::new(BIN)
        .args([
            "trial",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "cpu",
        ])
        .args(["--memory-limit", "200MiB", "--json", j.to_str().unwrap()])
        .args(extra)
        .args(["--exec", command])
        .current_dir(&d)
        .env("OOM_BISECT_KERNEL_CACHE", "")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (o, json_if_written(&j))
}

/// The failure is the failing exception itself: a kill is an error whatever was printed before
/// it; a log line or a test's assertion that mentions an out-of-memory is not one; a real
/// out-of-memory followed by Python's report of an exception ignored at exit, and NCCL's CUDA
/// out-of-memory, are.
#[test]
fn only_the_failing_exception_says_out_of_memory() {
    let oom = "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.'";
    let cases = [
        ("killed-term", format!("{oom}; kill -TERM $$"), "error"),
        ("killed-9", format!("{oom}; kill -9 $$"), "error"),
        // An abort is how C++ ends on an uncaught std::bad_alloc: its message tells.
        (
            "bad-alloc-abort",
            "printf \"terminate called after throwing an instance of 'std::bad_alloc'\\n  \
             what():  std::bad_alloc\\n\" >&2; kill -ABRT $$"
                .into(),
            "oom",
        ),
        (
            "abort-otherwise",
            "echo 'ValueError: x' >&2; kill -ABRT $$".into(),
            "error",
        ),
        (
            "health",
            "echo 'health: no CUDA out of memory so far'; exit 1".into(),
            "error",
        ),
        (
            "assertion",
            "echo 'AssertionError: expected no torch.OutOfMemoryError during warm-up' >&2; exit 1"
                .into(),
            "error",
        ),
        (
            "ignored",
            format!(
                "{oom} >&2; echo 'Exception ignored in: <function L.__del__ at 0x1>' >&2; \
                 echo 'AttributeError: close' >&2; exit 1"
            ),
            "oom",
        ),
        (
            "nccl",
            "echo 'ncclUnhandledCudaError: Call to CUDA function failed.' >&2; \
             echo 'Last error:' >&2; echo \"Cuda failure 'out of memory'\" >&2; exit 1"
                .into(),
            "oom",
        ),
    ];
    for (name, cmd, want) in cases {
        let (o, r) = exec_trial(name, &cmd, &[], &[]);
        assert_eq!(r["outcome"], want, "{name}: {}", text(&o));
        assert_eq!(code(&o), if want == "oom" { 3 } else { 125 }, "{name}");
    }
}

#[test]
fn an_oom_phrase_in_the_log_is_not_the_failure() {
    let log = "echo 'health check: no CUDA out of memory errors so far'";
    let (o, r) = exec_trial(
        "oomlog",
        &format!("{log}; echo \"KeyError: 'labels'\" >&2; exit 1"),
        &[],
        &[],
    );
    assert_eq!(
        (code(&o), r["outcome"].as_str()),
        (125, Some("error")),
        "{}",
        text(&o)
    );
    assert!(r["error"].as_str().unwrap().contains("KeyError"), "{r}");
    // A recovered out-of-memory, then a crash.
    let oom = "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.'";
    let (o, r) = exec_trial(
        "oomrecovered",
        &format!("{oom}; echo 'ValueError: bad' >&2; exit 1"),
        &[],
        &[],
    );
    assert_eq!(
        (code(&o), r["outcome"].as_str()),
        (125, Some("error")),
        "{}",
        text(&o)
    );
    // The same out-of-memory as the last words is one.
    let (o, r) = exec_trial("oomlast", &format!("{log}; {oom} >&2; exit 1"), &[], &[]);
    assert_eq!(
        (code(&o), r["outcome"].as_str()),
        (3, Some("oom")),
        "{}",
        text(&o)
    );
    assert_eq!(r["oom"]["bytes"], 2147483648u64);
    // A bisect over a command that fails otherwise above batch 4, logging that line: no boundary
    // is made up; the original (batch 8) cannot be measured at all.
    let d = tmp("oomlog-bisect");
    let cfg = write(&d, "c.toml", &TINY.replace("batch = 2", "batch = 8"));
    let cmd = format!(
        "{log}; b=$(sed -n 's/^batch = //p' {{config}}); \
         if [ \"$b\" -gt 4 ]; then echo 'ValueError: too big' >&2; exit 1; fi"
    );
    let o = run(
        &[
            "bisect",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "cpu",
            "--memory-limit",
            "200MiB",
            "--axes",
            "batch",
            "--exec",
            &cmd,
        ],
        &d,
    );
    assert_eq!(code(&o), 15, "{}", text(&o));
    assert!(!text(&o).contains("does not)"), "{}", text(&o));
}

/// A memory cgroup of its own beside this process's, limited to 32 MiB (cgroup v1's memory
/// hierarchy), or `None` where this process may not make one.
fn small_memory_cgroup(name: &str) -> Option<std::path::PathBuf> {
    let table = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = table.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, c, p) = (f.next()?, f.next()?, f.next()?);
        c.split(',')
            .any(|c| c == "memory")
            .then(|| p.trim_start_matches('/').to_string())
    })?;
    let dir = std::path::Path::new("/sys/fs/cgroup/memory")
        .join(path)
        .join(name);
    std::fs::create_dir(&dir).ok()?;
    std::fs::write(dir.join("memory.limit_in_bytes"), "32M").ok()?;
    Some(dir)
}

/// A process OOM-killed in `cgroup` (it asks for 256 MiB under 32).
fn oom_kill_in(cgroup: &std::path::Path) {
    let procs = cgroup.join("cgroup.procs");
    let s = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}; exec python3 -c 'b = bytearray(256 << 20)'",
            procs.display()
        ))
        .status()
        .unwrap();
    assert_eq!(
        s.signal(),
        Some(libc::SIGKILL),
        "the OOM killer did not kill it"
    );
}

#[test]
fn a_kill_is_an_oom_only_when_the_oom_killer_killed_the_command() {
    let cgroup = small_memory_cgroup(&format!("oom-bisect-test-{}", std::process::id()));
    let why = "this process may not make a memory cgroup";
    let (true, Some(elsewhere)) = (can_run("CGROUP", cgroup.is_some(), why), cgroup) else {
        return;
    };
    // An unrelated process is OOM-killed elsewhere on the host while the command dies of SIGKILL,
    // or exits 137 from a shell: neither is an out-of-memory.
    for (name, cmd) in [
        ("kill9", "sleep 2; kill -9 $$"),
        ("exit137", "sleep 2; exit 137"),
    ] {
        let bystander = {
            let dir = elsewhere.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(700));
                oom_kill_in(&dir);
            })
        };
        let (o, r) = exec_trial(name, cmd, &[], &[]);
        bystander.join().unwrap();
        assert_eq!(
            (code(&o), r["outcome"].as_str()),
            (125, Some("error")),
            "{name}: {}",
            text(&o)
        );
    }
    let _ = std::fs::remove_dir(&elsewhere);
    // The command's own process, killed by the OOM killer in a cgroup it made below its own.
    let own = "p=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup); \
               d=/sys/fs/cgroup/memory$p/small; mkdir $d && echo 32M > $d/memory.limit_in_bytes && \
               echo $$ > $d/cgroup.procs && python3 -c 'b = bytearray(256 << 20)'";
    let (o, r) = exec_trial("ownkill", own, &[], &[]);
    assert_eq!(
        (code(&o), r["outcome"].as_str()),
        (3, Some("oom")),
        "{}",
        text(&o)
    );
    assert!(
        r["oom"]["message"].as_str().unwrap().contains("OOM killer"),
        "{r}"
    );
}

#[test]
fn bytes_that_are_not_utf8_stop_nothing() {
    let (o, r) = exec_trial(
        "badutf8",
        "printf '\\377\\376 tqdm\\n'; sleep 0.3; echo done",
        &[],
        &[],
    );
    assert_eq!(
        (code(&o), r["outcome"].as_str()),
        (0, Some("fits")),
        "{}",
        text(&o)
    );
    let oom = "printf '\\377\\n'; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.'; exit 1";
    let (o, r) = exec_trial("badutf8-oom", oom, &[], &[]);
    assert_eq!(
        (code(&o), r["outcome"].as_str()),
        (3, Some("oom")),
        "{}",
        text(&o)
    );
}

#[test]
fn the_exec_config_is_private_and_temp_dirs_are_not_made_or_swept_blindly() {
    let tmpdir = tmp("private-tmp");
    // Another user's look-alike (no marker of ours) stays.
    let foreign = tmpdir.join("oom-bisect-exec-1-0000");
    std::fs::create_dir(&foreign).unwrap();
    let check = "d=$(dirname {config}); test \"$(stat -c %a \"$d\")\" = 700 && \
                 test \"$(stat -c %u \"$d\")\" = \"$(id -u)\" && \
                 case \"$d\" in */oom-bisect-exec-*-????????????????) exit 0;; esac; exit 1";
    let env = [("TMPDIR", tmpdir.to_str().unwrap())];
    let (o, _) = exec_trial("private", check, &[], &env);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(foreign.exists());
    let left: Vec<_> = std::fs::read_dir(&tmpdir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "the trial's directory is removed: {left:?}");
    // A missing TMPDIR is an error before any trial (missing at every commit: it stops `git bisect
    // run`), and is not created.
    let missing = tmpdir.join("nope");
    let (o, r) = exec_trial(
        "private-missing",
        "exit 0",
        &[],
        &[("TMPDIR", missing.to_str().unwrap())],
    );
    assert_eq!(code(&o), 214, "{}", text(&o));
    assert!(
        r["error"]
            .as_str()
            .unwrap_or("")
            .contains("temporary directory")
            || text(&o).contains("temporary directory"),
        "{}",
        text(&o)
    );
    assert!(!missing.exists());
}

#[test]
fn an_output_never_replaces_an_input() {
    let d = tmp("outputs");
    let cfg = write(&d, "c.toml", TINY);
    let journal = d.join("j");
    let bisect = |extra: &[&str]| {
        let args = [
            &[
                "bisect",
                "--config",
                cfg.to_str().unwrap(),
                "--fake-trials",
                "--axes",
                "batch",
                "--journal",
                journal.to_str().unwrap(),
            ][..],
            extra,
        ]
        .concat();
        run(&args, &d)
    };
    let o = bisect(&["--json", cfg.to_str().unwrap()]);
    assert_eq!(code(&o), 14, "{}", text(&o));
    assert!(text(&o).contains("is also the config"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), TINY);
    assert_eq!(code(&bisect(&[])), 0);
    let j = journal_file(&journal);
    let before = std::fs::read(&j).unwrap();
    let o = bisect(&["--html", j.to_str().unwrap()]);
    assert_eq!(code(&o), 14, "{}", text(&o));
    assert!(text(&o).contains("is also the journal"), "{}", text(&o));
    assert_eq!(std::fs::read(&j).unwrap(), before);
    let o = bisect(&["--json", "r.json", "--html", "./r.json"]);
    assert_eq!(code(&o), 14, "{}", text(&o));
    // `trial` too.
    let o = run(
        &[
            "trial",
            "--config",
            cfg.to_str().unwrap(),
            "--fake-trials",
            "--json",
            cfg.to_str().unwrap(),
        ],
        &d,
    );
    assert_eq!(code(&o), 214, "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), TINY);
}

#[test]
fn a_journal_line_that_is_not_utf8_hides_nothing() {
    let d = tmp("journal-utf8");
    let cfg = root().join("configs/quickstart.toml");
    let journal = d.join("j");
    let args = [
        "bisect",
        "--config",
        cfg.to_str().unwrap(),
        "--fake-trials",
        "--axes",
        "batch",
        "--journal",
        journal.to_str().unwrap(),
    ];
    assert_eq!(code(&run(&args, &d)), 0);
    let j = journal_file(&journal);
    let records = std::fs::read_to_string(&j).unwrap();
    assert!(records.is_ascii(), "records are written in ASCII");
    let n = records.lines().count();
    // A line cut inside a multi-byte character, first in the file.
    let mut bytes = b"{\"key\": \"\xe4\xb8\n".to_vec();
    bytes.extend_from_slice(records.as_bytes());
    std::fs::write(&j, bytes).unwrap();
    let again = run(&args, &d);
    let t = text(&again);
    assert_eq!(code(&again), 0, "{t}");
    assert!(t.contains(&format!("resuming: {n} trials")), "{t}");
    assert!(t.contains("not even UTF-8"), "{t}");
}

#[test]
fn every_output_is_checked_first_and_a_file_limit_costs_no_report() {
    let d = tmp("outputs-first");
    let cfg = root().join("configs/quickstart.toml");
    let journal = d.join("j");
    let args = [
        "bisect",
        "--config",
        cfg.to_str().unwrap(),
        "--fake-trials",
        "--journal",
        journal.to_str().unwrap(),
    ];
    let o = run(&[&args[..], &["--html", "/proc/none/r.html"]].concat(), &d);
    assert_eq!(code(&o), 14, "{}", text(&o));
    assert!(text(&o).contains("/proc/none"), "{}", text(&o));
    assert!(
        !text(&o).contains("Verdict"),
        "refused before any trial: {}",
        text(&o)
    );
    // `ulimit -f` with SIGXFSZ as the shell leaves it: the report, then EFBIG named, exit 14.
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(BIN);
    c.args(&args[..])
        .args(["--json", "r.json"])
        .current_dir(&d)
        .env("OOM_BISECT_KERNEL_CACHE", "");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            let lim = libc::rlimit {
                rlim_cur: 4096,
                rlim_max: 4096,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            Ok(())
        });
    }
    let o = c.output().unwrap();
    assert_eq!(code(&o), 14, "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Verdict:"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("r.json"), "{}", text(&o));
}

#[test]
fn a_closed_stdout_or_stderr_costs_no_file() {
    for closed in ["stdout", "stderr"] {
        let d = tmp(&format!("closed-{closed}"));
        let cfg = root().join("configs/quickstart.toml");
        let mut c = Command::new(BIN);
        c.args([
            "bisect",
            "--config",
            cfg.to_str().unwrap(),
            "--fake-trials",
            "--axes",
            "batch",
            "--json",
            "r.json",
        ])
        .current_dir(&d)
        .env("OOM_BISECT_KERNEL_CACHE", "")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        // The reader goes away at once (`| head`, a pager that quit).
        match closed {
            "stdout" => drop(child.stdout.take()),
            _ => drop(child.stderr.take()),
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "{closed}: {}", text(&out));
        assert!(d.join("r.json").exists(), "{closed}: the JSON is written");
    }
}

#[test]
fn what_a_command_leaves_behind_cannot_hold_the_trial() {
    // A grandchild gone with `setsid` keeps the output open: the limit still holds, and
    // nothing outlives the trial.
    let t0 = Instant::now();
    let (o, r) = exec_trial(
        "setsid",
        "setsid sh -c 'sleep 6031' & sleep 6032",
        &["--trial-timeout", "3"],
        &[],
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert_eq!(
        (code(&o), r["outcome"].as_str()),
        (125, Some("timeout")),
        "{}",
        text(&o)
    );
    // A daemon with its output closed, from a command that fits.
    let (o, _) = exec_trial(
        "daemon",
        "setsid sh -c 'sleep 6033' </dev/null >/dev/null 2>&1 & exit 0",
        &[],
        &[],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    std::thread::sleep(Duration::from_millis(300));
    for pid in ["6031", "6032", "6033"] {
        assert!(
            processes_with(&format!("sleep {pid}")).is_empty(),
            "sleep {pid} outlived its trial"
        );
    }
}

#[test]
fn a_huge_output_is_kept_to_its_tail() {
    let cmd =
        "head -c 20000000 /dev/zero | tr '\\000' x; echo; echo 'ValueError: boom' >&2; exit 1";
    let d_json = tmp("huge").join("r.json");
    let (o, r) = exec_trial("huge", cmd, &[], &[]);
    assert_eq!(
        (code(&o), r["outcome"].as_str()),
        (125, Some("error")),
        "{}",
        text(&o).len()
    );
    assert!(
        r["error"].as_str().unwrap().contains("ValueError: boom"),
        "{}",
        r["error"].as_str().unwrap().len()
    );
    assert!(
        r.to_string().len() < 100_000,
        "the report holds {} bytes",
        r.to_string().len()
    );
    assert!(
        o.stderr.len() < 100_000,
        "stderr holds {} bytes",
        o.stderr.len()
    );
    let _ = d_json;
}

#[test]
fn odd_names_and_huge_configs_never_panic() {
    use std::os::unix::ffi::OsStrExt;
    let d = tmp("odd-names");
    // A config name that is not UTF-8.
    let odd = d.join(std::ffi::OsStr::from_bytes(b"c\xff.toml"));
    std::fs::write(&odd, TINY).unwrap();
    let o = Command::new(BIN)
        .arg("bisect")
        .arg("--config")
        .arg(&odd)
        .args([
            "--fake-trials",
            "--axes",
            "batch",
            "--memory-limit",
            "100MiB",
        ])
        .current_dir(&d)
        .env("OOM_BISECT_KERNEL_CACHE", "")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o));
    // A newline in a config's name does not start a line of the minimal failing config.
    let nl = write(&d, "a\nb.toml", &TINY.replace("batch = 2", "batch = 64"));
    let o = run(
        &[
            "bisect",
            "--config",
            nl.to_str().unwrap(),
            "--fake-trials",
            "--memory-limit",
            "100MiB",
            "--axes",
            "batch,minimal",
        ],
        &d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let minimal = std::fs::read_dir(d.join("oom-bisect-out"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("-minimal-failing.toml"))
        .expect("a minimal config");
    let body = std::fs::read_to_string(&minimal).unwrap();
    assert!(body.contains("a\\nb.toml"), "{body}");
    assert!(!body.lines().any(|l| l.starts_with("b.toml")), "{body}");
    // Every key at its maximum at once: refused by name, not wrapped past 2^64.
    let max = "[model]\nbackbone = \"resnet101\"\noutput_stride = 8\nclasses = 100000\n\
               aspp_channels = 65536\nattention_heads = 65536\naux_head = true\n\
               [data]\nbatch = 65536\nsize = [65536, 65536]\n";
    let cfg = write(&d, "max.toml", max);
    let o = run(&["inspect", "--config", cfg.to_str().unwrap()], &d);
    assert_eq!(code(&o), 11, "{}", text(&o));
    assert!(text(&o).contains("2^56 bytes"), "{}", text(&o));
    // The command is echoed with its control characters escaped.
    let (o, _) = exec_trial("echo-escape", "true \u{1b}[2J \u{202e}", &[], &[]);
    assert!(
        !text(&o).contains('\u{1b}') && !text(&o).contains('\u{202e}'),
        "{}",
        text(&o)
    );
}

/// `git` in `dir`, as a test user.
fn git(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("OOM_BISECT_KERNEL_CACHE", "")
        .output()
        .unwrap()
}

#[test]
fn git_bisect_run_names_the_commit_that_brought_the_oom() {
    let d = tmp("git-bisect");
    assert!(git(&d, &["init", "-q"]).status.success());
    let commit = |body: &str, msg: &str| {
        write(&d, "c.toml", body);
        git(&d, &["add", "c.toml"]);
        assert!(git(&d, &["commit", "-qm", msg]).status.success());
        let head = git(&d, &["rev-parse", "HEAD"]);
        String::from_utf8_lossy(&head.stdout).trim().to_string()
    };
    let fits = TINY.replace("batch = 2", "batch = 1");
    let c1 = commit(&fits, "fits");
    let _c2 = commit(&format!("{fits}\n[model]\n"), "a broken config");
    let _c3 = commit(TINY, "fixed, still fits");
    let c4 = commit(&TINY.replace("batch = 2", "batch = 64"), "the OOM");
    let c5 = commit(&TINY.replace("batch = 2", "batch = 96"), "more of it");
    let trial = [
        BIN,
        "trial",
        "--config",
        "c.toml",
        "--fake-trials",
        "--backend",
        "cpu",
        "--memory-limit",
        "300MiB",
    ];
    // At the broken commit, `trial` says skip.
    git(&d, &["checkout", "-q", "HEAD~3"]);
    let o = Command::new(BIN)
        .args(&trial[1..])
        .current_dir(&d)
        .output()
        .unwrap();
    assert_eq!(code(&o), 125, "{}", text(&o));
    git(&d, &["checkout", "-q", "main"]);
    assert!(git(&d, &["bisect", "start", &c5, &c1]).status.success());
    let o = git(&d, &[&["bisect", "run"][..], &trial].concat());
    assert!(
        text(&o).contains(&format!("{c4} is the first bad commit")),
        "{}",
        text(&o)
    );
    git(&d, &["bisect", "reset"]);
    // Where nothing can be measured (no CUDA device here), git stops instead of blaming a commit.
    if !std::path::Path::new("/dev/nvidia0").exists() {
        assert!(git(&d, &["bisect", "start", &c5, &c1]).status.success());
        let cuda = [BIN, "trial", "--config", "c.toml", "--backend", "cuda"];
        let o = git(&d, &[&["bisect", "run"][..], &cuda].concat());
        assert!(!o.status.success(), "{}", text(&o));
        assert!(!text(&o).contains("first bad commit"), "{}", text(&o));
        git(&d, &["bisect", "reset"]);
    }
}

/// Inputs that are not files, and files too large, end with an error naming them, never a wait or
/// a memory blow-up: `/dev/zero` and a FIFO as the config, a FIFO as `--json`.
#[test]
fn fifos_devices_and_endless_files_are_refused_by_name() {
    let d = tmp("special-files");
    let fifo = d.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let fifo = fifo.to_str().unwrap();
    let config = root().join("configs/quickstart.toml");
    let config = config.to_str().unwrap();
    for (args, want) in [
        (vec!["inspect", "--config", "/dev/zero"], 10),
        (vec!["inspect", "--config", fifo], 10),
        (
            vec!["trial", "--config", "/dev/zero", "--backend", "cpu"],
            125,
        ),
        (
            vec![
                "bisect",
                "--config",
                config,
                "--fake-trials",
                "--json",
                fifo,
            ],
            14,
        ),
    ] {
        let start = Instant::now();
        let o = run(&args, &d);
        assert_eq!(code(&o), want, "{args:?}: {}", text(&o));
        assert!(start.elapsed() < Duration::from_secs(20), "{args:?} waited");
        assert!(text(&o).contains("not a regular file"), "{}", text(&o));
    }
}

/// `inspect --json` onto its own config is refused before anything is written.
#[test]
fn inspect_never_writes_over_its_config() {
    let d = tmp("inspect-onto-config");
    let config = d.join("c.toml");
    std::fs::copy(root().join("configs/quickstart.toml"), &config).unwrap();
    let before = std::fs::read(&config).unwrap();
    let c = config.to_str().unwrap();
    let o = run(&["inspect", "--config", c, "--json", c], &d);
    assert_eq!(code(&o), 14, "{}", text(&o));
    assert_eq!(std::fs::read(&config).unwrap(), before);
}

/// A journal that stops taking records (a file-size limit here) is the run's exit code after the
/// report, not a warning that scrolls away.
#[test]
fn a_journal_that_cannot_be_written_is_an_exit_code() {
    let d = tmp("journal-unwritable");
    let config = root().join("configs/quickstart.toml");
    let script = format!(
        "ulimit -f 4; exec '{BIN}' bisect --config '{}' --fake-trials -q --journal '{}'",
        config.display(),
        d.join("j").display()
    );
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(code(&o), 14, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("Trials: ") && t.contains("could not be written to the journal"),
        "{t}"
    );
}

/// Under `git bisect run`, a command line that cannot run is bad at every commit: a flag put before
/// `trial`, a misspelled `trail`, a negative `--jobs`, each stops git (202), never blames a commit.
#[test]
fn a_bad_trial_command_line_stops_git_bisect() {
    let d = tmp("bisect-usage");
    let config = root().join("configs/quickstart.toml");
    let c = config.to_str().unwrap();
    for args in [
        vec!["--backend", "cpu", "trial", "--config", c],
        vec!["trail", "--config", c],
        vec!["trial", "--config", c, "--no-such-flag"],
    ] {
        let o = run(&args, &d);
        assert_eq!(code(&o), 202, "{args:?}: {}", text(&o));
    }
    // Elsewhere a bad command line is exit 2, and a negative count names its flag.
    let o = run(&["bisect", "--config", c, "--jobs", "-1"], &d);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("--jobs"), "{}", text(&o));
}

/// `inspect` of the quickstart with `from` written as `to`, a value forging an `error: all good`
/// line: refused as a bad config (11), the forged line never printed as a line of its own.
fn inspect_forged(d: &Path, from: &str, to: &str) -> Output {
    let base = std::fs::read_to_string(root().join("configs/quickstart.toml")).unwrap();
    let c = write(d, "forged.toml", &base.replace(from, to));
    let o = run(&["inspect", "--config", c.to_str().unwrap()], d);
    assert_eq!(code(&o), 11, "{}", text(&o));
    assert!(
        !text(&o).lines().any(|l| l.starts_with("error: all good")),
        "{}",
        text(&o)
    );
    o
}

/// What a config says is echoed on one line, its bidirectional marks escaped: a value cannot print a
/// forged `error:` line of its own. A key of megabytes is refused at once, and a `--set` value with
/// a newline is refused instead of losing what follows it.
#[test]
fn echoes_stay_on_one_line_and_odd_keys_are_refused_fast() {
    let d = tmp("echoes");
    let base = std::fs::read_to_string(root().join("configs/quickstart.toml")).unwrap();
    inspect_forged(
        &d,
        "attention_heads = 4",
        "attention_heads = 4\nidentity = [\"aspp\\nerror: all good\", \"x\\u200ey\\u061cz\"]",
    );
    let huge = base.replace(
        "attention_heads = 4",
        &format!("{} = 1", "k".repeat(4_000_000)),
    );
    let c = write(&d, "huge.toml", &huge);
    let start = Instant::now();
    let o = run(&["inspect", "--config", c.to_str().unwrap()], &d);
    assert_eq!(code(&o), 11, "{}", text(&o));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let q = root().join("configs/quickstart.toml");
    let o = run(
        &[
            "inspect",
            "--config",
            q.to_str().unwrap(),
            "--set",
            "data.batch=1\n[y]",
        ],
        &d,
    );
    assert_eq!(code(&o), 11, "{}", text(&o));
    assert!(text(&o).contains("one line"), "{}", text(&o));
}

/// `--exec` hands the command a path under `$TMPDIR`, which a shell reads in whatever quotes the
/// command puts around `{config}`: a `TMPDIR` with `$(…)` in it is refused before any trial, and
/// nothing in it runs.
#[test]
fn a_tmpdir_a_shell_would_read_is_refused_before_any_trial() {
    let d = tmp("tmpdir-shell");
    let evil = d.join("a$(touch PWNED)");
    std::fs::create_dir_all(&evil).unwrap();
    let q = root().join("configs/quickstart.toml");
    for quoted in ["{config}", "\"{config}\"", "'{config}'"] {
        let o = Command::new(BIN)
            .args(["trial", "--config", q.to_str().unwrap(), "--backend", "cpu"])
            .args(["--exec", &format!("cat {quoted}")])
            .env("TMPDIR", &evil)
            .current_dir(&d)
            .output()
            .unwrap();
        assert_eq!(code(&o), 214, "{}", text(&o));
        assert!(text(&o).contains("TMPDIR"), "{}", text(&o));
        assert!(!d.join("PWNED").exists());
    }
}

/// A command that reports every iteration of a long run: the trial keeps the first thousand steps
/// and ten thousand stages, and the last stage named, so its JSON and the journal stay small.
#[test]
fn a_command_reporting_every_iteration_stays_bounded() {
    let d = tmp("many-steps");
    let q = root().join("configs/quickstart.toml");
    let j = d.join("t.json");
    let script = "for i in $(seq 1 30000); do \
        echo \"{\\\"oom_bisect\\\": {\\\"step_done\\\": $i, \\\"loss\\\": 1.0}}\"; \
        echo \"{\\\"oom_bisect\\\": {\\\"stage\\\": \\\"s$i\\\", \\\"step\\\": 1}}\"; done";
    let o = run(
        &[
            "trial",
            "--config",
            q.to_str().unwrap(),
            "--backend",
            "cpu",
            "--exec",
            script,
            "--json",
            j.to_str().unwrap(),
        ],
        &d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let r = json(&j);
    assert_eq!(r["steps"].as_array().unwrap().len(), 1_000);
    let stages = r["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 10_001);
    assert_eq!(stages.last().unwrap()["name"], "s30000");
    assert!(std::fs::metadata(&j).unwrap().len() < 8 << 20);
}

/// Whatever ends the driver (SIGKILL, SIGTERM, SIGINT, SIGHUP), what a `--exec` command put in a
/// process group of its own with `setsid` dies with the trial: the holder sweeps its descendants and its
/// cgroup when it is told to stop, not only its process group.
#[test]
fn a_signalled_driver_leaves_no_escaped_process_behind() {
    let d = tmp("signal-setsid");
    let q = root().join("configs/quickstart.toml");
    for (i, sig) in [libc::SIGKILL, libc::SIGTERM, libc::SIGINT, libc::SIGHUP]
        .iter()
        .enumerate()
    {
        let (escaped, waiting) = (format!("sleep 81{i}1"), format!("sleep 81{i}2"));
        // Spelled through a variable, so that only the sleeps' own command lines hold the needles.
        let command =
            format!("n=81{i}; setsid sleep ${{n}}1 </dev/null >/dev/null 2>&1 & sleep ${{n}}2");
        let mut child = Command::new(BIN)
            .args(["trial", "--config", q.to_str().unwrap(), "--backend", "cpu"])
            .args(["--exec", &command])
            .current_dir(&d)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while processes_with(&waiting).is_empty() && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !processes_with(&escaped).is_empty(),
            "{escaped} never started"
        );
        // SAFETY: signals the driver this test started.
        unsafe { libc::kill(child.id() as i32, *sig) };
        let _ = child.wait();
        // The sweep is prompt; the deadline is generous for a machine busy with other tests.
        let start = Instant::now();
        while !processes_with(&escaped).is_empty() && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            processes_with(&escaped).is_empty(),
            "signal {sig}: {escaped} survived"
        );
        assert!(
            processes_with(&waiting).is_empty(),
            "signal {sig}: {waiting} survived"
        );
    }
}

/// A link planted where an output goes (in a shared directory, or for a run as root) is never
/// written through: `--json`, `--html`, the journal and the minimal failing configuration are
/// refused before the first trial, `OOM_BISECT_STREAM_OUT` fails its trial; the file the link
/// points to is left as it was.
#[test]
fn outputs_are_never_written_through_a_planted_link() {
    let d = tmp("links");
    let victim = write(&d, "victim.txt", "precious");
    let link = |name: &str| {
        let p = d.join(name);
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        p
    };
    let q = root().join("configs/quickstart.toml");
    let fake = |extra: &[&str], journal: &std::path::Path| {
        let mut args = vec![
            "bisect",
            "--config",
            q.to_str().unwrap(),
            "--estimate",
            "--journal",
            journal.to_str().unwrap(),
            "-q",
        ];
        args.extend(extra);
        run(&args, &d)
    };
    for flag in ["--json", "--html"] {
        let out = link(&format!("out{flag}"));
        let o = fake(&[flag, out.to_str().unwrap()], &d.join("j"));
        assert_eq!(code(&o), 14, "{flag}: {}", text(&o));
        assert!(text(&o).contains("symbolic link"), "{flag}: {}", text(&o));
    }
    // The journal and the minimal configuration beside it: their names follow the experiment.
    let o = fake(&[], &d.join("j2"));
    assert_eq!(code(&o), 0, "{}", text(&o));
    let journal = std::fs::read_dir(d.join("j2"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let minimal = journal.with_file_name(format!(
        "{}-minimal-failing.toml",
        journal.file_stem().unwrap().to_string_lossy()
    ));
    for planted in [&journal, &minimal] {
        let _ = std::fs::remove_file(&journal);
        let _ = std::fs::remove_file(&minimal);
        std::os::unix::fs::symlink(&victim, planted).unwrap();
        let o = fake(&[], &d.join("j2"));
        assert_eq!(code(&o), 14, "{}: {}", planted.display(), text(&o));
    }
    let stream = link("stream.json");
    let tiny = write(&d, "tiny.toml", TINY);
    let o = Command::new(BIN)
        .args([
            "trial",
            "--config",
            tiny.to_str().unwrap(),
            "--backend",
            "cpu",
        ])
        .args(["--memory-limit", "2GiB"])
        .env("OOM_BISECT_STREAM_OUT", &stream)
        .current_dir(&d)
        .output()
        .unwrap();
    assert_eq!(code(&o), 125, "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

/// `$SLURM_NTASKS` sets a launcher's trials at once: a value that is no count, or more than
/// `--jobs` allows, is an error naming it (not one trial at a time, nor 100,000 workers).
#[test]
fn a_launchers_task_count_is_checked() {
    let d = tmp("ntasks");
    let q = root().join("configs/quickstart.toml");
    for (tasks, ok) in [
        ("100000", false),
        ("0", false),
        ("-5", false),
        ("banana", false),
        ("3", true),
    ] {
        let o = Command::new(BIN)
            .args([
                "bisect",
                "--config",
                q.to_str().unwrap(),
                "--estimate",
                "-q",
            ])
            .args([
                "--launcher",
                "env",
                "--journal",
                d.join("j").to_str().unwrap(),
            ])
            .env("SLURM_NTASKS", tasks)
            .current_dir(&d)
            .output()
            .unwrap();
        match ok {
            true => assert_eq!(code(&o), 0, "{tasks}: {}", text(&o)),
            false => {
                assert_eq!(code(&o), 2, "{tasks}: {}", text(&o));
                assert!(text(&o).contains("SLURM_NTASKS"), "{tasks}: {}", text(&o));
            }
        }
    }
}

/// A serde message quotes the value it refuses: a newline in it is written as `\n`, never a line
/// that reads like oom-bisect's own; the confirmations and the fake trials' seconds are bounded;
/// an empty `$TMPDIR` is the system's, as for other tools.
#[test]
fn odd_values_are_refused_by_name_and_an_empty_tmpdir_is_the_systems() {
    let d = tmp("odd-values");
    inspect_forged(
        &d,
        "backbone = \"resnet18\"",
        "backbone = \"resnet18\\nerror: all good\"",
    );
    let q = root().join("configs/quickstart.toml");
    let o = run(
        &[
            "bisect",
            "--config",
            q.to_str().unwrap(),
            "--estimate",
            "--confirm-runs",
            "1000000",
        ],
        &d,
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
    let o = Command::new(BIN)
        .args(["trial", "--config", q.to_str().unwrap(), "--estimate"])
        .env("OOM_BISECT_FAKE_TRIAL_SECONDS", "soon")
        .current_dir(&d)
        .output()
        .unwrap();
    // `trial` gives `git bisect run` 200 and up for what is not a verdict: 202, a usage error.
    assert_eq!(code(&o), 202, "{}", text(&o));
    assert!(
        text(&o).contains("OOM_BISECT_FAKE_TRIAL_SECONDS"),
        "{}",
        text(&o)
    );
    let o = Command::new(BIN)
        .args(["trial", "--config", q.to_str().unwrap(), "--backend", "cpu"])
        .args(["--exec", "true"])
        .env("TMPDIR", "")
        .current_dir(&d)
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o));
}

/// A served command's answer with a long message (a traceback several KiB long) is read whole:
/// the trial ends with it, it does not wait out its time limit.
#[test]
fn a_long_served_answer_is_read_whole() {
    let d = tmp("long-answer");
    let script = write(
        &d,
        "serve.py",
        "import json, sys\n\
         for line in sys.stdin:\n\
         \x20   r = json.loads(line)\n\
         \x20   frames = ''.join(f'  File \"train.py\", line {i}, in step\\n    x = layer(x)\\n' for i in range(200))\n\
         \x20   msg = 'Traceback (most recent call last):\\n' + frames + 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'\n\
         \x20   print(json.dumps({'oom_bisect': {'trial_done': 'failed', 'message': msg, 'id': r['id']}}), flush=True)\n",
    );
    let q = root().join("configs/quickstart.toml");
    let start = Instant::now();
    let o = Command::new(BIN)
        .args(["trial", "--config", q.to_str().unwrap(), "--backend", "cpu"])
        .args(["--serve", "on", "--trial-timeout", "60"])
        .args([
            "--exec",
            &format!("python3 {} {{config}}", script.display()),
        ])
        .current_dir(&d)
        .output()
        .unwrap();
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

/// A file system with no room left is found before the first trial, not after it.
#[test]
fn a_full_disk_is_found_before_the_first_trial() {
    let d = tmp("full-disk");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        // Mounting needs root; CI runs as root (OOM_BISECT_TEST_MOUNT=1 makes this a failure).
        assert!(
            std::env::var_os("OOM_BISECT_TEST_MOUNT").is_none(),
            "cannot mount a tmpfs"
        );
        crate::common::skipped("cannot mount a tmpfs here");
        return;
    }
    let _ = std::fs::write(mnt.join("fill"), vec![0u8; 60 << 10]);
    let q = root().join("configs/quickstart.toml");
    let o = run(
        &[
            "bisect",
            "--config",
            q.to_str().unwrap(),
            "--estimate",
            "-q",
            "--journal",
            mnt.to_str().unwrap(),
        ],
        &d,
    );
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(code(&o), 14, "{}", text(&o));
    assert!(text(&o).contains("bytes free"), "{}", text(&o));
}
