//! The trial report (`trial_report.rs`): assembled from what the child left behind (its events, how it ended, its
//! stderr) and classified exactly once. The order of precedence: an allocation failure anywhere is
//! `oom`; any other panic is `error`; then the way the process ended; `fits` only with a value
//! read back after the last step (a non-finite one is a measured run that diverged: `diverged`).

use crate::classify::{
    classify_message, classify_output, in_use_at_failure, traceback_place, MessageKind,
};
use crate::protocol::{exit, ChildEvent, Exited, Location, Stage};
use crate::trial_report::{
    ChildExit, Evidence, OomInfo, StageMemory, Started, StepRecord, TrialReport, Verdict,
};
use deeplab::Phase;

/// What the events said beyond the readings: where the child last was, its panics, its check value.
#[derive(Default)]
struct Trace {
    last_at: Option<Location>,
    panics: Vec<(String, String)>,
    done: Option<f64>,
    /// `--exec`: how the user's command ended.
    exited: Option<Exited>,
    /// Each reading's place, with its place in the trial's stream.
    marks: Vec<(Location, usize)>,
}

/// Assembles and classifies a trial from what the child left behind.
pub fn assemble(
    events: &[ChildEvent],
    exit: ChildExit,
    stderr: &str,
    wall_seconds: f64,
) -> TrialReport {
    let mut r = TrialReport::empty(exit.clone(), wall_seconds);
    let mut trace = Trace::default();
    for e in events {
        read_event(&mut r, &mut trace, e);
    }
    summarise(&mut r);
    r.verdict = classify(&r, trace, exit, stderr);
    // What was in use when an allocation failed was held at once too: the peak is not below it.
    if let Some(in_use) = r.oom().and_then(|o| o.in_use_bytes) {
        r.memory.peak_bytes = r.memory.peak_bytes.max(Some(in_use));
    }
    r
}

/// How a `--exec` holder's command ended: its peak (whether it served the trial is its verdict's
/// evidence).
fn read_exit(r: &mut TrialReport, t: &mut Trace, x: &Exited) {
    r.memory.peak_bytes = x.peak_bytes;
    r.memory.peak_source = x.peak_source.clone();
    t.exited = Some(x.clone());
}

/// Folds one event into the report.
fn read_event(r: &mut TrialReport, t: &mut Trace, e: &ChildEvent) {
    match e {
        ChildEvent::Place(p) => r.place = Some(p.clone()),
        ChildEvent::Start {
            backend,
            device,
            ceiling_bytes,
            context_bytes,
            seconds,
            ..
        } => {
            r.timing.ready_seconds = Some(*seconds);
            r.started = Some(Started {
                backend: *backend,
                device: device.clone(),
                ceiling_bytes: *ceiling_bytes,
                context_bytes: *context_bytes,
            });
        }
        ChildEvent::Built {
            in_use_bytes,
            params,
            seconds,
        } => {
            r.timing.built_seconds = Some(*seconds);
            r.memory.base_bytes = Some(*in_use_bytes);
            r.memory.params = Some(*params);
            t.last_at = Some(Location {
                step: 0,
                phase: Phase::Forward,
                stage: Stage::Setup,
            });
        }
        ChildEvent::Mark {
            at,
            in_use_bytes,
            device_bytes,
            seconds,
            events,
        } => {
            if let Some(n) = events {
                t.marks.push((at.clone(), *n));
            }
            let stage = StageMemory {
                step: at.step,
                phase: at.phase,
                name: at.stage.to_string(),
                in_use_bytes: *in_use_bytes,
                device_bytes: *device_bytes,
                seconds: *seconds,
            };
            read_mark(r, t, stage, at);
        }
        ChildEvent::Step {
            step,
            seconds,
            in_use_bytes,
            loss,
        } => r.memory.steps.push(StepRecord {
            step: *step,
            seconds: *seconds,
            in_use_after_bytes: *in_use_bytes,
            loss: *loss,
        }),
        ChildEvent::Panic { thread, message } => t.panics.push((thread.clone(), message.clone())),
        ChildEvent::Exited(x) => read_exit(r, t, x),
        ChildEvent::Replayed(x) => r.memory.allocator = Some(x.clone()),
        ChildEvent::Done {
            check,
            peak_bytes,
            peak_in_use_bytes,
        } => {
            t.done = Some(*check);
            let m = &mut r.memory;
            m.peak_bytes = Some(*peak_bytes);
            m.peak_in_use_bytes = m.peak_in_use_bytes.max(Some(*peak_in_use_bytes));
        }
    }
}

