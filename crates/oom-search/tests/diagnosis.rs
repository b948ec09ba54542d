//! A whole diagnosis on a fake workload: ddmin on non-monotone module effects and the 1-minimal
//! failing configuration.

mod common;

use common::*;
use oom_search::*;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// A fake workload: memory is a sum of per-axis and per-module terms, with one module whose swap adds
/// memory (non-monotone), and the ceiling in between.
struct Workload {
    runs: usize,
    seen: BTreeSet<(Candidate, u32)>,
}

impl Workload {
    fn new() -> Self {
        Workload {
            runs: 0,
            seen: BTreeSet::new(),
        }
    }
}

const MODULES: [(&str, i64); 6] = [
    ("aspp.pool", 5),
    ("aspp.branch1", 30),
    ("attention", 60),
    ("decoder", -10), // swapping it adds memory
    ("aux_head", 20),
    ("backbone.layer3.1", 8),
];

fn peak(c: &Candidate) -> i64 {
    let batch: i64 = c.get("data.batch").map(|v| v.parse().unwrap()).unwrap_or(8);
    let stride: i64 = c
        .get("model.output_stride")
        .map(|v| v.parse().unwrap())
        .unwrap_or(8);
    let ids = c.get("model.identity").unwrap_or("[]");
    let modules: i64 = MODULES
        .iter()
        .filter(|(id, _)| !ids.contains(&format!("\"{id}\"")))
        .map(|(_, m)| *m)
        .sum();
    // 100 fixed, per sample: 20 at OS8, 10 at OS16, 5 at OS32, scaled by the modules present.
    100 + batch * (160 / stride) * (100 + modules) / 100
}

const CEILING: i64 = 300;

impl Oracle for Workload {
    fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
        assert!(
            self.seen.insert((c.clone(), attempt)),
            "ran twice: {c} attempt {attempt}"
        );
        self.runs += 1;
        let p = peak(c);
        let mut m = Measurement::new(if p <= CEILING {
            Outcome::Fits
        } else {
            Outcome::Oom
        });
        if p <= CEILING {
            m.peak_bytes = Some(p as u64);
            m.base_bytes = Some(100);
        }
        m
    }
}

fn space() -> Space {
    let batch = axis("batch", "data.batch", 8);
    let stride = Axis {
        tag: Tag::default(),
        name: "stride".into(),
        noun: "output stride".into(),
        fix: None,
        key: "model.output_stride".into(),
        values: [32, 16, 8]
            .iter()
            .map(|v| AxisValue {
                value: v.to_string(),
                label: format!("OS{v}"),
                x: None,
            })
            .collect(),
        original: 2,
        fine: vec![],
    };
    Space {
        axes: vec![batch, stride],
        capacity: vec![],
        fixes: vec![Fix {
            tag: Tag::default(),
            change: "output stride 16".into(),
            sets: vec![("model.output_stride".into(), "16".into())],
            covered_by: None,
            estimated_saving: None,
            early: false,
        }],
        modules: Modules {
            key: "model.identity".into(),
            encode: toml_list,
            fixed: vec![],
            items: MODULES
                .iter()
                .map(|(id, _)| ModuleItem {
                    estimated_saving: None,
                    label: id.to_string(),
                    ids: vec![id.to_string()],
                })
                .collect(),
            unswappable: "the stem".into(),
        },
    }
}

