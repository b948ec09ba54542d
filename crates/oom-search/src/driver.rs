//! The whole diagnosis: the original configuration, each monotone axis, the fixes a user would try,
//! the modules that carry the memory (ddmin), and the 1-minimal failing configuration; or, when the
//! original fits, its headroom and capacity.

use crate::bisect::{bisect_axis, bisect_axis_finely, AxisOptions, AxisSearch, AxisVerdict};
use crate::ddmin::{ddmin, DdTest};
use crate::session::{Budget, Clock, Session, TrialRecord};
use crate::{Axis, Candidate, Event, Measurement, Oracle, Outcome, Purpose};
use serde::{Deserialize, Serialize};

/// A single change a user would try to make a failing configuration fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fix {
    /// What a user would read: `output stride 16`, `bf16`.
    pub change: String,
    /// The overrides that make it.
    pub sets: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixResult {
    pub change: String,
    pub candidate: Candidate,
    pub measurement: Measurement,
}

/// A group of module ids swapped for identity together; one item of ddmin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleItem {
    pub label: String,
    pub ids: Vec<String>,
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
    pub ceiling: u64,
    /// Re-run both sides of every boundary this many times before reporting it (0: no re-runs).
    pub confirm_runs: u32,
    /// Probe where measured peaks predict the boundary before bisecting.
    pub predict: bool,
    /// Trials and time; what is not measured within it is inconclusive.
    pub budget: Budget,
    /// Which steps run.
    pub fixes: bool,
    pub modules: bool,
    pub minimise: bool,
    /// Measure an original that runs out of memory once more without the ceiling (how much it
    /// needs).
    pub need: bool,
}

impl SearchOptions {
    fn axis(&self) -> AxisOptions {
        AxisOptions {
            ceiling: self.ceiling,
            predict: self.predict,
            confirm_runs: self.confirm_runs,
        }
    }
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            ceiling: 0,
            confirm_runs: 1,
            predict: true,
            budget: Budget::default(),
            fixes: true,
            modules: true,
            minimise: true,
            need: true,
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
        measurement: Measurement,
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
    /// One step lower on each axis, and one more module swapped: each should fit.
    pub neighbours: Vec<Neighbour>,
    /// Every neighbour was measured and fits.
    pub one_minimal: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    pub change: String,
    pub candidate: Candidate,
    pub measurement: Measurement,
}

/// One module item swapped for identity on its own: what the configuration then needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleCost {
    pub label: String,
    pub ids: Vec<String>,
    pub candidate: Candidate,
    pub measurement: Measurement,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub ceiling_bytes: u64,
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
    /// The last fit and first out-of-memory of the axis named `axis`, when it has a boundary.
    pub fn boundary(&self, axis: &str) -> Option<(&crate::Probe, &crate::Probe)> {
        match &self.axes.iter().find(|a| a.axis == axis)?.verdict {
            AxisVerdict::Boundary {
                last_fit,
                first_oom,
                ..
            } => Some((last_fit, first_oom)),
            _ => None,
        }
    }
}

/// About how many trials a diagnosis of an original that runs out of memory takes, for progress:
/// each axis as plain bisection plus its confirmations, every fix and module item, and a dozen for
/// the modules' reduction and the minimal failing configuration. Not a promise: predictions often
/// need fewer, inconclusive trials more.
pub fn expected_trials(space: &Space, opts: &SearchOptions) -> usize {
    let axes: usize = space
        .axes
        .iter()
        .filter(|a| a.original > 0)
        .map(|a| {
            crate::bisect::plain_bisection_trials(a.original + 1) - 1
                + 2 * opts.confirm_runs as usize
        })
        .sum();
    let fixes = if opts.fixes { space.fixes.len() } else { 0 };
    let modules = if opts.modules {
        space.modules.items.len() + 4
    } else {
        0
    };
    let minimal = if opts.minimise { 8 } else { 0 };
    1 + usize::from(opts.need) + axes + fixes + modules + minimal
}

/// Runs the whole diagnosis against `oracle`, telling `events` as it goes and asking `clock` the time.
pub fn diagnose(
    oracle: &mut dyn Oracle,
    events: &mut dyn FnMut(&Event),
    clock: &dyn Clock,
    space: &Space,
    opts: &SearchOptions,
) -> Diagnosis {
    let mut s = Session::new(oracle, events, opts.budget, clock);
    // Most originals run out of memory (that is why the tool is run): while the original runs, idle
    // workers may start what an OOM diagnosis will need first.
    s.guess(&oom_fan_out(space, opts));
    let original = s.measure(&Candidate::original(), Purpose::Original);
    let mut d = Diagnosis {
        ceiling_bytes: opts.ceiling,
        original: original.clone(),
        need: None,
        axes: vec![],
        capacity: vec![],
        fixes: vec![],
        modules: None,
        module_costs: vec![],
        minimal_failing: None,
        trials: vec![],
        budget_exhausted: false,
    };
    match original.outcome {
        Outcome::Inconclusive => {}
        Outcome::Fits => d.capacity = capacity(&mut s, space, opts),
        Outcome::Oom => explain_oom(&mut s, space, opts, &mut d),
    }
    d.budget_exhausted = s.budget_exhausted;
    d.trials = std::mem::take(&mut s.trials);
    d
}

