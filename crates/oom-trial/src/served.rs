//! `--exec --serve`: one command answers a worker's trials one after another, so that a trial no
//! longer pays the command's start (for PyTorch: the interpreter, `import torch`, the CUDA
//! context): on an H200 a trial in a new process took 8.8–13.2 s, a served one 0.7–1.5 s (GPU run
//! 45).
//!
//! [`ServedRunner`] keeps one `__trial` holder per worker alive between trials and hands it each
//! request as a line on its stdin; the holder hands the command the trial's config file and reads
//! its `trial_done` line (`exec::serve`). The holder is started again where the command ended (a
//! crash, the time limit), where a request needs another ceiling (the `need` step runs without
//! one), and for every re-run (`Request::fresh`): confirmations and retries run as a plain
//! [`ProcessRunner`] trial in a process of their own, so that a confirmed boundary was measured by a
//! fresh start too, not only by a process that ran other trials before (with more kernels loaded,
//! its allocator used). A served holder is stopped before a fresh trial starts on its worker:
//! under a ballast, or in a worker's share of a card, there is room for one of them.

use crate::lines::{read_lines, Drain, MAX_LINE};
use crate::outcome::{assemble, ChildExit, TrialReport};
use crate::protocol::{BackendKind, Ceiling, ChildEvent, Request};
use crate::runner::{
    parse_event, unregister_group, ProcessRunner, TrialRunner, EVENT_LINE, STDERR_TAIL,
};
use crate::sync::lock;
use std::io::Write;
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a holder told to stop (its input closed) may take to stop its command and leave.
const STOP_GRACE: Duration = Duration::from_secs(4);
/// How long a holder's last events and output may take to arrive once it ended.
const LAST_EVENTS: Duration = Duration::from_secs(2);

/// A worker whose `--exec` command serves its trials (see the module documentation).
pub struct ServedRunner {
    base: ProcessRunner,
    holder: Mutex<Option<Holder>>,
}

impl ServedRunner {
    pub fn new(base: ProcessRunner) -> ServedRunner {
        ServedRunner {
            base,
            holder: Mutex::new(None),
        }
    }
}

/// A running holder with its command.
struct Holder {
    child: Child,
    slot: Option<usize>,
    input: Option<ChildStdin>,
    events: Receiver<String>,
    stderr: Drain,
    /// The backend and ceiling it holds.
    holds: (BackendKind, Ceiling),
}

impl TrialRunner for ServedRunner {
    fn run(&self, request: &Request) -> TrialReport {
        let mut holder = lock(&self.holder);
        let holds = (request.backend, request.ceiling);
        if request.fresh || holder.as_ref().is_some_and(|h| h.holds != holds) {
            if let Some(h) = holder.take() {
                h.stop();
            }
        }
        if request.fresh {
            return self.base.run(request);
        }
        let started = Instant::now();
        if holder.is_none() {
            match Holder::start(&self.base, holds) {
                Ok(h) => *holder = Some(h),
                Err(e) => return assemble(&[], ChildExit::NotStarted(e.to_string()), "", 0.0),
            }
        }
        let h = holder.as_mut().expect("a holder was started");
        let request = Request {
            serve: true,
            ..self.base.holder_request(request)
        };
        h.send(&request);
        let until = started + self.base.timeout + crate::runner::HOLDER_GRACE;
        let events = h.trial(until);
        let served = events
            .iter()
            .any(|e| matches!(e, ChildEvent::Exited(x) if x.served));
        if served {
            return assemble(
                &events,
                ChildExit::Code(0),
                "",
                started.elapsed().as_secs_f64(),
            );
        }
        // The command ended, or the holder did: the trial ends as a process's does.
        let h = holder.take().expect("the holder is still here");
        let (exit, more, stderr) = h.end(&self.base, started, &request);
        let all: Vec<ChildEvent> = events.into_iter().chain(more).collect();
        assemble(&all, exit, &stderr, started.elapsed().as_secs_f64())
    }
}

impl Drop for ServedRunner {
    fn drop(&mut self) {
        if let Some(h) = lock(&self.holder).take() {
            h.stop();
        }
    }
}

impl Holder {
    fn start(base: &ProcessRunner, holds: (BackendKind, Ceiling)) -> std::io::Result<Holder> {
        let (mut child, slot) = base.spawn()?;
        let (tx, events) = mpsc::channel();
        let out = child.stdout.take();
        std::thread::spawn(move || {
            if let Some(out) = out {
                read_lines(out, EVENT_LINE, |l| drop(tx.send(l)), || {});
            }
        });
        Ok(Holder {
            input: child.stdin.take(),
            stderr: Drain::start(child.stderr.take(), MAX_LINE, STDERR_TAIL),
            child,
            slot,
            events,
            holds,
        })
    }

    /// Hands the holder a request. One that died cannot read it; how it ended tells the rest.
    fn send(&mut self, request: &Request) {
        let line = serde_json::to_string(request).expect("a request serialises");
        if let Some(input) = &mut self.input {
            let _ = writeln!(input, "{line}").and_then(|()| input.flush());
        }
    }

    /// The trial's events, up to its `Exited`, the holder's end or `until`.
    fn trial(&mut self, until: Instant) -> Vec<ChildEvent> {
        let mut events = vec![];
        loop {
            match self
                .events
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    let Some(e) = parse_event(&line) else {
                        continue;
                    };
                    let last = matches!(e, ChildEvent::Exited(_));
                    events.push(e);
                    if last {
                        return events;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return events,
            }
        }
    }

    /// The holder is ending (its command ended) or is past its time: how it ended, its last
    /// events and its stderr's tail.
    fn end(
        mut self,
        base: &ProcessRunner,
        started: Instant,
        request: &Request,
    ) -> (ChildExit, Vec<ChildEvent>, String) {
        let pgid = self.child.id() as i32;
        let exit = base.wait(&mut self.child, pgid, started, request);
        // SAFETY: signals the holder's own process group; it may already be empty.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        unregister_group(self.slot);
        let until = Instant::now() + LAST_EVENTS;
        let more = std::iter::from_fn(|| {
            self.events
                .recv_timeout(until.saturating_duration_since(Instant::now()))
                .ok()
        })
        .filter_map(|l| parse_event(&l))
        .collect();
        (exit, more, self.stderr.take(until))
    }

    /// No more trials here: the holder hears the end of its input, stops its command and leaves;
    /// what is left of its group after a moment is killed.
    fn stop(mut self) {
        drop(self.input.take());
        let until = Instant::now() + STOP_GRACE;
        while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: signals the holder's own process group; it may already be empty.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        unregister_group(self.slot);
    }
}
