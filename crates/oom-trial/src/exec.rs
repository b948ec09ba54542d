//! `--exec`: the user's own command as the trial. The `__trial` child becomes its holder:
//!
//! - it writes the candidate's config (every override applied) to a file of its own;
//! - it puts the ceiling in place: on CUDA the driver-level ballast of a burn trial, with its own
//!   context left out of the ceiling (that context would not exist on the smaller card), so the
//!   command, its CUDA context included, has exactly the ceiling; or, for a command that holds its
//!   ceiling itself (`--ceiling-by command`), no ballast and no context, only a watch on the
//!   command's processes (`watch`); on the CPU nothing is enforced and the command only hears
//!   the ceiling (`OOM_BISECT_MEMORY_LIMIT`);
//! - it runs the command through `sh -c` in the trial's process group, so that Ctrl-C or the
//!   parent's death takes the command with it, with its output on a pipe of the holder's own;
//! - while the command runs, it samples the device's memory, turns the command's own
//!   `{"oom_bisect": …}` lines into events, and forwards every other line to stderr;
//! - at the end, or at the time limit, it kills whatever the command left running, however it
//!   escaped, and says how the command ended and whether the kernel's OOM killer killed one of its
//!   processes ([`Exited`], `contain`).
//!
//! The parent classifies (`outcome::classify`): the holder never decides what an exit means.

mod config_file;
pub use config_file::temp_dir;
pub use contain::on_stop;
mod contain;
mod held;
pub(crate) mod peak;
mod spawn;
mod torch_trace;
pub use torch_trace::read_file as read_torch_trace;
#[cfg(feature = "cuda")]
mod watch;

use crate::emit::emit;
use crate::lines::Tail;
use crate::protocol::{BackendKind, ChildEvent, Exited, Request, Stage};
use anyhow::{Context as _, Result};
use config_file::ConfigFile;
use contain::Containment;
use deeplab::Phase;
pub use held::RESIDENT_SOURCE;
use held::{hold, Held};
use peak::Peak;
use serde::Deserialize;
use spawn::{read_output, spawn};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ExitStatus};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use torch_trace::{TorchTrace, Traced};

/// The config file's path, in the command's environment.
pub const CONFIG_ENV: &str = "OOM_BISECT_CONFIG";
/// The ceiling in bytes, in the command's environment (absent when there is none).
pub const LIMIT_ENV: &str = "OOM_BISECT_MEMORY_LIMIT";
/// On CUDA, who holds that ceiling: `ballast` (oom-bisect: nothing for the command to do) or
/// `command` (the command must keep to it itself).
pub const HELD_BY_ENV: &str = "OOM_BISECT_CEILING_BY";
/// `1` in the environment of a command that serves trials (`--serve`): it reads one
/// `{"config": PATH}` line per trial on its stdin and ends each with a `trial_done` line.
pub const SERVE_ENV: &str = "OOM_BISECT_SERVE";
/// How much of a served command's output in one trial is kept for classification.
const OUTPUT_TAIL: usize = 64 << 10;

/// The longest line read whole, so that a figures line (a served trial's `trial_done` with a long
/// traceback as its message) is still read as one; any other line is then cut to [`MAX_LINE`].
const FIGURES_LINE: usize = 1 << 20;
/// Replaced in the command by the config file's path, as one shell word.
pub const CONFIG_PLACEHOLDER: &str = "{config}";
/// How often memory is read while the command runs: device memory is one driver call; resident
/// memory on the CPU a walk over /proc.
const SAMPLE_CUDA: Duration = Duration::from_millis(10);
const SAMPLE_CPU: Duration = Duration::from_millis(50);
/// How long lines the command printed just before it ended may still take to arrive, once what it
/// left behind is killed.
const LAST_LINES: Duration = Duration::from_secs(2);