#[test]
fn full_diagnosis_is_consistent_and_1_minimal() {
    let mut o = Workload::new();
    let mut events = vec![];
    let mut ev = |e: &Event| events.push(e.clone());
    let opts = SearchOptions {
        ceiling: Some(CEILING as u64),
        ..Default::default()
    };
    let d = diagnose(&mut o, &mut ev, &TestClock::default(), &space(), &opts);
    assert_eq!(d.original.outcome, Outcome::Oom);
    // batch: 100 + 20·b·(1.13) <= 300 -> b <= 8.8/1.13: last fit 7? peak(b)=100+b*20*113/100
    let batch = &d.axes[0];
    let truth = (1..=8).rev().find(|b| {
        let c = Candidate::original().with("data.batch", &b.to_string());
        peak(&c) <= CEILING
    });
    match (&batch.verdict, truth) {
        (
            AxisVerdict::Boundary {
                last_fit,
                confirmed,
                ..
            },
            Some(t),
        ) => {
            assert_eq!(last_fit.label, t.to_string());
            assert!(confirmed);
        }
        (v, t) => panic!("{v:?} vs {t:?}"),
    }
    // Culprits from ddmin: swapping them fits, swapping any one fewer does not.
    let Some(ModulesVerdict::Culprits {
        items, one_minimal, ..
    }) = &d.modules
    else {
        panic!("{:?}", d.modules)
    };
    assert!(*one_minimal);
    let swap = |ids: &[&str]| {
        let list: Vec<String> = ids.iter().map(|i| format!("\"{i}\"")).collect();
        Candidate::original().with("model.identity", &format!("[{}]", list.join(", ")))
    };
    let ids: Vec<&str> = items.iter().map(String::as_str).collect();
    assert!(peak(&swap(&ids)) <= CEILING);
    for i in 0..ids.len() {
        let mut fewer = ids.clone();
        fewer.remove(i);
        assert!(peak(&swap(&fewer)) > CEILING, "{ids:?} without {}", ids[i]);
    }
    // The minimal failing configuration fails, and every neighbour fits.
    let m = d.minimal_failing.as_ref().unwrap();
    assert!(peak(&m.candidate) > CEILING);
    assert!(m.one_minimal, "{m:?}");
    assert!(!m.neighbours.is_empty());
    for n in &m.neighbours {
        assert!(
            peak(&n.candidate) <= CEILING,
            "{}: {}",
            n.change,
            n.candidate
        );
    }
    // Fixes: measured, and the batch fix comes from the axis without a new trial.
    assert!(d.fixes.iter().any(|f| f.change == "output stride 16"));
    assert!(d
        .fixes
        .iter()
        .any(|f| f.change.starts_with("largest batch that fits")));
    assert_eq!(d.trials.len(), o.runs);
    assert!(events.iter().any(|e| matches!(e, Event::Step { .. })));
}

/// The minimal failing configuration starts from what the axes measured: lowering the first axis
/// with every other as configured is what its axis search did, so it costs no trial.
#[test]
fn the_minimal_search_reuses_the_first_axis_boundary() {
    let mut o = Workload::new();
    let opts = SearchOptions {
        ceiling: Some(CEILING as u64),
        ..Default::default()
    };
    let d = diagnose(&mut o, &mut |_| {}, &TestClock::default(), &space(), &opts);
    let batch_alone = d
        .trials
        .iter()
        .filter(|t| t.purpose == Purpose::Minimise)
        .filter(|t| t.candidate.sets.keys().all(|k| k == "data.batch"))
        .map(|t| t.candidate.to_string())
        .collect::<Vec<_>>();
    assert!(batch_alone.is_empty(), "measured again: {batch_alone:?}");
    let m = d.minimal_failing.as_ref().unwrap();
    assert_eq!(m.candidate.get("data.batch"), Some("5"), "{m:?}");
}

#[test]
fn trial_budget_gives_inconclusive_not_guesses() {
    let mut o = Workload::new();
    let mut ev = |_: &Event| {};
    let opts = SearchOptions {
        ceiling: Some(CEILING as u64),
        budget: Budget {
            max_trials: Some(3),
            max_time: None,
        },
        ..Default::default()
    };
    let d = diagnose(&mut o, &mut ev, &TestClock::default(), &space(), &opts);
    assert!(d.budget_exhausted);
    assert_eq!(o.runs, 3);
    for a in &d.axes {
        if let AxisVerdict::Boundary { .. } = a.verdict {
            panic!("a boundary reported without its trials: {a:?}");
        }
    }
}

/// An oracle that answers its first `replayed` calls as a journal would, then runs trials.
struct Replaying {
    inner: Workload,
    replayed: usize,
}

impl Oracle for Replaying {
    fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
        let mut m = self.inner.run(c, attempt);
        if self.replayed > 0 {
            self.replayed -= 1;
            m.replayed = true;
        }
        m
    }
}

/// A budgeted re-run makes progress: answers replayed from the journal cost no budget.
#[test]
fn replayed_answers_cost_no_trial_budget() {
    let mut o = Replaying {
        inner: Workload::new(),
        replayed: 5,
    };
    let mut ev = |_: &Event| {};
    let opts = SearchOptions {
        ceiling: Some(CEILING as u64),
        budget: Budget {
            max_trials: Some(3),
            max_time: None,
        },
        ..Default::default()
    };
    let d = diagnose(&mut o, &mut ev, &TestClock::default(), &space(), &opts);
    assert!(d.budget_exhausted);
    assert_eq!(d.trials.len(), 8, "5 replayed and 3 run");
    assert_eq!(o.inner.runs, 8);
}

