//! All progress drawing, in one place: an indicatif bar on stderr with the trials done and the axis
//! being searched, and one persistent line per finished trial. The bar is drawn only on a terminal;
//! the lines also go to a non-terminal stderr (logs); `--quiet` silences both. stdout carries data.

use crate::dispatch::Dispatch;
use crate::journal::Job;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use oom_search::{Candidate, Event, Outcome};
use oom_trial::fmt_bytes;
use oom_trial::pool::OnStart;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    done: usize,
    started: Option<Instant>,
    /// What each worker runs, when trials run on several.
    board: Arc<Mutex<Board>>,
    /// `--verbose`: the search's intervals in each line.
    pub verbose: bool,
    /// Built-in trials on the CPU: after the first, say when the whole run will take long.
    pub slow_cpu: Option<SlowCpu>,
    /// Watches the kernel cache for compiling trials (CUDA).
    compiling: Option<super::compiling::Watch>,
}

/// What the warning about a long CPU run needs: the trials expected and how many run at once.
pub struct SlowCpu {
    pub about: usize,
    pub jobs: usize,
}

/// A CPU diagnosis longer than this is worth a warning and the ways round it.
const SLOW_CPU: f64 = 600.0;

impl SlowCpu {
    /// The warning after a first trial of `secs`, when the run will take longer than [`SLOW_CPU`].
    fn warning(&self, secs: f64) -> Option<String> {
        let total = secs * self.about as f64 / self.jobs.max(1) as f64;
        (total > SLOW_CPU).then(|| {
            format!(
                "note: the first trial took {secs:.0} s on this CPU, so the whole diagnosis (about \
                 {} trials) will take about {:.0} minutes. For an answer in seconds, --estimate \
                 (the model's estimate; it errs towards fitting, docs/estimate.md); to measure it \
                 in minutes, a CUDA GPU (--backend cuda). Ctrl-C keeps what is measured.",
                self.about,
                total / 60.0
            )
        })
    }
}

/// The workers' labels, what each runs now, and where each finished trial ran.
#[derive(Default)]
struct Board {
    labels: Vec<String>,
    running: Vec<Option<(Job, Instant)>>,
    /// Where each trial ran and how long it took there (the time between the search asking and
    /// getting an answer says nothing when trials start ahead).
    ran_on: HashMap<(Candidate, u32), (String, f64)>,
    /// Some trial is compiling kernels now.
    compiling: bool,
}

impl Board {
    /// `[cuda:0 ▸ batch=1 · cuda:1 ▸ idle] compiling kernels · `, for the bar (the workers only
    /// when there are several).
    fn line(&self) -> String {
        let compiling = match self.compiling {
            true => "compiling kernels · ",
            false => "",
        };
        if self.labels.is_empty() {
            return compiling.into();
        }
        let parts: Vec<String> = self
            .labels
            .iter()
            .zip(&self.running)
            .map(|(l, r)| match r {
                Some((job, _)) => format!("{l} ▸ {}", job.candidate),
                None => format!("{l} ▸ idle"),
            })
            .collect();
        format!("[{}] {compiling}", parts.join(" · "))
    }
}