/// What an OOM diagnosis measures whatever the outcomes: the lowest value of each axis, each fix
/// and each module item swapped alone. Independent of each other, so they can all run at once.
fn oom_fan_out(space: &Space, opts: &SearchOptions) -> Vec<Candidate> {
    let base = Candidate::original();
    let mut out: Vec<Candidate> = opts
        .need
        .then(|| base.without_ceiling())
        .into_iter()
        .collect();
    out.extend(
        space
            .axes
            .iter()
            .filter(|a| a.original > 0)
            .map(|a| a.at(&base, 0)),
    );
    if opts.fixes {
        out.extend(space.fixes.iter().map(fix_candidate));
    }
    if opts.modules {
        let m = &space.modules;
        out.extend(
            m.items
                .iter()
                .map(|i| m.candidate(&base, std::slice::from_ref(i))),
        );
    }
    out
}

fn fix_candidate(fix: &Fix) -> Candidate {
    let mut c = Candidate::original();
    for (k, v) in &fix.sets {
        c = c.with(k, v);
    }
    c
}

/// The original fits: how far each capacity axis can grow.
fn capacity(s: &mut Session<'_>, space: &Space, opts: &SearchOptions) -> Vec<AxisSearch> {
    let tops: Vec<Candidate> = space
        .capacity
        .iter()
        .filter(|a| a.values.len() - 1 > a.original)
        .map(|a| a.at(&Candidate::original(), a.values.len() - 1))
        .collect();
    s.expect(&tops);
    let mut out = vec![];
    for axis in &space.capacity {
        s.event(Event::Step {
            name: format!("capacity {}", axis.name),
        });
        let last = axis.values.len() - 1;
        if last > axis.original {
            let base = Candidate::original();
            out.push(bisect_axis_finely(
                s,
                axis,
                &base,
                axis.original,
                last,
                &opts.axis(),
            ));
        }
    }
    out
}

/// The original runs out of memory: each axis, the fixes, the modules, the minimal failing one.
fn explain_oom(s: &mut Session<'_>, space: &Space, opts: &SearchOptions, d: &mut Diagnosis) {
    s.expect(&oom_fan_out(space, opts));
    if opts.need {
        d.need = Some(s.measure(&Candidate::original().without_ceiling(), Purpose::Need));
    }
    d.axes = search_axes(s, space, opts);
    if opts.fixes {
        s.event(Event::Step {
            name: "fixes".into(),
        });
        d.fixes = fixes(s, space, &d.axes);
    }
    if opts.modules && !space.modules.items.is_empty() {
        s.event(Event::Step {
            name: "modules".into(),
        });
        let (verdict, costs) = culprits(s, &space.modules);
        d.modules = Some(verdict);
        d.module_costs = costs;
    }
    if opts.minimise {
        s.event(Event::Step {
            name: "minimal failing".into(),
        });
        d.minimal_failing = Some(minimise(s, space, opts));
    }
}

/// Each axis from its lowest value to the original's. The axes share no candidate but the original,
/// so where trials can run at once they are searched at once, each on a thread of its own; the
/// result is the same as searching them in turn.
fn search_axes(s: &mut Session<'_>, space: &Space, opts: &SearchOptions) -> Vec<AxisSearch> {
    let axes: Vec<(usize, &Axis)> = space
        .axes
        .iter()
        .filter(|a| a.original > 0)
        .enumerate()
        .collect();
    let one = |s: &mut Session<'_>, (k, axis): &(usize, &Axis)| {
        s.event(Event::Step {
            name: format!("axis {}", axis.name),
        });
        s.set_rerun_floor(AXIS_RERUNS * (*k as u32 + 1));
        let r = bisect_axis_finely(
            s,
            axis,
            &Candidate::original(),
            0,
            axis.original,
            &opts.axis(),
        );
        s.set_rerun_floor(0);
        r
    };
    if axes.len() > 1 {
        if let Some(searched) = s.run_apart(&axes, &one) {
            return searched;
        }
    }
    axes.iter().map(|a| one(s, a)).collect()
}

/// Attempt numbers of each axis's re-runs: axis k's start at `AXIS_RERUNS * (k + 1)`.
const AXIS_RERUNS: u32 = 1000;