/// A measuring point: its stage's memory, and where the trial last was.
fn read_mark(r: &mut TrialReport, t: &mut Trace, stage: StageMemory, at: &Location) {
    let m = &mut r.memory;
    m.peak_in_use_bytes = m.peak_in_use_bytes.max(Some(stage.in_use_bytes));
    m.stages.push(stage);
    t.last_at = Some(at.clone());
}

/// The figures derived from the readings: the peak of an unfinished trial, what outlives a step,
/// and growth across steps.
fn summarise(r: &mut TrialReport) {
    let m = &mut r.memory;
    if m.peak_bytes.is_none() {
        // A trial that did not finish still says how far memory got.
        m.peak_bytes = m.stages.iter().map(|s| s.device_bytes).max();
    }
    // What does not scale with the batch: parameters, gradients' buffers and optimizer state, read
    // after the last step, when the activations are gone.
    if let Some(last) = m.steps.last() {
        m.base_bytes = Some(last.in_use_after_bytes);
    }
    // Growth across steps. The first step may make what every later one holds (the optimizer
    // state, where it was not made before it), so with three steps or more it is read from the
    // second on; a run of two steps (the `pytorch` memory model's) made its state first.
    let from = match m.steps.len() {
        0 | 1 => return,
        2 => &m.steps[..],
        _ => &m.steps[1..],
    };
    let (first, last) = (
        from[0].in_use_after_bytes as i64,
        from[from.len() - 1].in_use_after_bytes as i64,
    );
    m.leak_bytes_per_step = Some((last - first) / (from.len() as i64 - 1));
}

/// What the trial child says about itself on stderr (`oom-bisect __trial: could not reserve
/// ballast: … CUDA_ERROR_OUT_OF_MEMORY`): never read as the trial's own out-of-memory.
const CHILD_OWN: &str = "oom-bisect __trial:";

/// The first allocation failure among the panics and stderr lines: its text and size.
fn allocation_failure(panics: &[(String, String)], stderr: &str) -> Option<(String, Option<u64>)> {
    panics
        .iter()
        .map(|(th, m)| (format!("panic on thread '{th}': {m}"), classify_message(m)))
        .chain(
            stderr
                .lines()
                .filter(|l| !l.starts_with(CHILD_OWN))
                .map(|l| (l.to_string(), classify_message(l))),
        )
        .find_map(|(m, k)| match k {
            MessageKind::AllocationFailure { bytes } => Some((m, bytes)),
            _ => None,
        })
}

/// An out-of-memory where the last reading was taken, decided by `evidence`.
fn oom_at(
    at: Option<&Location>,
    message: String,
    bytes: Option<u64>,
    evidence: Evidence,
) -> Verdict {
    Verdict::Oom {
        failure: OomInfo {
            phase: at.map(|l| l.stage.phase_after(l.phase)),
            stage: at.map(|l| l.stage.clone()),
            step: at.map(|l| l.step),
            bytes,
            in_use_bytes: in_use_at_failure(&message),
            // It may echo a command's output: cut (the CLI makes it safe to print).
            message: deeplab::config::cut(&message, MESSAGE_CHARS),
            replayed: false,
        },
        evidence,
    }
}

/// The verdict, in order of precedence (see the module documentation).
fn classify(r: &TrialReport, t: Trace, exit: ChildExit, stderr: &str) -> Verdict {
    if let (Some(x), false) = (&t.exited, exit == ChildExit::TimedOut) {
        let verdict = classify_exec(r, x, t.last_at.as_ref(), stderr);
        return judged_by_replay(r, verdict, &t.marks);
    }
    if let Some((message, bytes)) = allocation_failure(&t.panics, stderr) {
        return oom_at(t.last_at.as_ref(), message, bytes, Evidence::Device);
    }
    if let Some((thread, message)) = t.panics.first() {
        return Verdict::Error {
            reason: format!("panic on thread '{thread}': {message}"),
        };
    }
    let verdict = by_exit(exit, &t, stderr, r);
    judged_by_replay(r, verdict, &t.marks)
}

