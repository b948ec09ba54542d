//! What every part of the report reads besides the diagnosis: the run's settings, every trial's
//! report, and the questions asked of them in more than one place (the original's report, the run
//! whose peak is split into parts).

use super::memory;
use oom_search::Candidate;
use oom_trial::TrialReport;
use std::collections::HashMap;

/// The allocator setting the replay answers for without a trial (`PYTORCH_CUDA_ALLOC_CONF`).
pub const EXPANDABLE: &str = "expandable segments";

/// What the report needs besides the diagnosis.
pub struct Context<'a> {
    pub title: String,
    /// The ceiling the trials ran under: as given, or as the trials reported it (a fraction of a
    /// device); `None` where neither says.
    pub ceiling: Option<u64>,
    pub backend: String,
    /// The memory model in force (`device.memory_model`).
    pub memory_model: deeplab::MemoryModel,
    /// Training steps per trial (`train.steps`, or its default for the memory model).
    pub steps: usize,
    /// Every trial's report, by candidate and attempt (the details behind the measurements).
    pub reports: &'a HashMap<(Candidate, u32), TrialReport>,
    /// The configuration diagnosed (under `--exec`, what the user's command was given).
    pub config: &'a deeplab::Config,
    pub minimal_path: Option<String>,
    pub minimal_config: Option<toml::Table>,
    pub reproduce: Option<String>,
    pub journal: Option<String>,
    pub resumed: usize,
    pub wall_seconds: f64,
    /// `--estimate`: every answer is the model's memory estimate.
    pub estimate: bool,
    /// Under `--estimate`, the command that measures the same on a GPU.
    pub confirm: Option<String>,
    /// `--exec`: the user's command that answered every trial.
    pub exec: Option<String>,
    /// `--serve`: the command answered first runs in one process per worker.
    pub served: bool,
    /// `--verbose`: developer detail (plain-bisection counts, 1-minimality).
    pub verbose: bool,
    /// What the user must know to read the results (printed under the header).
    pub notes: Vec<String>,
    /// Where the search ran on stream-only trials: the virtual card's name as the report gives it.
    pub streams: Option<String>,
    /// Whether the GPU certified the stream-only trials' verdicts.
    pub certify: bool,
    /// What the GPU certified (nothing where it did not).
    pub certified: &'a crate::certify::Certified,
}

impl Context<'_> {
    /// The ceiling as the report writes it.
    pub fn ceiling_text(&self) -> String {
        self.ceiling
            .map(oom_trial::fmt_bytes)
            .unwrap_or_else(|| "unknown".into())
    }

    /// Whether the trials ran on CUDA (a need then counts the CUDA context, as a card does).
    pub fn on_cuda(&self) -> bool {
        self.original_report()
            .is_some_and(|r| r.backend() == Some(oom_trial::BackendKind::Cuda))
    }

    /// The report of a candidate's first run.
    pub fn report(&self, c: &Candidate) -> Option<&TrialReport> {
        self.reports.get(&(c.clone(), 0))
    }

    pub fn original_report(&self) -> Option<&TrialReport> {
        self.report(&Candidate::original())
    }

    /// What the peak of the whole run is made of (built-in model only: under `--exec` the model is
    /// the user's, whose parameters we do not know).
    pub fn breakdown(&self) -> Option<Vec<memory::Part>> {
        if self.exec.is_some() {
            return None;
        }
        memory::breakdown(self.whole_run()?.0, self.config)
    }

    pub fn need_report(&self) -> Option<&TrialReport> {
        self.report(&Candidate::original().without_ceiling())
    }

    /// The run whose need the verdict gives and whose memory the breakdown splits: the original
    /// where its run was replayed (it reached its end, over the ceiling or not), else the original
    /// without the ceiling when it ran out of memory under it, else the original when it fits.
    pub fn whole_run(&self) -> Option<(&TrialReport, &'static str)> {
        let replayed = |r: &&TrialReport| r.memory.allocator.is_some();
        if let Some(r) = self.original_report().filter(replayed) {
            return Some((r, "the original"));
        }
        let fits = |r: &&TrialReport| r.outcome() == oom_trial::TrialOutcome::Fits;
        match self.need_report().filter(fits) {
            Some(r) => Some((r, "the original without the ceiling")),
            None => self
                .original_report()
                .filter(fits)
                .map(|r| (r, "the original")),
        }
    }

    /// The original's need under `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, replayed
    /// from its stream (nothing ran with it), and whether that fits the ceiling; nothing where
    /// the original ran with them (a `--exec` command that sets them).
    pub fn expandable(&self) -> Option<(u64, bool)> {
        let (r, _) = self.whole_run()?;
        let a = r
            .memory
            .allocator
            .as_ref()
            .filter(|a| !a.expandable_segments)?;
        let need = a.expandable_need_bytes?;
        Some((need, self.ceiling.is_none_or(|c| need <= c)))
    }
}
