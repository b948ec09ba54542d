//! What a diagnosis is made of: the space the caller builds (axes, fixes, modules), the options,
//! and the results (boundaries, fixes measured, module culprits, the minimal failing configuration).

use crate::bisect::{AxisSearch, AxisVerdict};
use crate::searcher::{Budget, TrialRecord};
use crate::vocabulary::{Axis, AxisOptions, Candidate, Measurement, Tag};
use serde::{Deserialize, Serialize};

/// A single change a user would try to make a failing configuration fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fix {
    /// What a user would read: `output stride 16`, `bf16`.
    pub change: String,
    /// The caller's kind of this fix.
    pub tag: Tag,
    /// The overrides that make it.
    pub sets: Vec<(String, String)>,
    /// The change of another fix that holds at least as much memory as this one (mixed f16 is
    /// mixed bf16 with a loss scaler): where that one fits, away from the ceiling, so does this
    /// one, and it is not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered_by: Option<String>,
    /// What the fix saves by the model's estimate, where it has one: a fix that saves far too
    /// little to make the original fit is not run (as a module item, [`ModuleItem`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_saving: Option<u64>,
    /// Started with the first trials whatever the need: its first trial compiles kernels of its
    /// own, which on a cold kernel cache is the longest wait of a run.
    #[serde(default)]
    pub early: bool,
}

impl Fix {
    /// The original with the fix's overrides, run over every step: its need is printed with the
    /// cards it fits on, which a one-step lower bound would overstate.
    pub fn candidate(&self) -> Candidate {
        let mut c = Candidate::original();
        for (k, v) in &self.sets {
            c = c.with(k, v);
        }
        c.every_step()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixResult {
    pub change: String,
    /// The fix's tag, or for a capacity answer ("largest batch that fits") its axis's.
    #[serde(default)]
    pub tag: Tag,
    pub candidate: Candidate,
    /// Its own trial's, or where `implied_by` is set, that fix's.
    pub measurement: Measurement,
    /// The fix whose fit settles this one (its [`Fix::covered_by`]): not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implied_by: Option<String>,
    /// Why it was not run, where its estimated saving falls far short of what the original must
    /// shed; its measurement is then an out-of-memory no trial measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

/// A group of module ids swapped for identity together; one item of ddmin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleItem {
    pub label: String,
    pub ids: Vec<String>,
    /// What swapping it alone saves by the caller's estimate, where it has one: an item that could
    /// not make the original fit even if the estimate were off by half is not run alone
    /// (`culprits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_saving: Option<u64>,
}

/// The modules ddmin works over.
#[derive(Debug, Clone)]
pub struct Modules {
    /// The config key of the identity list (`model.identity`).
    pub key: String,
    /// Writes a list of ids as a value of `key`: the caller's syntax (the search writes none).
    pub encode: fn(&[String]) -> String,
    /// Ids the original configuration already swaps.
    pub fixed: Vec<String>,
    pub items: Vec<ModuleItem>,
    /// What cannot be swapped, in words, for "the memory is in …" when swapping every item still
    /// runs out of memory.
    pub unswappable: String,
}

impl Modules {
    /// The candidate with `swapped` (and the fixed ids) swapped for identity, on top of `base`.
    pub fn candidate(&self, base: &Candidate, swapped: &[ModuleItem]) -> Candidate {
        let mut ids: Vec<String> = self.fixed.clone();
        ids.extend(swapped.iter().flat_map(|m| m.ids.iter().cloned()));
        ids.sort();
        ids.dedup();
        let mut c = base.clone();
        let mut fixed = self.fixed.clone();
        fixed.sort();
        if ids == fixed {
            c.sets.remove(&self.key);
        } else {
            c.sets.insert(self.key.clone(), (self.encode)(&ids));
        }
        c
    }
}

/// Everything the search may vary, built by the caller from the configuration.
#[derive(Debug, Clone)]
pub struct Space {
    /// Monotone axes, values up to the original's.
    pub axes: Vec<Axis>,
    /// Axes searched upward when the original fits: `original` is the configured value's index.
    pub capacity: Vec<Axis>,
    pub fixes: Vec<Fix>,
    pub modules: Modules,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchOptions {
    /// The ceiling in bytes, where known before the first trial (see `AxisOptions::ceiling`).
    pub ceiling: Option<u64>,
    /// Re-run both sides of every boundary this many times before reporting it (0: no re-runs).
    pub confirm_runs: u32,
    /// Probe where measured peaks predict the boundary before bisecting.
    pub predict: bool,
    /// See [`AxisOptions::rerun_within`].
    pub rerun_within: Option<f64>,
    /// Trials and time; what is not measured within it is inconclusive.
    pub budget: Budget,
    /// Which steps run.
    pub fixes: bool,
    pub modules: bool,
    pub minimise: bool,
    /// Measure an original that runs out of memory once more without the ceiling (how much it
    /// needs), where its own run did not say (the device stopped it).
    pub need: bool,
    /// The original's own run usually says what it needs (the CPU, where a run reaches its end
    /// and its replay is the verdict): the run without the ceiling is not started ahead of it.
    pub need_from_original: bool,
    /// See [`AxisOptions::probe_without_ceiling`]: for the axes of an original that runs out of
    /// memory (not the capacity, whose probes past the boundary never run, nor the minimal
    /// configuration).
    pub probe_without_ceiling: bool,
}

impl SearchOptions {
    pub(crate) fn axis(&self) -> AxisOptions {
        AxisOptions {
            ceiling: self.ceiling,
            predict: self.predict,
            confirm_runs: self.confirm_runs,
            rerun_within: self.rerun_within,
            probe_without_ceiling: false,
        }
    }
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            ceiling: None,
            confirm_runs: 1,
            predict: true,
            rerun_within: None,
            budget: Budget::default(),
            fixes: true,
            modules: true,
            minimise: true,
            need: true,
            need_from_original: false,
            probe_without_ceiling: false,
        }
    }
}

/// Which modules carry the memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModulesVerdict {
    /// Swapping exactly these modules for identity makes the original fit; swapping any one fewer
    /// does not (when `one_minimal`).
    Culprits {
        items: Vec<String>,
        candidate: Candidate,
        /// Boxed: the other verdicts are a message.
        measurement: Box<Measurement>,
        one_minimal: bool,
        /// Other items that make it fit when swapped alone (the culprit is the one with the lowest
        /// peak); empty when the culprits came from ddmin.
        #[serde(default)]
        also_alone: Vec<String>,
    },
    /// Even with every swappable module swapped the configuration runs out of memory.
    NoSetFits {
        message: String,
    },
    Inconclusive {
        message: String,
    },
}