/// A fit whose run reached its end where nothing held the ceiling (the CPU; a run under a looser
/// ceiling) is judged by the replay of its stream: out of memory where the replay is, at the
/// reading before the request that cannot be served, else a fit the replay decided. A refusal by
/// the device (a panic, a command's out-of-memory) stays the device's.
fn judged_by_replay(r: &TrialReport, verdict: Verdict, marks: &[(Location, usize)]) -> Verdict {
    let Verdict::Fits { diverged, .. } = &verdict else {
        return verdict;
    };
    let Some(a) = r
        .memory
        .allocator
        .as_ref()
        .filter(|a| !a.device_held_ceiling)
    else {
        return verdict;
    };
    let Some(f) = a.fails_at else {
        return Verdict::Fits {
            evidence: Evidence::Replayed,
            diverged: diverged.clone(),
        };
    };
    let at = marks
        .iter()
        .rev()
        .find(|(_, n)| *n <= f.index)
        .map(|(l, _)| l);
    let retried = match a.retries_at_ceiling {
        0 => "with nothing cached to release".to_string(),
        1 => "after releasing its cache and retrying once".into(),
        n => format!("after releasing its cache and retrying {n} times"),
    };
    let message = format!(
        "PyTorch's caching allocator, replaying this trial's stream under the ceiling, cannot \
         serve a request of {} bytes with {} bytes allocated, {retried}",
        f.bytes, f.allocated_bytes
    );
    let mut verdict = oom_at(at, message, Some(f.bytes), Evidence::Replayed);
    if let Verdict::Oom { failure, .. } = &mut verdict {
        failure.in_use_bytes = Some(f.allocated_bytes);
        failure.replayed = true;
    }
    verdict
}

/// How a measured run's numbers diverged, if they did: from the first step whose loss was not
/// finite, else from the value read back after the last step.
fn divergence(steps: &[StepRecord], check: f64) -> Option<String> {
    if let Some(s) = steps.iter().find(|s| !s.loss.is_finite()) {
        return Some(format!("the loss was {} in step {}", s.loss, s.step + 1));
    }
    (!check.is_finite()).then(|| format!("the value read back after the last step was {check}"))
}

/// A `--exec` command: exit 0 fits; a failure whose message (the last failure line of its output,
/// [`crate::classify::failure_message`]) is an out-of-memory, or the kernel's OOM killer killing one of its own
/// processes, is an out-of-memory; any other failure is an error. An out-of-memory that the
/// command logged, recovered from or printed in a dump is not its failure; a command that printed
/// one and still exited 0 (a batch-size finder) fits. A fit or an out-of-memory of a command that
/// did not keep to the ceiling it held itself (`Exited::unheld`) is an error: it measured another
/// card.
fn classify_exec(r: &TrialReport, x: &Exited, at: Option<&Location>, stderr: &str) -> Verdict {
    let verdict = exec_verdict(r, x, at, stderr);
    match (&x.unheld, verdict.evidence()) {
        (Some(why), Some(_)) => Verdict::Error {
            reason: why.clone(),
        },
        _ => verdict,
    }
}