/// What a command may say about itself on one line of its stdout, as
/// `{"oom_bisect": {"peak_bytes": 123, "stage": "aspp", "step": 1}}`; every field is optional.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
pub struct Figures {
    /// Its own peak: wins over the sampled one.
    pub peak_bytes: Option<u64>,
    pub in_use_bytes: Option<u64>,
    /// Where it is now (a module id, `loss`, `backward`, `optimizer`): an out-of-memory after this
    /// line happened there.
    pub stage: Option<Stage>,
    /// The training step, counted from 1.
    pub step: Option<usize>,
    pub phase: Option<Phase>,
    /// This step (counted from 1) has finished, with `in_use_bytes` still held (weights, optimizer
    /// state, the batch) and `loss`; both are needed for the step to count. What the last step
    /// leaves is what does not grow with the batch: with it the search predicts a boundary
    /// instead of bisecting.
    pub step_done: Option<usize>,
    pub loss: Option<f64>,
    /// A served command (`--serve`) finished the trial it was given: `fits`, or `failed` with
    /// `message` (as a traceback's last line would give it: an out-of-memory is told by it, as for
    /// a command that exits).
    pub trial_done: Option<String>,
    pub message: Option<String>,
    /// The request's `id`, echoed: an answer is taken for the request it names, and only once.
    pub id: Option<String>,
}

/// A line of the command's output: its figures, or any other line, and whether it came on stderr.
enum Line {
    Figures(Figures),
    Other(String, bool),
}

#[derive(Deserialize)]
struct FiguresLine {
    oom_bisect: Figures,
}

/// The figures on a line of the command's stdout, if it is one of ours.
pub fn figures(line: &str) -> Option<Figures> {
    serde_json::from_str::<FiguresLine>(line.trim())
        .ok()
        .map(|l| l.oom_bisect)
}

/// The command with `{config}` replaced by the file's path, quoted for the shell.
pub fn command_line(command: &str, config: &Path) -> String {
    command.replace(
        CONFIG_PLACEHOLDER,
        &crate::shell::shell_word(&config.display().to_string()),
    )
}

/// Runs the user's command as the trial (see the module documentation); with `req.serve`, the
/// command answers this request and every later one the holder reads (`serve`).
pub fn run(req: &Request, command: &str) -> Result<()> {
    // On a shared card a command in a process of its own takes its turn for the whole run (its
    // memory is freed when it ends); a served one, trial by trial (between trials it is idle).
    let _turn = match req.serve {
        false => crate::turns::take_turn(req.ceiling)?,
        true => None,
    };
    let file = ConfigFile::write(&req.config)?;
    let held = hold(req)?;
    // A PyTorch command's allocator is traced; a served one's trace is written trial by trial,
    // into the first request's directory, which lives as long as the command.
    let trace = TorchTrace::prepare(&file)?;
    let mut cmd = Watched::start(command, &file.path, held, trace, req.serve)?;
    cmd.probing = req.probe;
    if req.serve {
        return serve(cmd, req, file);
    }
    cmd.held.emit_start();
    let mut trial = Trial::new();
    let end = cmd.watch(&mut trial, deadline(req), None)?;
    cmd.ended(end, trial);
    Ok(())
}

/// A served command's answer, taken where it names the request given (`id`); an answer with no
/// request out, or naming another, breaks the protocol.
fn answer(f: Figures, id: Option<&str>) -> End {
    match (id, f.id.as_deref()) {
        (Some(want), Some(got)) if want == got => End::Served(f),
        (None, _) => End::Broke("the command answered a trial it was not given".into()),
        (Some(_), None) => End::Broke(
            "the command answered without the request's id (a served command echoes the \
             `id` of each request in its trial_done line)"
                .into(),
        ),
        (Some(_), Some(_)) => End::Broke(
            "the command answered a request it was not given now (another id: an answer \
             given twice, or before its request)"
                .into(),
        ),
    }
}

