//! What a `--exec` command's trial passes on: its peak (its own figure, else the holder's
//! readings), its finished steps and its stages, each bounded per trial.

use super::held::Held;
use super::Figures;
use crate::emit::{emit, since_start};
use crate::protocol::{ChildEvent, Location};
use deeplab::Phase;

/// Where a peak comes from when the command printed it itself.
pub const OWN_PEAK: &str = "the command's own figure";

/// The most step and stage events one trial passes on: a command that reports every iteration
/// of a long run would otherwise fill the trial's JSON and the journal (300,000 steps: 38 MB).
const MAX_STEPS: usize = 1_000;
const MAX_MARKS: usize = 10_000;

/// The command's peak: its own figure when it gives one, else what the holder measured.
#[derive(Default)]
pub(super) struct Peak {
    pub own: Option<u64>,
    pub sampled: Option<u64>,
    /// When the last step the command reported finished (seconds since the holder started).
    step_ended: Option<f64>,
    /// Step and stage events passed on so far.
    steps: usize,
    marks: usize,
    /// The latest stage past the cap, passed on at the end: an out-of-memory is placed at it.
    last_mark: Option<ChildEvent>,
}

impl Peak {
    /// Takes one figures line: its peak, a finished step, and its stage as a measuring point.
    pub fn take(&mut self, f: Figures, now: Option<u64>) {
        self.own = self.own.max(f.peak_bytes);
        if let (Some(step), Some(loss)) = (f.step_done, f.loss) {
            let at = since_start();
            self.steps += 1;
            if self.steps > MAX_STEPS {
                self.step_ended = Some(at);
                return;
            }
            emit(&ChildEvent::Step {
                step: step.saturating_sub(1),
                seconds: at - self.step_ended.unwrap_or(0.0),
                in_use_bytes: f.in_use_bytes.or(now).unwrap_or(0),
                loss,
            });
            self.step_ended = Some(at);
        }
        let Some(stage) = f.stage else {
            return;
        };
        let in_use = f.in_use_bytes.or(now).unwrap_or(0);
        let mark = ChildEvent::Mark {
            at: Location {
                step: f.step.unwrap_or(1).saturating_sub(1),
                phase: f.phase.unwrap_or(Phase::Forward),
                stage,
            },
            in_use_bytes: in_use,
            device_bytes: now.unwrap_or(in_use),
            seconds: since_start(),
            events: None,
        };
        self.marks += 1;
        match self.marks > MAX_MARKS {
            true => self.last_mark = Some(mark),
            false => emit(&mark),
        }
    }

    /// The latest stage held back by the cap, before the trial's end is told.
    pub fn flush(&mut self) {
        if let Some(mark) = self.last_mark.take() {
            emit(&mark);
        }
    }

    pub fn best(&self, held: &Held) -> (Option<u64>, Option<String>) {
        if let Some(p) = self.own {
            return (Some(p), Some(OWN_PEAK.into()));
        }
        match held.peak(self.sampled).filter(|p| *p > 0) {
            Some(p) => (Some(p), Some(held.source().into())),
            None => (None, None),
        }
    }
}