#[test]
fn time_budget_stops_starting_trials_and_reports_inconclusive() {
    let budget = |secs: u64| SearchOptions {
        ceiling: Some(CEILING as u64),
        budget: Budget {
            max_trials: None,
            max_time: Some(Duration::from_secs(secs)),
        },
        ..Default::default()
    };
    // No time at all: nothing runs, the original itself is inconclusive.
    let mut o = Workload::new();
    let mut ev = |_: &Event| {};
    let d = diagnose(&mut o, &mut ev, &TestClock::default(), &space(), &budget(0));
    assert!(d.budget_exhausted);
    assert_eq!(o.runs, 0);
    assert_eq!(d.original.outcome, Outcome::Inconclusive);

    // The budget reached mid-search: the trials before it count, nothing is guessed after it.
    struct Slow(Workload, TestClock);
    impl Oracle for Slow {
        fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
            let t = &self.1 .0;
            t.set(t.get() + Duration::from_millis(300));
            self.0.run(c, attempt)
        }
    }
    let mut unlimited = Workload::new();
    let all = {
        let opts = SearchOptions {
            ceiling: Some(CEILING as u64),
            ..Default::default()
        };
        diagnose(
            &mut unlimited,
            &mut ev,
            &TestClock::default(),
            &space(),
            &opts,
        );
        unlimited.runs
    };
    let clock = TestClock::default();
    let mut slow = Slow(Workload::new(), clock.clone());
    let d = diagnose(&mut slow, &mut ev, &clock, &space(), &budget(1));
    assert!(d.budget_exhausted);
    assert_eq!(slow.0.runs, 4, "trials start at 0, 0.3, 0.6 and 0.9 s");
    assert!(slow.0.runs < all);
    assert_eq!(d.original.outcome, Outcome::Oom);
    // Four trials fit in the second; a confirmed boundary needs five: a boundary whose re-runs
    // never ran is reported unconfirmed, not unstable.
    for a in &d.axes {
        match a.verdict {
            AxisVerdict::Boundary {
                confirmed: true, ..
            } => panic!("a boundary confirmed without its re-runs: {a:?}"),
            AxisVerdict::Unstable { .. } => panic!("unrun re-runs called unstable: {a:?}"),
            _ => {}
        }
    }
}

#[test]
fn capacity_when_the_original_fits() {
    struct Cap;
    impl Oracle for Cap {
        fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
            let b: u64 = c.get("data.batch").map(|v| v.parse().unwrap()).unwrap_or(2);
            let p = 100 + 10 * b;
            let mut m = Measurement::new(if p <= 250 {
                Outcome::Fits
            } else {
                Outcome::Oom
            });
            m.peak_bytes = (p <= 250).then_some(p);
            m.base_bytes = Some(100);
            m
        }
    }
    let mut a = axis("batch", "data.batch", 64);
    a.original = 1; // configured batch 2
    let space = Space {
        axes: vec![],
        capacity: vec![a],
        fixes: vec![],
        modules: no_modules(),
    };
    let mut ev = |_: &Event| {};
    let opts = SearchOptions {
        ceiling: Some(250),
        ..Default::default()
    };
    let d = diagnose(&mut Cap, &mut ev, &TestClock::default(), &space, &opts);
    assert_eq!(d.original.outcome, Outcome::Fits);
    let AxisVerdict::Boundary { last_fit, .. } = &d.capacity[0].verdict else {
        panic!("{:?}", d.capacity)
    };
    assert_eq!(last_fit.label, "15");
    // top end + prediction + neighbour, plus two confirmations.
    assert!(
        d.capacity[0].trials - d.capacity[0].confirmations <= 3,
        "{:?}",
        d.capacity[0]
    );
}

/// Memory is 100 plus what each present module costs; the ceiling is 310.
struct Costs;

const COSTS: [(&str, u64); 5] = [
    ("backbone.layer3.1", 40),
    ("backbone.layer4.1", 40),
    ("attention", 120),
    ("aspp.pool", 5),
    ("decoder", 90),
];

impl Oracle for Costs {
    fn run(&mut self, c: &Candidate, _attempt: u32) -> Measurement {
        let ids = c.get("model.identity").unwrap_or("[]");
        let need: u64 = 100
            + COSTS
                .iter()
                .filter(|(id, _)| !ids.contains(&format!("\"{id}\"")))
                .map(|(_, m)| m)
                .sum::<u64>();
        let mut m = Measurement::new(if need <= 310 {
            Outcome::Fits
        } else {
            Outcome::Oom
        });
        m.peak_bytes = Some(need.min(310));
        m
    }
}