fn exec_verdict(r: &TrialReport, x: &Exited, at: Option<&Location>, stderr: &str) -> Verdict {
    if let Some(why) = &x.broke {
        return Verdict::Error {
            reason: format!("the served protocol was broken: {why}"),
        };
    }
    if x.timed_out {
        return Verdict::Timeout {
            reason: format!(
                "the command was stopped at the time limit ({:.0} s), with everything it started",
                r.timing.wall_seconds
            ),
        };
    }
    // A served command's answer, or the end of a process of its own.
    let evidence = match x.served {
        true => Evidence::Served,
        false => Evidence::Exit,
    };
    if x.code == Some(0) {
        return Verdict::Fits {
            evidence,
            diverged: None,
        };
    }
    // A served command's output in this trial alone; the holder's stderr holds every trial's.
    let output = command_output(x.output.as_deref().unwrap_or(stderr));
    // A kill ends the command whatever it printed before: an out-of-memory only where the
    // kernel's OOM killer did it. A shell's 128 + n is taken as the kill it reports. SIGABRT is
    // not a kill: it is how a process ends itself on an uncaught exception (C++'s `terminate`
    // after `std::bad_alloc`, a Rust panic built to abort), and its failing message tells.
    let aborted = x.signal == Some(libc::SIGABRT) || x.code == Some(128 + libc::SIGABRT);
    let killed = !aborted && (x.signal.is_some() || x.code.is_some_and(|c| c > 128));
    // The holder read the failure stream by stream where it could (`Exited::failure`).
    let (message, kind) = match &x.failure {
        Some(f) => (Some(f.clone()), classify_message(f)),
        None => classify_output(&output),
    };
    if let (Some(m), MessageKind::AllocationFailure { bytes }, false) = (message, kind, killed) {
        let traced = traced_place(at, &output);
        return oom_at(traced.as_ref().or(at), m, bytes, evidence);
    }
    if x.oom_killer {
        let how = x.oom_kill_check.as_deref().unwrap_or("the kernel");
        let m = format!("killed by the kernel's OOM killer (told by {how})");
        return oom_at(at, m, None, evidence);
    }
    Verdict::Error {
        reason: exec_failure(x) + &tail(&output),
    }
}

/// Where a command that reported no stage failed, from the traceback it printed (if any).
fn traced_place(at: Option<&Location>, output: &str) -> Option<Location> {
    if at.is_some_and(|l| l.stage != Stage::Setup) {
        return None;
    }
    let (phase, stage) = traceback_place(output)?;
    Some(Location {
        step: at.map_or(0, |l| l.step),
        phase,
        stage,
    })
}

/// What a failed command's end says, with a hint where a kill cannot be told apart from the OOM
/// killer's.
fn exec_failure(x: &Exited) -> String {
    if x.served {
        return "the command said its trial failed (it serves trials: --serve)".into();
    }
    match (x.signal, x.code) {
        (Some(s), _) if s == libc::SIGKILL && x.oom_kill_check.is_none() => format!(
            "the command was killed by signal {s} (SIGKILL); whether by the kernel's OOM killer \
             cannot be told here (no cgroup of its own could be made and the kernel log is not \
             readable), so it is not counted as an out-of-memory: run where oom-bisect may make a \
             cgroup, or let the command print its out-of-memory"
        ),
        (Some(s), _) => format!("the command was killed by signal {s}"),
        (None, Some(c)) if c > 128 => format!(
            "the command exited with code {c} (a shell's report of a process killed by signal \
             {}, or an exit with that code; not by the kernel's OOM killer{})",
            c - 128,
            match &x.oom_kill_check {
                Some(how) => format!(", by {how}"),
                None => ", as far as can be told here".into(),
            }
        ),
        (None, c) => format!(
            "the command exited with code {}",
            c.map(|c| c.to_string()).unwrap_or_else(|| "?".into())
        ),
    }
}

/// The command's own output in the holder's stderr: without the holder's own lines.
fn command_output(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with(CHILD_OWN))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The verdict of a child that neither ran out of memory nor panicked, from how it ended: a fit
/// only with a value read back after the last step, which the device decided (the replay may
/// still judge it, [`judged_by_replay`]).
fn by_exit(exit: ChildExit, t: &Trace, stderr: &str, r: &TrialReport) -> Verdict {
    let error = |reason: String| Verdict::Error { reason };
    match exit {
        ChildExit::TimedOut => Verdict::Timeout {
            reason: format!(
                "killed after the time limit ({:.0} s), last at {}",
                r.timing.wall_seconds,
                (t.last_at.as_ref())
                    .map(|l| format!("step {} {}", l.step + 1, l.stage))
                    .unwrap_or_else(|| "start".into())
            ),
        },
        ChildExit::NotStarted(why) => error(format!("the trial process could not start: {why}")),
        ChildExit::Signal(sig) => error(format!(
            "the trial process was killed by signal {sig}{}",
            tail(stderr)
        )),
        ChildExit::Code(code) => match t.done {
            // The value read back proves the steps ran; a non-finite one (diverged numbers) is
            // still a measured run, and `divergence` says so.
            Some(check) if code == exit::FITS => Verdict::Fits {
                evidence: Evidence::Device,
                diverged: divergence(&r.memory.steps, check),
            },
            _ => error(format!(
                "the trial process exited with code {code} without a result{}",
                tail(stderr)
            )),
        },
    }
}

fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let from = lines.len().saturating_sub(5);
    // Each line cut on its own, so that a huge line cannot push out the last one.
    let lines: Vec<String> = lines[from..]
        .iter()
        .map(|l| deeplab::config::cut(l, MESSAGE_CHARS / 5))
        .collect();
    format!(": {}", lines.join(" | "))
}

/// The longest message or error tail kept in a report (and so in the journal), in characters.
const MESSAGE_CHARS: usize = 2000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial_report::TrialOutcome;

    fn run(losses: &[f64], check: f64) -> TrialReport {
        let mut events: Vec<ChildEvent> = losses
            .iter()
            .enumerate()
            .map(|(step, &loss)| ChildEvent::Step {
                step,
                seconds: 1.0,
                in_use_bytes: 1 << 20,
                loss,
            })
            .collect();
        events.push(ChildEvent::Done {
            check,
            peak_bytes: 2 << 20,
            peak_in_use_bytes: 1 << 20,
        });
        assemble(&events, ChildExit::Code(exit::FITS), "", 2.0)
    }

    /// A run whose numbers left the float range was still run and measured: its memory's verdict
    /// stands, and the report says how it diverged.
    #[test]
    fn a_diverged_run_is_a_measured_fit() {
        let r = run(&[1.5, f64::NAN], f64::NAN);
        assert_eq!(r.outcome(), TrialOutcome::Fits, "{r:?}");
        assert_eq!(r.memory.peak_bytes, Some(2 << 20));
        assert_eq!(r.diverged(), Some("the loss was NaN in step 2"));
        let r = run(&[1.5, 1.4], f64::INFINITY);
        assert_eq!(r.outcome(), TrialOutcome::Fits);
        assert!(r.diverged().unwrap().contains("inf"));
        let r = run(&[1.5, 1.4], 3.0);
        assert_eq!((r.outcome(), r.diverged()), (TrialOutcome::Fits, None));
        // Without the value read back, the steps are not known to have run.
        let events = [ChildEvent::Step {
            step: 0,
            seconds: 1.0,
            in_use_bytes: 1,
            loss: 1.0,
        }];
        let r = assemble(&events, ChildExit::Code(exit::FITS), "", 2.0);
        assert_eq!(r.outcome(), TrialOutcome::Error);
    }

    /// A command that held its ceiling itself and went past it measured another card: neither its
    /// fit nor its out-of-memory stands; its own failure stays its own.
    #[test]
    fn a_command_past_the_ceiling_it_held_is_an_error() {
        let exited = |code, unheld: Option<&str>| {
            ChildEvent::Exited(Exited {
                code: Some(code),
                peak_bytes: Some(30 << 30),
                unheld: unheld.map(str::to_string),
                ..Exited::default()
            })
        };
        let past = Some("the command's processes used 30.00 GiB, more than the ceiling");
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
        for (code, stderr) in [(0, ""), (1, oom)] {
            let r = assemble(&[exited(code, past)], ChildExit::Code(0), stderr, 2.0);
            assert_eq!(r.outcome(), TrialOutcome::Error, "{r:?}");
            assert!(r.oom().is_none() && r.error() == past, "{r:?}");
            let r = assemble(&[exited(code, None)], ChildExit::Code(0), stderr, 2.0);
            assert_ne!(r.outcome(), TrialOutcome::Error, "{r:?}");
        }
        let r = assemble(
            &[exited(2, past)],
            ChildExit::Code(0),
            "usage: bad flag\n",
            2.0,
        );
        assert!(r.error().unwrap().contains("exited with code 2"));
    }
}
