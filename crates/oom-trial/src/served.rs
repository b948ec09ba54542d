//! `--exec --serve`: one command answers a worker's trials one after another, so that a trial no
//! longer pays the command's start (for PyTorch: the interpreter, `import torch`, the CUDA
//! context): on an H200 a trial in a new process took 8.8–13.2 s, a served one 0.7–1.5 s.
//!
//! [`ServedRunner`] keeps one `__trial` holder per worker alive between trials and hands it each
//! request as a line on its stdin; the holder hands the command the trial's config file and reads
//! its `trial_done` line (`exec::serve`). The holder is started again where the command ended (a
//! crash, the time limit) and where a request needs another ceiling (the `need` step runs without
//! one). Re-runs and retries (`Request::fresh`) need a command that ran no trial before, so that a
//! confirmed boundary was measured by a fresh start too, not only by a process that ran other
//! trials (with more kernels loaded, its allocator used): the worker's spare where it keeps one,
//! else a holder started for it; either way the command is served its one trial as it serves any,
//! never started another way.
//!
//! Whether a command serves may be unknown (`--serve auto`, [`Serves::Unknown`]): its first
//! trial is then a probe (`Request::probe`), given as a served one with the trial's config also on
//! the command line. A command that answers serves from then on; one that ends its trial instead
//! ran it as a process of its own would (its exit is the verdict), and every later trial of the
//! worker runs in a fresh process ([`ProcessRunner`]). No holder starts ahead while it is unknown.
//!
//! The protocol cannot be fooled into a fit: each request carries a random `id` that its
//! `trial_done` must echo; an answer with no request out, naming another request or given twice,
//! and a command that ends (exit 0) with a request unanswered, are errors (`Exited::broke`), and
//! the command is stopped. A served holder is stopped before
//! a fresh trial starts on its worker: under a ballast, or in a worker's share of a card, there
//! is room for one of them.
//!
//! Where the dispatch has room for idle commands beside the trials (`Dispatch::spares`), a worker
//! starts its holder and a spare at once, each with its command started and waiting
//! (`Request::ahead`): its first trial and its next re-run do not wait for the command's start; a
//! spare taken is replaced at once. On the H200 the capacity through the PyTorch reference took
//! 32–35 s with spares against 41 s without, the same boundary: a re-run 8.8–9.0 s
//! against 12.2–13.9 s. A command's first trial is still slow once its start is not: 7.2–7.8 s in
//! a PyTorch started ahead against 0.8–1.7 s for a later one (its first steps' own work, not
//! profiled).

use crate::lines::{read_lines, Drain, MAX_LINE};
use crate::outcome::assemble;
use crate::protocol::{BackendKind, Ceiling, ChildEvent, Request};
use crate::runner::{
    parse_event, unregister_group, ProcessRunner, TrialRunner, EVENT_LINE, STDERR_TAIL,
};
use crate::sync::lock;
use crate::trial_report::{ChildExit, TrialReport};
use std::io::Write;
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a holder told to stop (its input closed) may take to stop its command and leave.
const STOP_GRACE: Duration = Duration::from_secs(4);
/// How long a holder's last events and output may take to arrive once it ended.
const LAST_EVENTS: Duration = Duration::from_secs(2);

/// Whether a `--exec` command serves trials (`--serve on|off|auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    /// It runs one trial per process (`--serve off`).
    No,
    /// Not known until its first trial (`--serve auto`): a command that ends that trial instead of
    /// answering it runs one trial per process from then on.
    Unknown,
    /// It serves (`--serve on`, or shown by its first answer).
    Yes,
}

/// A worker whose `--exec` command serves its trials (see the module documentation).
pub struct ServedRunner {
    base: ProcessRunner,
    holder: Mutex<Option<Holder>>,
    /// A holder started ahead that has run no trial: the next re-run's fresh process, or the
    /// holder's successor. Kept only with `ahead`.
    spare: Mutex<Option<Holder>>,
    /// The request holders are started ahead for (its backend and ceiling; its config only names
    /// a file on the command line), where the dispatch has room for them beside the trials.
    ahead: Option<Request>,
    /// Whether the command serves; `Unknown` until its first trial ends (then no holder starts
    /// ahead: a command that does not serve would run the config on its command line instead of
    /// waiting for its request).
    serves: Mutex<Serves>,
}

impl ServedRunner {
    /// A served worker; with `ahead`, its holder and a spare start at once (once the command is
    /// known to serve), so that its first trial and its first re-run find it already started.
    pub fn new(base: ProcessRunner, ahead: Option<Request>, serves: Serves) -> ServedRunner {
        let runner = ServedRunner {
            base,
            holder: Mutex::new(None),
            spare: Mutex::new(None),
            ahead,
            serves: Mutex::new(serves),
        };
        *lock(&runner.holder) = runner.start_ahead();
        runner.keep_spare();
        runner
    }

    /// A holder started ahead of its first trial, for `ahead`'s backend and ceiling.
    fn start_ahead(&self) -> Option<Holder> {
        if *lock(&self.serves) != Serves::Yes {
            return None;
        }
        let template = self.ahead.as_ref()?;
        let holds = (template.backend, template.ceiling);
        let mut h = Holder::start(&self.base, holds).ok()?;
        h.send(&Request {
            serve: true,
            ahead: true,
            ..self.base.holder_request(template)
        });
        Some(h)
    }