/// Issue 13's case: one module (attention) alone makes it fit, but ddmin from every module would
/// first meet a set of backbone blocks. The culprit is exactly that module; the others that fit
/// alone are named; every module's cost is measured on its own.
#[test]
fn a_module_that_alone_fits_is_the_culprit() {
    let mut s = space();
    s.modules.items = COSTS
        .iter()
        .map(|(id, _)| ModuleItem {
            label: id.to_string(),
            ids: vec![id.to_string()],
            estimated_saving: None,
        })
        .collect();
    s.axes.clear();
    s.fixes.clear();
    let opts = SearchOptions {
        ceiling: Some(310),
        minimise: false,
        ..Default::default()
    };
    let d = diagnose(&mut Costs, &mut |_| {}, &TestClock::default(), &s, &opts);
    let Some(ModulesVerdict::Culprits {
        items,
        also_alone,
        one_minimal,
        ..
    }) = &d.modules
    else {
        panic!("{:?}", d.modules)
    };
    assert_eq!(items, &["attention"]);
    assert_eq!(also_alone, &["decoder"]);
    assert!(*one_minimal);
    assert_eq!(d.module_costs.len(), COSTS.len());
    let fits: Vec<&str> = d
        .module_costs
        .iter()
        .filter(|c| c.measurement.outcome == Outcome::Fits)
        .map(|c| c.label.as_str())
        .collect();
    assert_eq!(fits, ["attention", "decoder"]);
    assert_eq!(
        d.trials.len(),
        2 + COSTS.len(),
        "the original, once more without the ceiling, and one trial per module"
    );
    assert!(d.trials[1].candidate.unbounded);
}

/// A boundary found on coarse values is narrowed on the fine ones, exactly, for every position of
/// the true boundary; only the fine boundary is re-run.
#[test]
fn a_coarse_boundary_is_narrowed_on_the_fine_values() {
    for boundary in 4..=23 {
        let mut a = axis("size", "data.size", 24);
        a.fine = a.values.clone();
        // Coarse: every fourth value (4, 8, …, 24), the original (24) among them.
        a.values = a.fine.iter().skip(3).step_by(4).cloned().collect();
        a.original = a.values.len() - 1;
        let mut o = Line {
            key: a.key.clone(),
            n: 24,
            boundary,
            flaky: HashMap::new(),
            runs: 0,
        };
        let mut ev = |_: &Event| {};
        let clock = TestClock::default();
        let mut s = searcher(&mut o, &mut ev, &clock);
        s.measure(&Candidate::original(), Purpose::Original);
        let r = bisect_axis_finely(
            &mut s,
            &a,
            &Candidate::original(),
            0,
            a.original,
            &opts(0, false, 1),
        );
        let AxisVerdict::Boundary {
            last_fit,
            first_oom,
            confirmed,
        } = &r.verdict
        else {
            panic!("boundary {boundary}: {:?}", r.verdict);
        };
        assert_eq!(last_fit.label, boundary.to_string(), "boundary {boundary}");
        assert_eq!(first_oom.label, (boundary + 1).to_string());
        assert!(confirmed);
        assert_eq!(r.confirmations, 2);
        // The candidate of each probe sets the fine value (the original is no override).
        assert_eq!(
            last_fit.candidate.get("data.size"),
            Some(boundary.to_string().as_str())
        );
    }
}

/// Mixed f16 needs `f16` GiB, mixed bf16 a little less (no loss scaler), f32 more than the 23.7 GiB
/// ceiling; a run under the ceiling that runs out of memory says no need.
struct Precisions {
    f16: f64,
}

impl Oracle for Precisions {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let need = match c.get("train.precision") {
            Some("mixed-f16") => self.f16,
            Some("mixed-bf16") => self.f16 - 0.01,
            _ => 30.0,
        };
        let fits = c.unbounded || need <= 23.7;
        let mut m = Measurement::new(if fits { Outcome::Fits } else { Outcome::Oom });
        if fits {
            m.need_bytes = Some(gib(need));
        }
        m
    }
}

