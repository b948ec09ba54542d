//! Running trials: the binary re-runs itself as `oom-bisect __trial` in a new process group, feeds it
//! the request on stdin, drains stdout and stderr on their own threads (a full pipe would block the
//! child forever), enforces the time limit by killing the whole group, and assembles the report.
//! The [`TrialOracle`] wraps that for the search, with the journal in front.

use crate::estimate;
use crate::journal::Journal;
use crate::settings::DeviceSettings;
use deeplab::Config;
use oom_search::{Candidate, Measurement, Oracle, Outcome};
use oom_trial::{
    assemble, parse_events, BackendKind, ChildExit, Fault, Request, TrialOutcome, TrialReport,
};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The process group of the running child, for the Ctrl-C handler (0: none).
static CHILD_GROUP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_interrupt(_: libc::c_int) {
    let pg = CHILD_GROUP.load(Ordering::SeqCst);
    // SAFETY: kill, write and _exit are async-signal-safe.
    unsafe {
        if pg > 0 {
            libc::kill(-pg, libc::SIGKILL);
        }
        let msg = b"\noom-bisect: interrupted; finished trials are in the journal, re-run the same command to resume\n";
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(crate::exit_codes::INTERRUPTED);
    }
}

/// Ctrl-C (and SIGTERM) kill the running trial's whole group and exit 130. Trials run in their own
/// process group, so the terminal's SIGINT does not reach them: without this they would outlive us.
pub fn install_interrupt_handler() {
    // SAFETY: installs a handler that only calls async-signal-safe functions.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_interrupt as *const () as libc::sighandler_t,
        );
    }
}

/// Runs one trial in a child process.
pub fn run_trial(config: &Config, device: &DeviceSettings, fault: Option<Fault>) -> TrialReport {
    if device.fake {
        return estimate::fake_trial(config, device);
    }
    let started = Instant::now();
    let request = Request {
        config: config.to_toml_string(),
        backend: device.backend,
        ceiling: device.ceiling,
        fault,
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return assemble(&[], ChildExit::NotStarted(e.to_string()), "", 0.0),
    };
    let mut cmd = Command::new(exe);
    cmd.arg("__trial")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::cache::configure(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return assemble(&[], ChildExit::NotStarted(e.to_string()), "", 0.0),
    };
    let pgid = child.id() as i32;
    CHILD_GROUP.store(pgid, Ordering::SeqCst);
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(
            serde_json::to_string(&request)
                .expect("request serialises")
                .as_bytes(),
        );
    }
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );

    let exit = loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                break match (status.code(), status.signal()) {
                    (Some(c), _) => ChildExit::Code(c),
                    (None, Some(s)) => ChildExit::Signal(s),
                    (None, None) => ChildExit::Code(-1),
                }
            }
            Ok(None) if started.elapsed() > device.trial_timeout => {
                // SAFETY: signals the child's own process group, created for it above.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                let _ = child.wait();
                break ChildExit::TimedOut;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break ChildExit::NotStarted(format!("wait failed: {e}")),
        }
    };
    // Grandchildren (a compiler, a helper) die with the trial: nothing may outlive it.
    // SAFETY: as above; the group may already be empty, which is harmless.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    CHILD_GROUP.store(0, Ordering::SeqCst);
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    assemble(
        &parse_events(&stdout),
        exit,
        &stderr,
        started.elapsed().as_secs_f64(),
    )
}

/// The search's view of a trial.
pub fn measurement(r: &TrialReport) -> Measurement {
    let outcome = match r.outcome {
        TrialOutcome::Fits => Outcome::Fits,
        TrialOutcome::Oom => Outcome::Oom,
        TrialOutcome::Error | TrialOutcome::Timeout => Outcome::Inconclusive,
    };
    let note = match (&r.oom, &r.error) {
        (Some(o), _) => format!(
            "out of memory at {}{}",
            o.stage.as_deref().unwrap_or("start"),
            o.bytes
                .map(|b| format!(" allocating {}", oom_trial::fmt_bytes(b)))
                .unwrap_or_default()
        ),
        (None, Some(e)) => format!("{}: {e}", r.outcome.name()),
        _ => String::new(),
    };
    Measurement {
        outcome,
        peak_bytes: r.peak_bytes,
        peak_in_use_bytes: r.peak_in_use_bytes,
        base_bytes: r.base_bytes,
        note,
    }
}

/// Trials for the search: a candidate becomes a config, the journal answers what it already knows,
/// and every new trial is appended to it the moment it ends.
pub struct TrialOracle<'a> {
    pub base: Config,
    pub device: &'a DeviceSettings,
    pub journal: Journal,
    /// Every report, by candidate and attempt, for the report's details.
    pub reports: HashMap<(Candidate, u32), TrialReport>,
    /// Trials answered from the journal instead of run.
    pub resumed: usize,
}

impl Oracle for TrialOracle<'_> {
    fn run(&mut self, candidate: &Candidate, attempt: u32) -> Measurement {
        let config = match self.base.with_overrides(&candidate.to_sets()) {
            Ok(c) => c,
            Err(e) => {
                let mut m = Measurement::new(Outcome::Inconclusive);
                m.note = format!("not a valid configuration: {e}");
                return m;
            }
        };
        if let Err(e) = deeplab::Architecture::new(&config) {
            let mut m = Measurement::new(Outcome::Inconclusive);
            m.note = format!("not a valid configuration: {e}");
            return m;
        }
        let key = config.canonical_key();
        let report = match self.journal.lookup(&key, attempt) {
            Some(r) => {
                self.resumed += 1;
                r
            }
            None => {
                let r = run_trial(&config, self.device, None);
                self.journal.append(&key, attempt, candidate, &r);
                r
            }
        };
        let m = measurement(&report);
        self.reports.insert((candidate.clone(), attempt), report);
        m
    }
}

/// The backend name as reports show it.
pub fn backend_label(device: &DeviceSettings) -> String {
    match (&device.backend, &device.device_name) {
        (_, Some(n)) if device.fake => n.clone(),
        (BackendKind::Cuda, Some(n)) => format!("cuda ({n})"),
        (BackendKind::Cpu, _) => "cpu (burn-flex)".into(),
        (b, None) => b.name().into(),
    }
}