impl Progress {
    /// `about`: the trials a diagnosis is expected to take, for "n of about N" and the time left
    /// (the budget's cap when it is lower).
    pub fn new(quiet: bool, max_trials: Option<usize>, about: usize) -> Progress {
        let tty = std::io::stderr().is_terminal();
        let bar = (!quiet && tty).then(|| {
            let n = max_trials.map_or(about, |m| m.min(about)).max(1);
            let b = ProgressBar::new(n as u64);
            b.set_draw_target(ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {pos} of about {len} trials done, ~{eta} left {prefix}{wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        Progress {
            bar,
            lines: !quiet,
            done: 0,
            started: None,
            board: Arc::default(),
            verbose: false,
            slow_cpu: None,
            compiling: None,
        }
    }

    /// Marks the bar while trials compile kernels into `cache` (for a log without a bar: one line
    /// the first time), so a slow trial is not mistaken for a slow configuration.
    pub fn watch_compiling(&mut self, cache: Option<&std::path::Path>) {
        let Some(dir) = cache.filter(|_| self.lines) else {
            return;
        };
        let (board, bar) = (Arc::clone(&self.board), self.bar.clone());
        let shown = dir.display().to_string();
        let told = std::sync::atomic::AtomicBool::new(false);
        self.compiling = Some(super::compiling::Watch::start(
            dir.to_path_buf(),
            move |on| {
                let mut b = lock(&board);
                b.compiling = on;
                match &bar {
                    Some(bar) => bar.set_prefix(b.line()),
                    None if on && !told.swap(true, std::sync::atomic::Ordering::Relaxed) => tell!(
                        "oom-bisect: trials are compiling GPU kernels into {shown}: the first \
                         trials of each kind are slower for it; later ones reuse them"
                    ),
                    None => {}
                }
            },
        ));
    }

    /// The pool's start hook: the bar shows what each worker runs, and each finished line where
    /// it ran (only when there is more than one worker). A second pool's workers (the GPU's beside
    /// stream-only trials) are shown after the first's.
    pub fn workers_view(&self, dispatch: &Dispatch) -> OnStart<Job> {
        let labels: Vec<String> = dispatch.slots.iter().map(|s| s.label.clone()).collect();
        let offset = {
            let mut b = lock(&self.board);
            if labels.len() < 2 && b.labels.is_empty() {
                return Box::new(|_, _| {});
            }
            let offset = b.labels.len();
            b.running.extend(labels.iter().map(|_| None));
            b.labels.extend(labels);
            offset
        };
        let (board, bar) = (Arc::clone(&self.board), self.bar.clone());
        Box::new(move |worker, job| {
            let worker = offset + worker;
            let mut b = lock(&board);
            let ended = std::mem::replace(
                &mut b.running[worker],
                job.map(|j| (j.clone(), Instant::now())),
            );
            if let (None, Some((j, t))) = (job, ended) {
                let label = b.labels[worker].clone();
                let secs = t.elapsed().as_secs_f64();
                b.ran_on.insert((j.candidate, j.attempt), (label, secs));
            }
            if let Some(bar) = &bar {
                bar.set_prefix(b.line());
            }
        })
    }

    fn line(&self, s: &str) {
        if !self.lines {
            return;
        }
        match &self.bar {
            // The bar prints past `tell!`: made safe here, as `tell!` does.
            Some(b) => b.println(super::printable(s, usize::MAX)),
            None => tell!("{s}"),
        }
    }

    pub fn on(&mut self, e: &Event) {
        match e {
            Event::Step { name } => {
                self.line(&format!("── {name}"));
            }
            Event::Settled { .. } => {}
            Event::TrialStarted {
                candidate,
                purpose,
                attempt,
            } => {
                self.started = Some(Instant::now());
                if let Some(b) = &self.bar {
                    let again = again(purpose, *attempt, " (again)");
                    let purpose = purpose_text(purpose, self.verbose);
                    b.set_message(super::printable(
                        &format!("{purpose}: {candidate}{again}"),
                        usize::MAX,
                    ));
                }
            }
            Event::TrialFinished {
                candidate,
                purpose,
                attempt,
                measurement,
            } => {
                self.done += 1;
                let ran_on = lock(&self.board)
                    .ran_on
                    .get(&(candidate.clone(), *attempt))
                    .cloned()
                    .filter(|_| !measurement.replayed);
                let secs = match &ran_on {
                    Some((_, secs)) => *secs,
                    None => self
                        .started
                        .map(|t| t.elapsed().as_secs_f64())
                        .unwrap_or(0.0),
                };
                if let Some(b) = &self.bar {
                    // "About": past the expectation, the total follows the count.
                    if self.done as u64 >= b.length().unwrap_or(0) {
                        b.set_length(self.done as u64 + 1);
                    }
                    b.set_position(self.done as u64);
                }
                let outcome = format!("{:<4}", super::outcome_word(measurement.outcome));
                let peak = progress_figure(measurement);
                let again = again(purpose, *attempt, " (re-run)");
                let note = if measurement.outcome == Outcome::Inconclusive {
                    format!("  [{}]", measurement.note)
                } else {
                    String::new()
                };
                let place = ran_on.map(|(l, _)| format!(" on {l}")).unwrap_or_default();
                let purpose = purpose_text(purpose, self.verbose);
                self.line(&format!(
                    "  #{:<3} {outcome} {peak} {secs:>6.1}s  {candidate}{again}  ({purpose}){place}{note}",
                    self.done
                ));
                if self.done == 1 && !measurement.replayed {
                    if let Some(w) = self.slow_cpu.as_ref().and_then(|s| s.warning(secs)) {
                        self.line(&w);
                    }
                }
            }
        }
    }

    pub fn finish(&mut self) {
        self.compiling = None;
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

use oom_trial::sync::lock;

/// Why a trial runs, in words: `batch` for a probe of the batch axis; with `--verbose`, the interval
/// the search is narrowing (`batch in (1, 4]`).
/// `mark` for a re-run: a confirmation says what it is in its purpose; any other re-run says that
/// it is one.
fn again(purpose: &oom_search::Purpose, attempt: u32, mark: &'static str) -> &'static str {
    let confirm = matches!(purpose, oom_search::Purpose::Confirm { .. });
    match attempt > 0 && !confirm {
        true => mark,
        false => "",
    }
}

/// A trial's one figure, as the report shows it ([`super::Figure`]): its need wherever its stream
/// was replayed; else a fit's peak, or what an out-of-memory tried to hold (never the lower peak
/// before it failed).
fn progress_figure(m: &oom_search::Measurement) -> String {
    use super::Figure;
    match (super::Figure::of(m), m.outcome) {
        (Some(Figure::Need(n)), _) => format!("needs    {:>10}", fmt_bytes(n)),
        (Some(Figure::AtLeast(n)), _) => format!("needs >= {:>10}", fmt_bytes(n)),
        (_, Outcome::Oom) => m
            .failed_at_bytes
            .map(|p| format!("at       {:>10}", fmt_bytes(p)))
            .unwrap_or_else(|| format!("{:>19}", "")),
        (Some(Figure::Peak(p)), _) => format!("peak     {:>10}", fmt_bytes(p)),
        (None, _) => format!("{:>19}", ""),
    }
}

fn purpose_text(p: &oom_search::Purpose, verbose: bool) -> String {
    match p {
        oom_search::Purpose::Axis { axis, .. } if !verbose => format!("{axis} axis"),
        _ => p.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::SlowCpu;

    /// The warning comes when the first trial's time over the expected trials passes ten minutes,
    /// counting the trials that run at once.
    #[test]
    fn a_long_cpu_run_is_announced() {
        let s = SlowCpu { about: 50, jobs: 2 };
        assert!(
            s.warning(20.0).is_none(),
            "50 × 20 s / 2 is under ten minutes"
        );
        let w = s.warning(428.0).expect("hours");
        assert!(
            w.contains("about 178 minutes") && w.contains("--estimate"),
            "{w}"
        );
    }
}