/// The precision fixes of a space, mixed bf16 covered by mixed f16 (the order a user reads them).
fn precision_space() -> Space {
    let fix = |change: &str, value: &str, covered_by: Option<&str>| Fix {
        tag: Tag::default(),
        change: change.into(),
        sets: vec![("train.precision".into(), value.into())],
        covered_by: covered_by.map(String::from),
        estimated_saving: None,
        early: true,
    };
    Space {
        axes: vec![],
        capacity: vec![],
        fixes: vec![
            fix(
                "mixed precision bf16",
                "mixed-bf16",
                Some("mixed precision f16"),
            ),
            fix("mixed precision f16", "mixed-f16", None),
        ],
        modules: no_modules(),
    }
}

/// A fix covered by another that fits away from the ceiling is not run: it fits as that one does,
/// and says so. Where the covering fix fits within the re-run margin, or does not fit, it runs.
#[test]
fn a_fix_covered_by_one_that_fits_is_not_run() {
    let opts = SearchOptions {
        ceiling: Some(gib(23.7)),
        rerun_within: Some(0.005),
        modules: false,
        minimise: false,
        need: false,
        ..Default::default()
    };
    let mut ev = |_: &Event| {};
    let mut diagnose_with = |f16: f64| {
        let d = diagnose(
            &mut Precisions { f16 },
            &mut ev,
            &TestClock::default(),
            &precision_space(),
            &opts,
        );
        let ran_bf16 = d
            .trials
            .iter()
            .any(|t| t.candidate.get("train.precision") == Some("mixed-bf16"));
        (d.fixes, ran_bf16)
    };
    let (fixes, ran) = diagnose_with(17.4);
    assert!(!ran, "{fixes:?}");
    // A fix's need names the cards it fits on: its trial runs every step, for the whole need.
    assert!(fixes[1].candidate.every_step, "{fixes:?}");
    assert_eq!(fixes[0].change, "mixed precision bf16", "the space's order");
    assert_eq!(fixes[0].implied_by.as_deref(), Some("mixed precision f16"));
    assert_eq!(fixes[0].measurement, fixes[1].measurement);
    for f16 in [23.65, 25.0] {
        let (fixes, ran) = diagnose_with(f16);
        assert!(ran, "{f16}: {fixes:?}");
        assert_eq!(fixes[0].implied_by, None);
    }
}

/// The original needs 30 GiB under a 23.7 GiB ceiling; swapping `big` saves 10 GiB, `small` 1,
/// `unknown` 0.5. A run under the ceiling that runs out of memory says no need.
struct Swaps;

impl Oracle for Swaps {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let ids = c.get("model.identity").unwrap_or("[]");
        let saved: f64 = [("big", 10.0), ("small", 1.0), ("unknown", 0.5)]
            .iter()
            .filter(|(id, _)| ids.contains(&format!("\"{id}\"")))
            .map(|(_, g)| g)
            .sum();
        let need = 30.0 - saved;
        let fits = c.unbounded || need <= 23.7;
        let mut m = Measurement::new(if fits { Outcome::Fits } else { Outcome::Oom });
        if fits {
            m.need_bytes = Some(gib(need));
        }
        m
    }
}

/// Options for [`Swaps`]: its ceiling, the need measured first (what the original must shed is
/// known before the fixes and modules), no minimal configuration.
fn swaps_options() -> SearchOptions {
    SearchOptions {
        ceiling: Some(gib(23.7)),
        minimise: false,
        probe_without_ceiling: true,
        ..Default::default()
    }
}

/// A fix setting `key` to `value`, with what it saves by the estimate (GiB).
fn estimated_fix(
    change: &str,
    (key, value): (&str, &str),
    saving: Option<f64>,
    early: bool,
) -> Fix {
    Fix {
        tag: Tag::default(),
        change: change.into(),
        sets: vec![(key.into(), value.into())],
        covered_by: None,
        estimated_saving: saving.map(gib),
        early,
    }
}