/// Each fix on its own, plus the largest batch and input size that fit (from the axes: no new trials).
fn fixes(s: &mut Session<'_>, space: &Space, axes: &[AxisSearch]) -> Vec<FixResult> {
    let mut out = vec![];
    for fix in &space.fixes {
        let c = fix_candidate(fix);
        let m = s.measure(
            &c,
            Purpose::Fix {
                change: fix.change.clone(),
            },
        );
        out.push(FixResult {
            change: fix.change.clone(),
            candidate: c,
            measurement: m,
        });
    }
    for a in axes {
        let fix = space.axes.iter().find(|x| x.name == a.axis);
        if let (AxisVerdict::Boundary { last_fit, .. }, Some(Some(what))) =
            (&a.verdict, fix.map(|x| &x.fix))
        {
            out.push(FixResult {
                change: format!("{what}: {}", last_fit.label),
                candidate: last_fit.candidate.clone(),
                measurement: last_fit.measurement.clone(),
            });
        }
    }
    out
}

fn as_bool(m: &Measurement, want: Outcome) -> Option<bool> {
    match m.outcome {
        Outcome::Inconclusive => None,
        o => Some(o == want),
    }
}

/// Each module item swapped alone, all at once where trials can run at once: the forum thread's
/// method ("swap a block for identity, see if it still OOMs"), done for every item.
fn module_costs(s: &mut Session<'_>, modules: &Modules) -> Vec<ModuleCost> {
    let base = Candidate::original();
    let alone: Vec<Candidate> = modules
        .items
        .iter()
        .map(|i| modules.candidate(&base, std::slice::from_ref(i)))
        .collect();
    s.expect(&alone);
    modules
        .items
        .iter()
        .zip(alone)
        .map(|(item, c)| ModuleCost {
            label: item.label.clone(),
            ids: item.ids.clone(),
            measurement: s.measure(&c, Purpose::Modules),
            candidate: c,
        })
        .collect()
}

/// The smallest set of modules whose swap makes the original fit: a single item when one alone
/// fits (the one with the lowest peak; the others are named too), else ddmin over all items.
/// Never a set larger than one measured to fit: ddmin starts from every item swapped, which fits.
fn culprits(s: &mut Session<'_>, modules: &Modules) -> (ModulesVerdict, Vec<ModuleCost>) {
    let costs = module_costs(s, modules);
    let mut alone: Vec<&ModuleCost> = costs
        .iter()
        .filter(|c| c.measurement.outcome == Outcome::Fits)
        .collect();
    alone.sort_by_key(|c| c.measurement.peak_bytes.unwrap_or(u64::MAX));
    if let Some((best, others)) = alone.split_first() {
        let verdict = ModulesVerdict::Culprits {
            items: vec![best.label.clone()],
            candidate: best.candidate.clone(),
            measurement: best.measurement.clone(),
            // Swapping nothing is the original, which runs out of memory.
            one_minimal: true,
            also_alone: others.iter().map(|c| c.label.clone()).collect(),
        };
        return (verdict, costs);
    }
    (reduce(s, modules), costs)
}

/// ddmin over every module item, for when no item alone makes the original fit.
fn reduce(s: &mut Session<'_>, modules: &Modules) -> ModulesVerdict {
    let base = Candidate::original();
    let all = modules.candidate(&base, &modules.items);
    let m = s.measure(&all, Purpose::Modules);
    match m.outcome {
        Outcome::Oom => {
            return ModulesVerdict::NoSetFits {
                message: format!(
                    "even with every swappable module swapped for identity ({}), it runs out of memory: \
                     the memory is in what cannot be swapped ({}) or in the sizes",
                    modules.items.iter().map(|i| i.label.as_str()).collect::<Vec<_>>().join(", "),
                    modules.unswappable
                ),
            }
        }
        Outcome::Inconclusive => {
            return ModulesVerdict::Inconclusive {
                message: format!("swapping every module could not be measured: {}", m.note),
            }
        }
        Outcome::Fits => {}
    }
    let r = ddmin(
        &modules.items,
        &mut ModuleTest {
            s,
            modules,
            base: &base,
        },
    );
    let candidate = modules.candidate(&base, &r.items);
    let measurement = s.measure(&candidate, Purpose::Modules);
    ModulesVerdict::Culprits {
        items: r.items.iter().map(|i| i.label.clone()).collect(),
        candidate,
        measurement,
        one_minimal: r.one_minimal,
        also_alone: vec![],
    }
}

/// ddmin's test: swapping a set of modules makes the original fit. The sets of a round are told to
/// the oracle before they are tested one by one, so that idle workers can measure them ahead.
struct ModuleTest<'s, 'a> {
    s: &'s mut Session<'a>,
    modules: &'s Modules,
    base: &'s Candidate,
}

