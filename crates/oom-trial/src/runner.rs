//! The trial seam: one trait, [`TrialRunner`], that turns a [`Request`] into a classified
//! [`TrialReport`]. The search never knows which runner answers.
//!
//! - [`ProcessRunner`]: the binary re-runs itself as `oom-bisect __trial` in a new process group,
//!   feeds it the request on stdin, drains stdout and stderr on their own threads (a full pipe would
//!   block the child forever), enforces the time limit by killing the whole group, and assembles the
//!   report from what the child left behind. The child cannot outlive us: it dies with its parent
//!   (`PR_SET_PDEATHSIG`), and Ctrl-C, SIGTERM and SIGHUP kill its group before we exit.
//!
//! A process runner given `Engine::Estimate` requests runs the estimate in the child: the whole
//! path of a real trial (spawn, protocol, classification), without training.

use crate::lines::{Drain, MAX_LINE};
use crate::outcome::assemble;
use crate::protocol::{ChildEvent, Engine, Request, SUBCOMMAND};
use crate::trial_report::{ChildExit, TrialReport};
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// Runs one trial to its end and classifies it. A trial that cannot even start is an `error`
/// report, never a panic.
pub trait TrialRunner {
    fn run(&self, request: &Request) -> TrialReport;
}

/// The exit code after an interruption; what was measured is in the journal.
pub const INTERRUPTED: i32 = 130;

/// Longest event line read from a child (a panic's message included).
pub(crate) const EVENT_LINE: usize = 1 << 20;
/// How much of a child's stderr is kept: its last lines, for classification and errors.
pub(crate) const STDERR_TAIL: usize = 64 << 10;
/// How long a pipe may stay open after the trial's group was killed.
const PIPE_GRACE: Duration = Duration::from_secs(2);
/// A `--exec` holder enforces the time limit itself (it kills and sweeps what the command
/// started, then says so); the parent kills the holder only this much later.
pub(crate) const HOLDER_GRACE: Duration = Duration::from_secs(5);

/// Trials that may run at once (one per worker of a pool); more workers than this are refused.
pub const MAX_RUNNING: usize = 256;

/// The process groups of the running children, for the signal handler (0: a free slot). A fixed
/// array of atomics: the handler may read it at any moment, and may not lock or allocate.
static CHILD_GROUPS: [AtomicI32; MAX_RUNNING] = [const { AtomicI32::new(0) }; MAX_RUNNING];

/// Records a running child's group; the slot to clear when it ends.
fn register_group(pg: i32) -> Option<usize> {
    CHILD_GROUPS.iter().position(|s| {
        s.compare_exchange(0, pg, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    })
}

pub(crate) fn unregister_group(slot: Option<usize>) {
    if let Some(i) = slot {
        CHILD_GROUPS[i].store(0, Ordering::SeqCst);
    }
}

/// Sends `sig` to every running trial's process group.
fn signal_running(sig: libc::c_int) {
    for s in &CHILD_GROUPS {
        let pg = s.load(Ordering::SeqCst);
        if pg > 0 {
            // SAFETY: signals a trial's own process group; it may already be gone, which is harmless.
            unsafe { libc::kill(-pg, sig) };
        }
    }
}

/// How long a launcher (`srun`) gets after SIGTERM to cancel its job step before SIGKILL: killed
/// outright, srun cannot tell Slurm, and the step would hold its GPU until Slurm notices.
const LAUNCHER_GRACE: libc::timespec = libc::timespec {
    tv_sec: 0,
    tv_nsec: 300_000_000,
};

/// Kills every running trial's process group (a pool dropping the trials it started ahead).
pub fn kill_running_trials() {
    signal_running(libc::SIGTERM);
    // SAFETY: nanosleep only reads the timespec it is given.
    unsafe { libc::nanosleep(&LAUNCHER_GRACE, std::ptr::null_mut()) };
    signal_running(libc::SIGKILL);
}

/// Set by the interrupt handler before it kills the trials: a trial that ends in that moment was
/// killed by us, and says nothing about its configuration (the pool does not journal it).
static INTERRUPTING: AtomicBool = AtomicBool::new(false);

/// Whether this process is being interrupted (see `INTERRUPTING`).
pub fn interrupting() -> bool {
    INTERRUPTING.load(Ordering::SeqCst)
}

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTING.store(true, Ordering::SeqCst);
    // SAFETY: kill, nanosleep, write and _exit are async-signal-safe; the array is read with
    // atomics only.
    unsafe {
        signal_running(libc::SIGTERM);
        libc::nanosleep(&LAUNCHER_GRACE, std::ptr::null_mut());
        signal_running(libc::SIGKILL);
        let msg = b"\noom-bisect: interrupted; finished trials are in the journal, re-run the same command to resume\n";
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(INTERRUPTED);
    }
}

const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Ctrl-C, SIGTERM and SIGHUP (a closed terminal or ssh connection) kill the running trial's whole
/// group and exit 130. Trials run in their own process group, so the terminal's SIGINT does not
/// reach them: without this they would outlive us.
pub fn install_interrupt_handler() {
    for sig in STOP_SIGNALS {
        // SAFETY: installs a handler that only calls async-signal-safe functions.
        unsafe { libc::signal(sig, on_interrupt as *const () as libc::sighandler_t) };
    }
}

/// Blocks the stop signals until dropped, so that a child is never spawned and left unrecorded: a
/// signal that arrives in between is delivered when the guard drops, once the group is known.
struct SignalsHeld(libc::sigset_t);

impl SignalsHeld {
    fn new() -> SignalsHeld {
        // SAFETY: sigset_t is plain data initialised by sigemptyset; pthread_sigmask only reads it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in STOP_SIGNALS {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            SignalsHeld(old)
        }
    }
}