/// `--serve`: the command, started once, answers trial after trial. Each request's config file
/// goes to its stdin as `{"config": PATH}`; its `{"oom_bisect": {"trial_done": …}}` ends the trial
/// (an `Exited` with `served`), and the holder reads the next request from its own stdin. A
/// command that ends instead ends its trial as without `--serve`, and the holder with it. A holder
/// started ahead (`Request::ahead`) waits for its first trial with the command started.
fn serve(mut cmd: Watched, first: &Request, file: ConfigFile) -> Result<()> {
    let mut requests = std::io::stdin().lines();
    // A later request's config; the first's directory holds the trace and stays to the end.
    let (mut req, mut later) = (first.clone(), None::<ConfigFile>);
    if first.ahead {
        match next_request(&mut requests, first)? {
            Some((r, f)) => (req, later) = (r, Some(f)),
            None => {
                cmd.close();
                return Ok(());
            }
        }
    }
    loop {
        let turn = crate::turns::take_turn(req.ceiling)?;
        cmd.held.emit_start();
        let id = cmd.give(&later.as_ref().unwrap_or(&file).path);
        let mut trial = Trial::new();
        let end = cmd.watch(&mut trial, deadline(&req), Some(&id))?;
        drop(turn);
        match end {
            End::Served(done) => cmd.served(done, trial),
            end => {
                cmd.ended(end, trial);
                return Ok(());
            }
        }
        match next_request(&mut requests, first)? {
            Some((r, f)) => (req, later) = (r, Some(f)),
            None => break,
        }
    }
    cmd.close();
    Ok(())
}

/// A served holder's next request, with its config file written; `None` at the end of its input.
fn next_request(
    requests: &mut std::io::Lines<std::io::StdinLock<'static>>,
    first: &Request,
) -> Result<Option<(Request, ConfigFile)>> {
    let Some(line) = requests.next().transpose()? else {
        return Ok(None);
    };
    let req: Request = serde_json::from_str(&line).context("a bad request to a served holder")?;
    // One holder holds one ceiling: the runner starts another for a different one.
    anyhow::ensure!(
        (req.backend, req.ceiling) == (first.backend, first.ceiling),
        "a served holder was asked for another backend or ceiling"
    );
    crate::emit::restart_clock();
    let file = ConfigFile::write(&req.config)?;
    Ok(Some((req, file)))
}

fn deadline(req: &Request) -> Option<Instant> {
    req.timeout_seconds
        .filter(|t| *t > 0.0)
        .map(|t| Instant::now() + Duration::from_secs_f64(t))
}

/// The running command, with what watches it.
struct Watched {
    child: Child,
    /// Its stdin, where it serves trials.
    input: Option<ChildStdin>,
    lines: Receiver<Line>,
    held: Held,
    contain: Containment,
    /// Where the command writes its allocator trace (a PyTorch one).
    trace: TorchTrace,
    /// A served command not yet shown to serve (`Request::probe`): ending its trial instead of
    /// answering it is a trial run as a process of its own, not a broken protocol.
    probing: bool,
}

/// One trial's readings.
#[derive(Default)]
struct Trial {
    peak: Peak,
    /// The last reading.
    now: Option<u64>,
    /// A served command's other lines in this trial (classified instead of the holder's stderr).
    output: Option<Tail>,
    /// The trial's lines on each stream, for its failure ([`failure_by_stream`]).
    stdout: Tail,
    stderr: Tail,
}

impl Trial {
    fn new() -> Trial {
        Trial {
            stdout: Tail::new(OUTPUT_TAIL),
            stderr: Tail::new(OUTPUT_TAIL),
            ..Trial::default()
        }
    }

    /// A line of the command's output in this trial (`err`: on its stderr).
    fn other(&mut self, line: String, err: bool) {
        match err {
            true => self.stderr.push(line.clone()),
            false => self.stdout.push(line.clone()),
        }
        if let Some(o) = &mut self.output {
            o.push(line);
        }
    }

    /// The failure the trial's output tells, stream by stream.
    fn failure(&self) -> Option<String> {
        crate::classify::failure_by_stream(&self.stdout.text(), &self.stderr.text())
    }
}

/// How a trial of the command ended.
enum End {
    /// It said so and lives on (`--serve`).
    Served(Figures),
    /// It ended, or (`None`) was at the time limit.
    Exited(Option<ExitStatus>),
    /// It broke the served protocol (an answer to no request, or twice): nothing it said can be
    /// trusted, and it is stopped.
    Broke(String),
}