impl DdTest<ModuleItem> for ModuleTest<'_, '_> {
    fn test(&mut self, subset: &[ModuleItem]) -> Option<bool> {
        let c = self.modules.candidate(self.base, subset);
        as_bool(&self.s.measure(&c, Purpose::Modules), Outcome::Fits)
    }

    fn upcoming(&mut self, sets: &[Vec<ModuleItem>]) {
        let cs: Vec<Candidate> = sets
            .iter()
            .map(|set| self.modules.candidate(self.base, set))
            .collect();
        self.s.guess(&cs);
    }
}

/// Index of the candidate's value on an axis.
fn index_on(axis: &Axis, c: &Candidate) -> usize {
    match c.get(&axis.key) {
        None => axis.original,
        Some(v) => axis
            .values
            .iter()
            .position(|x| x.value == v)
            .unwrap_or(axis.original),
    }
}

/// Lowers each axis of `cur` to the first value that still runs out of memory (in the context of the
/// other axes as they are in `cur`), in turn, until none moves.
fn shrink_axes(
    s: &mut Session<'_>,
    space: &Space,
    opts: &SearchOptions,
    mut cur: Candidate,
) -> Candidate {
    for _pass in 0..3 {
        let mut changed = false;
        for axis in &space.axes {
            let i = index_on(axis, &cur);
            if i == 0 {
                continue;
            }
            let f = lower_on(s, axis, &cur, i, opts);
            if f < i {
                cur = axis.at(&cur, f);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    cur
}

/// The first value at or below `i` on `axis` that still runs out of memory, on top of `cur` (which
/// runs out of memory at `i`). Gallops down (1, 2, 4, … steps below `i`) until a value fits, then
/// bisects between that fit and the lowest failure: the other axes have already been lowered, so
/// the boundary is usually a few steps below, where bisecting the whole axis would cost its log.
/// The first probe, one step lower, is the passing neighbour the report shows when it fits.
fn lower_on(
    s: &mut Session<'_>,
    axis: &Axis,
    cur: &Candidate,
    i: usize,
    opts: &SearchOptions,
) -> usize {
    let gallop: Vec<Candidate> = std::iter::successors(Some(1usize), |st| Some(st * 2))
        .take_while(|st| *st <= i)
        .map(|st| axis.at(cur, i - st))
        .chain((i & (i - 1) != 0).then(|| axis.at(cur, 0)))
        .collect();
    s.guess(&gallop);
    let mut first_oom = i;
    let mut step = 1;
    let fit = loop {
        let j = i.saturating_sub(step);
        match s.measure(&axis.at(cur, j), Purpose::Minimise).outcome {
            Outcome::Fits => break j,
            Outcome::Oom if j == 0 => return 0,
            Outcome::Oom => first_oom = j,
            // Unmeasurable: keep what is known.
            Outcome::Inconclusive => return first_oom,
        }
        step *= 2;
    };
    if first_oom - fit == 1 {
        return first_oom;
    }
    let no_confirm = AxisOptions {
        confirm_runs: 0,
        ..opts.axis()
    };
    match bisect_axis(s, axis, cur, fit, first_oom, &no_confirm).verdict {
        AxisVerdict::Boundary { first_oom, .. } => first_oom.index,
        AxisVerdict::NotTheCause { lowest, .. } => lowest.index,
        _ => first_oom,
    }
}

/// The smallest configuration that still runs out of memory: every monotone axis lowered to a
/// fixpoint, every module kept as configured (the modules that matter are what `culprits` reports;
/// swapping more of them only makes the configuration less like the user's).
fn minimise(s: &mut Session<'_>, space: &Space, opts: &SearchOptions) -> Minimal {
    let cur = shrink_axes(s, space, opts, Candidate::original());
    let below: Vec<Candidate> = space
        .axes
        .iter()
        .filter_map(|a| index_on(a, &cur).checked_sub(1).map(|j| a.at(&cur, j)))
        .collect();
    s.expect(&below);
    let measurement = s.measure(&cur, Purpose::Minimise);
    // The passing neighbours: one step lower on each axis, one more module swapped.
    let mut neighbours = vec![];
    for axis in &space.axes {
        let i = index_on(axis, &cur);
        if i == 0 {
            continue;
        }
        let c = axis.at(&cur, i - 1);
        let m = s.measure(&c, Purpose::Minimise);
        neighbours.push(Neighbour {
            change: format!(
                "{} {} → {}",
                axis.name,
                axis.values[i].label,
                axis.values[i - 1].label
            ),
            candidate: c,
            measurement: m,
        });
    }
    let one_minimal = measurement.outcome == Outcome::Oom
        && neighbours
            .iter()
            .all(|n| n.measurement.outcome == Outcome::Fits);
    Minimal {
        candidate: cur,
        measurement,
        neighbours,
        one_minimal,
    }
}