impl Drop for SignalsHeld {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// Trials in a child process: this binary's hidden `__trial` subcommand.
#[derive(Debug, Clone, Default)]
pub struct ProcessRunner {
    /// Past this, the child's group is killed and the trial is a timeout.
    pub timeout: Duration,
    /// The kernel-cache directory children share (`None`: no persistent cache).
    pub kernel_cache: Option<PathBuf>,
    /// Where an `--exec` command's Python keeps its bytecode ([`crate::cache::python_bytecode`]).
    pub python_bytecode: Option<PathBuf>,
    /// Words run before the binary, e.g. `srun -n1 --exact`: the trial then runs wherever that
    /// launcher puts it (a Slurm job step), with the request on its stdin as ever.
    pub launcher: Vec<String>,
    /// Extra environment for the child, e.g. `CUDA_VISIBLE_DEVICES` naming this worker's GPU.
    pub env: Vec<(String, String)>,
    /// How the child holds a CUDA ceiling: a cap lets several workers share one GPU.
    pub ceiling_by: crate::protocol::CeilingBy,
}

impl TrialRunner for ProcessRunner {
    fn run(&self, request: &Request) -> TrialReport {
        let started = Instant::now();
        let not_started = |why: String| assemble(&[], ChildExit::NotStarted(why), "", 0.0);
        let (mut child, slot) = match self.spawn() {
            Ok(c) => c,
            Err(e) => return not_started(e.to_string()),
        };
        let pgid = child.id() as i32;
        if let Some(mut stdin) = child.stdin.take() {
            let line =
                serde_json::to_string(&self.holder_request(request)).expect("a request serialises");
            // A child that died at once cannot read it; how it ended tells the rest.
            let _ = stdin.write_all(line.as_bytes());
        }
        // The events are ours (lines of a bounded size); stderr may carry a command's output, of
        // which a tail is enough to classify and report.
        let out = Drain::start(child.stdout.take(), EVENT_LINE, usize::MAX);
        let err = Drain::start(child.stderr.take(), MAX_LINE, STDERR_TAIL);
        let exit = self.wait(&mut child, pgid, started, request);
        // Grandchildren (a compiler, a helper) die with the trial: nothing may outlive it.
        // SAFETY: signals the child's own process group; it may already be empty, which is harmless.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        unregister_group(slot);
        // A process that left the group may still hold a pipe: its end is waited for briefly.
        let until = Instant::now() + PIPE_GRACE;
        let stdout = out.take(until);
        let stderr = err.take(until);
        let wall = started.elapsed().as_secs_f64();
        let mut r = assemble(&parse_events(&stdout), exit, &stderr, wall);
        r.verdict = r.verdict.under(&request.engine);
        r
    }
}

impl ProcessRunner {
    /// The request as this runner's child gets it: with its time limit and how it holds the
    /// ceiling.
    pub(crate) fn holder_request(&self, request: &Request) -> Request {
        Request {
            timeout_seconds: Some(self.timeout.as_secs_f64()),
            ceiling_by: self.ceiling_by,
            ..request.clone()
        }
    }

    /// Starts `__trial` in a new process group and records the group before any stop signal can be
    /// handled.
    pub(crate) fn spawn(&self) -> std::io::Result<(Child, Option<usize>)> {
        let exe = std::env::current_exe()?;
        let mut cmd = match self.launcher.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.arg(SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        crate::cache::configure(&mut cmd, self.kernel_cache.as_deref());
        crate::cache::python_bytecode(&mut cmd, self.python_bytecode.as_deref());
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
        // functions (sigprocmask, prctl, getppid, _exit).
        unsafe {
            cmd.pre_exec(move || {
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                // SIGTERM when the thread that forked us ends (the parent died, however): the child
                // then kills its own group (see `child::main`). The parent may have died before
                // prctl: then we are already an orphan, and leave.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            })
        };
        let held = SignalsHeld::new();
        let child = cmd.spawn()?;
        let slot = register_group(child.id() as i32);
        drop(held);
        Ok((child, slot))
    }

    /// Waits for the child, killing its group at the time limit (a `--exec` holder's a little
    /// later: it stops its command itself).
    pub(crate) fn wait(
        &self,
        child: &mut Child,
        pgid: i32,
        started: Instant,
        request: &Request,
    ) -> ChildExit {
        let limit = match request.engine {
            Engine::Exec { .. } => self.timeout + HOLDER_GRACE,
            _ => self.timeout,
        };
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    return match (status.code(), status.signal()) {
                        (Some(c), _) => ChildExit::Code(c),
                        (None, Some(s)) => ChildExit::Signal(s),
                        (None, None) => ChildExit::Code(-1),
                    }
                }
                Ok(None) if started.elapsed() > limit => {
                    // SAFETY: signals the child's own process group, created for it in `spawn`.
                    unsafe {
                        if !self.launcher.is_empty() {
                            libc::kill(-pgid, libc::SIGTERM);
                            libc::nanosleep(&LAUNCHER_GRACE, std::ptr::null_mut());
                        }
                        libc::kill(-pgid, libc::SIGKILL)
                    };
                    let _ = child.wait();
                    return ChildExit::TimedOut;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return ChildExit::NotStarted(format!("wait failed: {e}")),
            }
        }
    }
}

/// Parses the child's stdout: one event per line; other lines are ignored (a library may print).
pub fn parse_events(stdout: &str) -> Vec<ChildEvent> {
    stdout.lines().filter_map(parse_event).collect()
}

/// One line of the child's stdout as an event, if it is one.
pub(crate) fn parse_event(line: &str) -> Option<ChildEvent> {
    serde_json::from_str(line.trim()).ok()
}