/// The smallest configuration that still runs out of memory, and its passing neighbours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Minimal {
    pub candidate: Candidate,
    pub measurement: Measurement,
    /// One step lower on each axis: each should fit.
    pub neighbours: Vec<Neighbour>,
    /// Every neighbour fits, measured or implied.
    pub one_minimal: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    pub change: String,
    pub candidate: Candidate,
    /// The neighbour's own trial, or where `implied_by` is set, that configuration's.
    pub measurement: Measurement,
    /// A configuration measured to fit that is at least this neighbour on every axis (and the same
    /// elsewhere): memory grows along each axis, so the neighbour fits too and was not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implied_by: Option<Candidate>,
}

/// One module item swapped for identity on its own: what the configuration then needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleCost {
    pub label: String,
    pub ids: Vec<String>,
    pub candidate: Candidate,
    /// Its trial's; where `not_run` is set, an out-of-memory that no trial measured.
    pub measurement: Measurement,
    /// Why it did not run: what it saves at most, against what the original must shed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub original: Measurement,
    /// The original run without the ceiling, when it ran out of memory under it: what it needs
    /// (`Oom` when even the whole machine is not enough).
    #[serde(default)]
    pub need: Option<Measurement>,
    pub axes: Vec<AxisSearch>,
    pub capacity: Vec<AxisSearch>,
    pub fixes: Vec<FixResult>,
    pub modules: Option<ModulesVerdict>,
    /// Every module item swapped alone, in the model's order (empty when modules were not searched).
    #[serde(default)]
    pub module_costs: Vec<ModuleCost>,
    pub minimal_failing: Option<Minimal>,
    pub trials: Vec<TrialRecord>,
    pub budget_exhausted: bool,
}

impl Diagnosis {
    /// A diagnosis of `original` before any step after it: nothing searched, no trial recorded.
    pub fn of(original: Measurement) -> Diagnosis {
        Diagnosis {
            original,
            need: None,
            axes: vec![],
            capacity: vec![],
            fixes: vec![],
            modules: None,
            module_costs: vec![],
            minimal_failing: None,
            trials: vec![],
            budget_exhausted: false,
        }
    }

    /// The last fit and first out-of-memory of the axis tagged `tag`, when it has a boundary.
    pub fn boundary(&self, tag: Tag) -> Option<(&crate::bisect::Probe, &crate::bisect::Probe)> {
        match &self.axes.iter().find(|a| a.tag == tag)?.verdict {
            AxisVerdict::Boundary {
                last_fit,
                first_oom,
                ..
            } => Some((last_fit, first_oom)),
            _ => None,
        }
    }
}