/// An item whose estimated saving, doubled, is still far from what the original must shed is
/// not run alone, and says why; an item with no estimate, or a large one, runs.
#[test]
fn a_module_that_saves_far_too_little_by_the_estimate_is_not_run() {
    let item = |id: &str, estimate: Option<f64>| ModuleItem {
        label: id.into(),
        ids: vec![id.into()],
        estimated_saving: estimate.map(gib),
    };
    let space = Space {
        modules: Modules {
            items: vec![
                item("big", Some(9.0)),
                item("small", Some(1.0)),
                item("unknown", None),
            ],
            ..no_modules()
        },
        fixes: vec![],
        ..precision_space()
    };
    let opts = SearchOptions {
        fixes: false,
        ..swaps_options()
    };
    let mut ev = |_: &Event| {};
    let d = diagnose(&mut Swaps, &mut ev, &TestClock::default(), &space, &opts);
    let cost = |id: &str| d.module_costs.iter().find(|c| c.label == id).unwrap();
    let ran = |id: &str| d.trials.iter().any(|t| t.candidate == cost(id).candidate);
    assert!(cost("small").not_run.is_some(), "{:?}", cost("small"));
    assert!(!ran("small"));
    assert!(ran("big") && ran("unknown"));
    assert_eq!(cost("big").measurement.outcome, Outcome::Fits);
    assert!(
        matches!(&d.modules, Some(ModulesVerdict::Culprits { items, .. }) if items == &["big"]),
        "{:?}",
        d.modules
    );
}

/// A fix whose estimated saving, doubled, is still far from what the original must shed is not
/// run, and says why (the summary's "ruled out" names it as not run); one with no estimate, or a
/// large one, runs. ([`Swaps`]: each fix here swaps one of its modules.)
#[test]
fn a_fix_that_saves_far_too_little_by_the_estimate_is_not_run() {
    let fix = |id: &str, estimate: Option<f64>| {
        let swapped = format!("[\"{id}\"]");
        let change = format!("without {id}");
        estimated_fix(&change, ("model.identity", &swapped), estimate, false)
    };
    let space = Space {
        fixes: vec![
            fix("big", Some(9.0)),
            fix("small", Some(1.0)),
            fix("unknown", None),
        ],
        ..precision_space()
    };
    let opts = SearchOptions {
        modules: false,
        ..swaps_options()
    };
    let mut ev = |_: &Event| {};
    let d = diagnose(&mut Swaps, &mut ev, &TestClock::default(), &space, &opts);
    let result = |id: &str| {
        let change = format!("without {id}");
        d.fixes.iter().find(|f| f.change == change).unwrap()
    };
    let ran = |id: &str| d.trials.iter().any(|t| t.candidate == result(id).candidate);
    let small = result("small");
    assert!(
        small
            .not_run
            .as_deref()
            .is_some_and(|w| w.contains("6.30 GiB must go")),
        "{small:?}"
    );
    assert_eq!(small.measurement.outcome, Outcome::Oom);
    assert!(!ran("small"));
    assert!(ran("big") && ran("unknown"));
    assert_eq!(result("big").measurement.outcome, Outcome::Fits);
    assert_eq!(result("unknown").measurement.outcome, Outcome::Oom);
}

/// [`Swaps`], writing down what it runs and what it is told to start ahead (sure).
#[derive(Default)]
struct SwapsTold {
    log: Vec<String>,
}

impl Oracle for SwapsTold {
    fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
        self.log.push(format!("run {c}"));
        Swaps.run(c, attempt)
    }

    fn prefetch(&mut self, asks: &[(Candidate, u32)], sure: bool) {
        for (c, _) in asks.iter().filter(|_| sure) {
            self.log.push(format!("ahead {c}"));
        }
    }
}

/// A fix that compiles kernels of its own (a precision) starts with the first trials; one the
/// original's need may rule out waits for the need, then starts at once if it is kept, and never
/// if it is not.
#[test]
fn fixes_the_need_may_rule_out_start_after_it() {
    let space = Space {
        fixes: vec![
            estimated_fix("pure f16", ("train.precision", "\"f16\""), Some(15.0), true),
            estimated_fix(
                "without big",
                ("model.identity", "[\"big\"]"),
                Some(9.0),
                false,
            ),
            estimated_fix(
                "without small",
                ("model.identity", "[\"small\"]"),
                Some(1.0),
                false,
            ),
        ],
        ..precision_space()
    };
    let opts = SearchOptions {
        modules: false,
        ..swaps_options()
    };
    let mut o = SwapsTold::default();
    diagnose(&mut o, &mut |_| {}, &TestClock::default(), &space, &opts);
    let at = |line: &str| o.log.iter().position(|l| l == line);
    let need = at("run original without the ceiling").expect("the need");
    let f16 = at("ahead train.precision=\"f16\"");
    let big = at("ahead model.identity=[\"big\"]");
    assert!(f16.is_some_and(|i| i < need), "{:#?}", o.log);
    assert!(big.is_some_and(|i| i > need), "{:#?}", o.log);
    assert!(!o.log.iter().any(|l| l.contains("small")), "{:#?}", o.log);
}
