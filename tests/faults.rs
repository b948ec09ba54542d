//! Faults and hostile input, driven through the real binary: trials that break, hang or panic are
//! never fits or out-of-memory; a killed parent leaves no trial behind; a cut, held or unwritable
//! journal loses no record; a full disk costs no report; malformed input gets a clear message and a
//! documented exit code, never a panic. `docs/reliability.md` says what is covered and how to run it.

mod common;

use common::*;
use std::process::{Command, Stdio};
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
            assert_eq!(code(&o), *want, "{cmd} case {i}: {t}");
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
    assert_eq!(code(&o), 13, "{}", text(&o));
    assert!(text(&o).contains("--memory-limit"), "{}", text(&o));
    // The list of cards needs no config.
    let o = run(&["bisect", "--gpu", "help"], &d);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("rtx3090"), "{}", text(&o));
}
