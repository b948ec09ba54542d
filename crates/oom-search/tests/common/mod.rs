//! What the search's tests share: a clock the test moves, a one-axis oracle with flaky values, and
//! the checks every axis search must pass.
#![allow(dead_code)]

use oom_search::*;
use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// A clock the test moves: trials take no time unless an oracle advances it.
#[derive(Default, Clone)]
pub struct TestClock(pub Rc<Cell<Duration>>);

impl Clock for TestClock {
    fn elapsed(&self) -> Duration {
        self.0.get()
    }
}

pub fn searcher<'a>(
    o: &'a mut dyn Oracle,
    ev: &'a mut dyn FnMut(&Event),
    clock: &'a TestClock,
) -> Searcher<'a> {
    Searcher::new(o, ev, Budget::default(), clock)
}

pub fn opts(ceiling: u64, predict: bool, confirm_runs: u32) -> AxisOptions {
    AxisOptions {
        ceiling: Some(ceiling),
        predict,
        confirm_runs,
        rerun_within: None,
        probe_without_ceiling: false,
    }
}

pub fn axis(name: &str, key: &str, n: usize) -> Axis {
    Axis {
        tag: Tag::default(),
        name: name.into(),
        noun: format!("{name} dimension"),
        fix: Some(format!("largest {name} that fits")),
        key: key.into(),
        values: (1..=n)
            .map(|v| AxisValue {
                value: v.to_string(),
                label: v.to_string(),
                x: Some(v as f64),
            })
            .collect(),
        original: n - 1,
        fine: vec![],
    }
}

/// An oracle over one axis: index `i` fits iff `i < boundary`; `flaky` indices are inconclusive on
/// their first `flaky_runs` attempts.
pub struct Line {
    pub key: String,
    pub n: usize,
    pub boundary: usize,
    pub flaky: HashMap<usize, u32>,
    pub runs: usize,
}

impl Oracle for Line {
    fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
        self.runs += 1;
        let i = c
            .get(&self.key)
            .map(|v| v.parse::<usize>().unwrap() - 1)
            .unwrap_or(self.n - 1);
        if self.flaky.get(&i).is_some_and(|k| attempt < *k) {
            let mut m = Measurement::new(Outcome::Inconclusive);
            m.note = "injected".into();
            return m;
        }
        let mut m = Measurement::new(if i < self.boundary {
            Outcome::Fits
        } else {
            Outcome::Oom
        });
        if m.outcome == Outcome::Fits {
            m.peak_bytes = Some(100 + 10 * (i as u64 + 1));
            m.base_bytes = Some(100);
        }
        m
    }
}

pub fn search(
    n: usize,
    boundary: usize,
    flaky: HashMap<usize, u32>,
    predict: bool,
    confirm: bool,
) -> AxisSearch {
    let a = axis("batch", "data.batch", n);
    let mut o = Line {
        key: a.key.clone(),
        n,
        boundary,
        flaky,
        runs: 0,
    };
    let mut ev = |_: &Event| {};
    let clock = TestClock::default();
    let mut s = searcher(&mut o, &mut ev, &clock);
    // Ceiling between the peaks of boundary-1 and boundary: the prediction is informed.
    let ceiling = 100 + 10 * boundary as u64 + 5;
    // The diagnosis measures the original first; an axis search finds it cached.
    s.measure(&Candidate::original(), Purpose::Original);
    bisect_axis(
        &mut s,
        &a,
        &Candidate::original(),
        0,
        n - 1,
        &opts(ceiling, predict, u32::from(confirm)),
    )
}

pub fn check(n: usize, boundary: usize, r: &AxisSearch, inconclusive_allowed: bool) {
    match &r.verdict {
        AxisVerdict::Boundary {
            last_fit,
            first_oom,
            ..
        } => {
            assert_eq!(first_oom.index, boundary, "n={n} b={boundary} {r:?}");
            assert_eq!(last_fit.index + 1, boundary);
        }
        AxisVerdict::NotTheCause { .. } => assert_eq!(boundary, 0),
        AxisVerdict::AllFit { .. } => assert_eq!(boundary, n),
        AxisVerdict::Inconclusive { lo, hi, .. } => {
            assert!(inconclusive_allowed, "n={n} b={boundary}: {r:?}");
            // The true boundary must lie inside what is reported.
            if let Some(lo) = lo {
                assert!(lo.index < boundary);
            }
            if let Some(hi) = hi {
                assert!(hi.index >= boundary);
            }
        }
        AxisVerdict::Unstable { .. } => panic!("a deterministic oracle is stable: {r:?}"),
    }
}

/// A trial under a 24 GiB ceiling whose device peak, live tensors and base memory are the given
/// GiB: it fits, with those readings, where the device peak stays under the ceiling.
pub fn under_24_gib(device: f64, live: f64, base: f64) -> Measurement {
    let g = (1u64 << 30) as f64;
    let mut m = Measurement::new(if device <= 24.0 {
        Outcome::Fits
    } else {
        Outcome::Oom
    });
    if m.outcome == Outcome::Fits {
        m.peak_bytes = Some((device * g) as u64);
        m.peak_in_use_bytes = Some((live * g) as u64);
        m.base_bytes = Some((base * g) as u64);
    }
    m
}

/// `g` GiB in bytes.
pub fn gib(g: f64) -> u64 {
    (g * (1u64 << 30) as f64) as u64
}

/// No module items, ids written as a TOML list of strings: `["a", "b"]`.
pub fn no_modules() -> Modules {
    Modules {
        key: "model.identity".into(),
        encode: toml_list,
        fixed: vec![],
        items: vec![],
        unswappable: String::new(),
    }
}

/// The identity list as the caller writes it.
pub fn toml_list(ids: &[String]) -> String {
    let list: Vec<String> = ids.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", list.join(", "))
}