impl Watched {
    /// Starts the command; with `serve`, to serve trials (`--serve`).
    fn start(
        command: &str,
        config: &Path,
        held: Held,
        trace: TorchTrace,
        serve: bool,
    ) -> Result<Watched> {
        let contain = Containment::new();
        let (mut child, output) = spawn(command, config, &held, &trace.env(), &contain, serve)?;
        Ok(Watched {
            input: child.stdin.take(),
            lines: read_output(output),
            child,
            held,
            contain,
            trace,
            probing: false,
        })
    }

    /// Samples memory and reads the command's lines until its trial ends; a served trial ends with
    /// the answer to request `id` (any other answer breaks the protocol).
    fn watch(
        &mut self,
        trial: &mut Trial,
        deadline: Option<Instant>,
        id: Option<&str>,
    ) -> Result<End> {
        if self.input.is_some() {
            trial.output = Some(Tail::new(OUTPUT_TAIL));
        }
        let mut ticks = 0u32;
        loop {
            trial.now = self.held.now();
            trial.peak.sampled = trial.peak.sampled.max(trial.now);
            while let Ok(line) = self.lines.try_recv() {
                match line {
                    Line::Figures(f) if f.trial_done.is_some() => return Ok(answer(f, id)),
                    Line::Figures(f) => trial.peak.take(f, trial.now),
                    Line::Other(l, err) => trial.other(l, err),
                }
            }
            if ticks.is_multiple_of(10) {
                self.contain.observe();
            }
            ticks += 1;
            match self.child.try_wait().context("waiting for the command")? {
                Some(s) => return Ok(End::Exited(Some(s))),
                None if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(End::Exited(None))
                }
                None => std::thread::sleep(self.held.sample_every()),
            }
        }
    }

    /// A served command's trial is over; the command lives on for the next.
    fn served(&mut self, done: Figures, mut trial: Trial) {
        self.probing = false;
        let fits = done.trial_done.as_deref() == Some("fits");
        let mut output = trial.output.take().unwrap_or_default();
        if let Some(m) = done.message {
            output.push(m);
        }
        // Read whatever the verdict: a trace left behind would be taken for the next trial's.
        let trace = self.trace.take();
        if fits {
            self.replay_trace(trace, trial.peak.sampled);
        }
        trial.peak.flush();
        let (peak_bytes, peak_source) = trial.peak.best(&self.held);
        emit(&ChildEvent::Exited(Exited {
            code: Some(if fits { 0 } else { 1 }),
            peak_bytes,
            peak_source,
            unheld: self.held.unheld(trial.peak.sampled),
            served: true,
            // Its answer names the failure: the message last in `output`.
            output: Some(output.text()),
            ..Exited::default()
        }));
    }

    /// The command ended (or is stopped at the time limit): whatever it left running dies, its
    /// last lines are read, and the holder says how it ended.
    fn ended(mut self, end: End, mut trial: Trial) {
        let (status, broke) = match end {
            End::Exited(s) => (s, None),
            End::Broke(why) => (None, Some(why)),
            End::Served(_) => unreachable!("a served trial's end is `served`"),
        };
        // A served command gone with a request out, as if it had answered: it never did.
        let owed = self.input.is_some() && !self.probing;
        let unanswered = (owed && status.is_some_and(|s| s.success())).then(|| {
            "the command ended without answering its trial (a served command answers each \
             request with a trial_done line)"
                .to_string()
        });
        let broke = broke.or(unanswered);
        // Whatever the command left running (a daemon, a `setsid` grandchild) dies now; then its
        // last lines, which no process can hold back any longer.
        self.contain.sweep();
        let until = Instant::now() + LAST_LINES;
        // Its last lines are placed at its last reading: it is gone now.
        while let Ok(line) = self
            .lines
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            match line {
                Line::Figures(f) => trial.peak.take(f, trial.now),
                Line::Other(l, err) => trial.other(l, err),
            }
        }
        if status.is_some_and(|s| s.success()) {
            self.replay_trace(self.trace.take(), trial.peak.sampled);
        }
        trial.peak.flush();
        let (peak_bytes, peak_source) = trial.peak.best(&self.held);
        let kills = self.contain.oom_kills();
        emit(&ChildEvent::Exited(Exited {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            oom_killer: kills.killed,
            oom_kill_check: kills.how.map(str::to_string),
            timed_out: status.is_none() && broke.is_none(),
            broke,
            peak_bytes,
            peak_source,
            unheld: self.held.unheld(trial.peak.sampled),
            served: false,
            failure: trial.failure(),
            output: trial.output.map(|o| o.text()),
        }));
    }

    /// A command that ran to its end and left an allocator trace: the trace replayed, as a built-in
    /// trial's stream is. What the command held outside its allocator (its CUDA context, loaded
    /// kernels) is its highest device reading (`sampled`) less the most the allocator reserved,
    /// and counts in its need; on the CPU it is not known.
    fn replay_trace(&self, trace: Option<Result<Traced>>, sampled: Option<u64>) {
        let Some(read) = trace else {
            return;
        };
        let traced = match read {
            Ok(t) if !t.oom => t,
            Ok(_) => return,
            Err(e) => {
                eprintln!("oom-bisect __trial: {e:#}");
                return;
            }
        };
        if !traced.unmodelled.is_empty() {
            eprintln!(
                "oom-bisect __trial: the command's allocator is set with {}, which the replay does \
                 not model: its trace is not replayed, the device's readings stand",
                traced.unmodelled.join(", ")
            );
            return;
        }
        let on_device = self.held.backend == BackendKind::Cuda;
        let reserved = pytorch_allocator::replay_with(&traced.events, None, traced.conf)
            .stats
            .peak_reserved;
        let outside = match on_device {
            true => sampled.unwrap_or(0).saturating_sub(reserved),
            false => 0,
        };
        let mut r = crate::replayed::replayed(
            &traced.events,
            outside,
            self.held.start.1,
            on_device,
            traced.streams,
            traced.conf,
        );
        r.source = Some(match traced.conf.expandable_segments {
            true => "PyTorch's allocator trace of your command (expandable_segments:True)".into(),
            false => "PyTorch's allocator trace of your command".into(),
        });
        emit(&ChildEvent::Replayed(r));
    }

    /// Hands a served command its next trial, under a new id its answer must echo. A command that
    /// is gone cannot read it; how it ended tells the rest.
    fn give(&mut self, config: &Path) -> String {
        let id = config_file::random_hex();
        if let Some(input) = &mut self.input {
            let line = serde_json::json!({ "config": config, "id": id }).to_string();
            let _ = writeln!(input, "{line}").and_then(|()| input.flush());
        }
        id
    }

    /// No more trials: the served command hears the end of its input, gets a moment to leave, and
    /// whatever is left is swept.
    fn close(mut self) {
        drop(self.input.take());
        let until = Instant::now() + LAST_LINES;
        while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.contain.sweep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_lines_are_read_and_others_are_not() {
        let f =
            figures(r#"{"oom_bisect": {"peak_bytes": 123, "stage": "aspp", "step": 2}}"#).unwrap();
        assert_eq!(f.peak_bytes, Some(123));
        assert_eq!(f.stage, Some(Stage::Module("aspp".into())));
        assert_eq!(f.step, Some(2));
        assert!(figures(r#"{"loss": 0.5}"#).is_none());
        assert!(figures("epoch 1: loss 0.5").is_none());
        assert!(figures(r#"{"oom_bisect": {"peak_bytes": -1}}"#).is_none());
    }

    #[test]
    fn the_config_path_is_one_shell_word() {
        let p = Path::new("/tmp/a b/config.toml");
        assert_eq!(
            command_line("python3 train.py {config} --x", p),
            "python3 train.py '/tmp/a b/config.toml' --x"
        );
    }
}
