//! All progress drawing, in one place: an indicatif bar on stderr with the trials done and the axis
//! being searched, and one persistent line per finished trial. The bar is drawn only on a terminal;
//! the lines also go to a non-terminal stderr (logs); `--quiet` silences both. stdout carries data.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use oom_search::{Event, Outcome};
use oom_trial::fmt_bytes;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

pub struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    done: usize,
    started: Option<Instant>,
}

impl Progress {
    pub fn new(quiet: bool, max_trials: Option<usize>) -> Progress {
        let tty = std::io::stderr().is_terminal();
        let bar = (!quiet && tty).then(|| {
            let b = match max_trials {
                Some(n) => ProgressBar::new(n as u64),
                None => ProgressBar::new_spinner(),
            };
            b.set_draw_target(ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] trial {pos}{len_part} {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_spinner())
                .with_key(
                    "len_part",
                    move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        if let Some(l) = s.len() {
                            let _ = write!(w, "/{l}");
                        }
                    },
                ),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        Progress {
            bar,
            lines: !quiet,
            done: 0,
            started: None,
        }
    }

    fn line(&self, s: &str) {
        if !self.lines {
            return;
        }
        match &self.bar {
            Some(b) => b.println(s),
            None => eprintln!("{s}"),
        }
    }

    pub fn on(&mut self, e: &Event) {
        match e {
            Event::Step { name } => {
                self.line(&format!("── {name}"));
            }
            Event::TrialStarted {
                candidate,
                purpose,
                attempt,
            } => {
                self.started = Some(Instant::now());
                if let Some(b) = &self.bar {
                    let again = if *attempt > 0 { " (again)" } else { "" };
                    b.set_message(format!("{purpose}: {candidate}{again}"));
                }
            }
            Event::TrialFinished {
                candidate,
                purpose,
                attempt,
                measurement,
            } => {
                self.done += 1;
                let secs = self
                    .started
                    .map(|t| t.elapsed().as_secs_f64())
                    .unwrap_or(0.0);
                if let Some(b) = &self.bar {
                    b.set_position(self.done as u64);
                }
                let outcome = match measurement.outcome {
                    Outcome::Fits => "fits",
                    Outcome::Oom => "OOM ",
                    Outcome::Inconclusive => "??  ",
                };
                let peak = measurement
                    .peak_bytes
                    .map(|p| format!("peak {:>10}", fmt_bytes(p)))
                    .unwrap_or_else(|| format!("{:>15}", ""));
                let again = if *attempt > 0 { " (re-run)" } else { "" };
                let note = if measurement.outcome == Outcome::Inconclusive {
                    format!("  [{}]", measurement.note)
                } else {
                    String::new()
                };
                self.line(&format!(
                    "  #{:<3} {outcome} {peak} {secs:>6.1}s  {candidate}{again}  ({purpose}){note}",
                    self.done
                ));
            }
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