    /// Starts a spare where there is none.
    fn keep_spare(&self) {
        let mut spare = lock(&self.spare);
        if spare.is_none() {
            *spare = self.start_ahead();
        }
    }

    /// The spare, if it holds `holds` (a replacement starts at once); one holding another ceiling
    /// is stopped, so that its room is the trial's.
    fn take_spare(&self, holds: (BackendKind, Ceiling)) -> Option<Holder> {
        let spare = lock(&self.spare).take()?;
        if spare.holds != holds {
            spare.stop();
            return None;
        }
        self.keep_spare();
        Some(spare)
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
    /// It has been given a trial: it is no longer a fresh process.
    used: bool,
}

impl TrialRunner for ServedRunner {
    fn run(&self, request: &Request) -> TrialReport {
        if *lock(&self.serves) == Serves::No {
            return self.base.run(request);
        }
        let mut holder = lock(&self.holder);
        let holds = (request.backend, request.ceiling);
        // A re-run needs a process that ran no trial before; any trial needs its ceiling.
        let unfit = |h: &Holder| h.holds != holds || (request.fresh && h.used);
        if let Some(h) = holder.take_if(|h| unfit(h)) {
            h.stop();
        }
        if holder.is_none() {
            *holder = self.take_spare(holds);
        }
        let started = Instant::now();
        // A re-run with no spare waiting gets a holder of its own, served as every trial is: a
        // command that serves may not run a trial any other way.
        let h = match holder.take() {
            Some(h) => Ok(h),
            None => Holder::start(&self.base, holds)
                .map_err(|e| assemble(&[], ChildExit::NotStarted(e.to_string()), "", 0.0)),
        };
        let report = match h {
            Ok(h) => {
                let (report, kept) = self.serve(h, request, started);
                *holder = kept;
                report
            }
            Err(report) => report,
        };
        self.keep_spare();
        report
    }
}

impl ServedRunner {
    /// One trial on holder `h`: served, and the holder kept for the next; or (the command ended,
    /// or the holder did) ended as a process's trial, the holder with it.
    fn serve(
        &self,
        mut h: Holder,
        asked: &Request,
        started: Instant,
    ) -> (TrialReport, Option<Holder>) {
        let probe = *lock(&self.serves) == Serves::Unknown;
        let request = Request {
            serve: true,
            probe,
            ..self.base.holder_request(asked)
        };
        h.send(&request);
        h.used = true;
        let until = started + self.base.timeout + crate::runner::HOLDER_GRACE;
        let events = h.trial(until);
        let served = events
            .iter()
            .any(|e| matches!(e, ChildEvent::Exited(x) if x.served));
        let secs = || started.elapsed().as_secs_f64();
        if served {
            self.learn(probe, Serves::Yes);
            return (assemble(&events, ChildExit::Code(0), "", secs()), Some(h));
        }
        let (exit, more, stderr) = h.end(&self.base, started, &request);
        let all: Vec<ChildEvent> = events.into_iter().chain(more).collect();
        // Ended by its own exit, neither answering nor breaking the protocol: it does not serve.
        let ran_alone = all
            .iter()
            .any(|e| matches!(e, ChildEvent::Exited(x) if x.code.is_some() && x.broke.is_none()));
        if ran_alone {
            self.learn(probe, Serves::No);
            // Asked to serve with its input detached (`</dev/null`, `srun --input=none`), a
            // command that serves reads the end of its input and exits 0 having trained nothing:
            // an exit 0 that told nothing of a trial is no verdict. The trial runs again in a
            // process of its own, where the command takes its config from its command line.
            if probe && exited_zero(&all) && !told_of_a_trial(&all) {
                return (self.base.run(asked), None);
            }
        }
        (assemble(&all, exit, &stderr, secs()), None)
    }

    /// What a probing trial showed of the command (a command known to serve stays so).
    fn learn(&self, probe: bool, serves: Serves) {
        if probe {
            *lock(&self.serves) = serves;
        }
    }
}

/// Whether the command ended by exiting 0.
fn exited_zero(events: &[ChildEvent]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, ChildEvent::Exited(x) if x.code == Some(0)))
}

/// Whether the command said anything of a trial: a figure line (where it is, a step done, its
/// peak), which the holder turns into events.
fn told_of_a_trial(events: &[ChildEvent]) -> bool {
    events.iter().any(|e| match e {
        ChildEvent::Mark { .. } | ChildEvent::Step { .. } => true,
        ChildEvent::Exited(x) => x.peak_source.as_deref() == Some(crate::exec::peak::OWN_PEAK),
        _ => false,
    })
}

impl Drop for ServedRunner {
    fn drop(&mut self) {
        for h in [&self.holder, &self.spare] {
            if let Some(h) = lock(h).take() {
                h.stop();
            }
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
            used: false,
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
    /// what is left of its group after a moment is killed at once where it never ran a trial (a
    /// spare may still be starting its command, and has nothing to finish).
    fn stop(mut self) {
        drop(self.input.take());
        let grace = if self.used {
            STOP_GRACE
        } else {
            Duration::ZERO
        };
        let until = Instant::now() + grace;
        while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: signals the holder's own process group; it may already be empty.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        unregister_group(self.slot);
    }
}
