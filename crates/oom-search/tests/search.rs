//! The search against fake oracles: every monotone sequence up to length 12 with inconclusive results
//! injected everywhere, ddmin on non-monotone module effects, and the 1-minimal failing configuration.

use oom_search::*;
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

/// A clock the test moves: trials take no time unless an oracle advances it.
#[derive(Default, Clone)]
struct TestClock(Rc<Cell<Duration>>);

impl Clock for TestClock {
    fn elapsed(&self) -> Duration {
        self.0.get()
    }
}

fn searcher<'a>(
    o: &'a mut dyn Oracle,
    ev: &'a mut dyn FnMut(&Event),
    clock: &'a TestClock,
) -> Searcher<'a> {
    Searcher::new(o, ev, Budget::default(), clock)
}

fn opts(ceiling: u64, predict: bool, confirm_runs: u32) -> AxisOptions {
    AxisOptions {
        ceiling: Some(ceiling),
        predict,
        confirm_runs,
        rerun_within: None,
    }
}

fn axis(name: &str, key: &str, n: usize) -> Axis {
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
struct Line {
    key: String,
    n: usize,
    boundary: usize,
    flaky: HashMap<usize, u32>,
    runs: usize,
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

fn search(
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

fn check(n: usize, boundary: usize, r: &AxisSearch, inconclusive_allowed: bool) {
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

#[test]
fn every_monotone_sequence_up_to_12() {
    for n in 1..=12 {
        for boundary in 0..=n {
            for predict in [false, true] {
                let r = search(n, boundary, HashMap::new(), predict, true);
                check(n, boundary, &r, false);
            }
        }
    }
}

#[test]
fn persistent_inconclusive_at_every_position() {
    for n in 1..=12 {
        for boundary in 0..=n {
            for bad in 0..n {
                for predict in [false, true] {
                    let r = search(n, boundary, HashMap::from([(bad, u32::MAX)]), predict, true);
                    // Only an unmeasurable value at the boundary or at an end may leave it open.
                    let decisive =
                        bad == boundary || bad + 1 == boundary || bad == 0 || bad == n - 1;
                    check(n, boundary, &r, decisive);
                }
            }
        }
    }
}

/// A lowest value that cannot be measured (PyTorch refuses batch 1) is stepped over: the boundary
/// above it is still found; an OOM just above it is not called "not the cause".
#[test]
fn an_unmeasurable_lowest_value_is_stepped_over() {
    for predict in [false, true] {
        let r = search(6, 3, HashMap::from([(0, u32::MAX)]), predict, true);
        check(6, 3, &r, false);
        let r = search(6, 1, HashMap::from([(0, u32::MAX)]), predict, true);
        assert!(
            matches!(&r.verdict, AxisVerdict::Inconclusive { hi: Some(h), .. } if h.index == 1),
            "{r:?}"
        );
    }
}

#[test]
fn transient_inconclusive_is_retried_once() {
    for n in 1..=12 {
        for boundary in 0..=n {
            for bad in 0..n {
                let r = search(n, boundary, HashMap::from([(bad, 1)]), true, true);
                check(n, boundary, &r, false);
            }
        }
    }
}

#[test]
fn two_inconclusive_values_anywhere() {
    for n in 3..=10 {
        for boundary in 1..n {
            for a in 0..n {
                for b in a + 1..n {
                    let r = search(
                        n,
                        boundary,
                        HashMap::from([(a, u32::MAX), (b, u32::MAX)]),
                        false,
                        false,
                    );
                    check(n, boundary, &r, true);
                }
            }
        }
    }
}

#[test]
fn prediction_beats_plain_bisection_on_affine_memory() {
    // Memory affine in the batch: the boundary is found with the low end plus two probes.
    for n in [8, 12, 16, 32, 64] {
        for boundary in 1..n {
            let r = search(n, boundary, HashMap::new(), true, false);
            check(n, boundary, &r, false);
            assert!(r.trials <= 3, "n={n} b={boundary}: {} trials", r.trials);
            let plain = search(n, boundary, HashMap::new(), false, false);
            assert!(plain.trials <= r.plain_bisection);
        }
    }
}

/// The forum scenario's size axis as the H200 measured it (R101 OS8 batch 4, 24 GiB ceiling;
/// a journal of the forum's size axis): live tensors about 0.6 GiB + 7e-5 GiB per pixel, the device
/// peak about 1.2 × that + 1.1 GiB (context and pool pages). 512² fits (23.8 GiB), 544² does not.
struct PagedDevice;

impl Oracle for PagedDevice {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let side: f64 = c
            .get("data.size")
            .map(|v| {
                v.trim_matches(['[', ']'])
                    .split(',')
                    .next()
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap()
            })
            .unwrap_or(1024.0);
        let live = 0.6 + 7.0e-5 * side * side;
        under_24_gib(1.2 * live + 1.1, live, 0.443)
    }
}

/// A trial under a 24 GiB ceiling whose device peak, live tensors and base memory are the given
/// GiB: it fits, with those readings, where the device peak stays under the ceiling.
fn under_24_gib(device: f64, live: f64, base: f64) -> Measurement {
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

/// Searches `axis` between `lo` and `hi` with predictions under 24 GiB after the original; returns
/// the values probed, in order (the original as `original`), and the verdict.
fn probed_search(
    o: &mut dyn Oracle,
    axis: &Axis,
    lo: usize,
    hi: usize,
) -> (Vec<String>, AxisSearch) {
    probed_search_with(o, axis, lo, hi, &opts(24 << 30, true, 0))
}

/// [`probed_search`] with the given options.
fn probed_search_with(
    o: &mut dyn Oracle,
    axis: &Axis,
    lo: usize,
    hi: usize,
    options: &AxisOptions,
) -> (Vec<String>, AxisSearch) {
    let mut probed: Vec<String> = vec![];
    let mut ev = |e: &Event| {
        if let Event::TrialStarted { candidate, .. } = e {
            probed.push(candidate.get(&axis.key).unwrap_or("original").to_string());
        }
    };
    let clock = TestClock::default();
    let mut s = searcher(o, &mut ev, &clock);
    s.measure(&Candidate::original(), Purpose::Original);
    let r = bisect_axis(&mut s, axis, &Candidate::original(), lo, hi, options);
    (probed, r)
}

#[test]
fn prediction_uses_live_tensors_where_device_peaks_are_paged() {
    let a = Axis {
        tag: Tag::default(),
        name: "size".into(),
        noun: "input size".into(),
        fix: None,
        key: "data.size".into(),
        values: (1..=32)
            .map(|k| AxisValue {
                value: format!("[{}, {}]", 32 * k, 32 * k),
                label: format!("{0}×{0}", 32 * k),
                x: Some((32.0 * k as f64).powi(2)),
            })
            .collect(),
        original: 31,
        fine: vec![],
    };
    let (probed, r) = probed_search(&mut PagedDevice, &a, 0, 31);
    match &r.verdict {
        AxisVerdict::Boundary {
            last_fit,
            first_oom,
            ..
        } => {
            assert_eq!(
                (last_fit.label.as_str(), first_oom.label.as_str()),
                ("512×512", "544×544")
            );
        }
        v => panic!("{v:?}"),
    }
    // The H200 run took 8 trials here (32², then 128², 160², 576², 352², 448², 512², 544²), predicting
    // from device peaks; the previous predictor on this oracle probes exactly that sequence. From
    // live tensors, predicting again after a fit far below the ceiling: 32², 288², 544², 512².
    assert!(r.trials <= 5, "{} trials: {probed:?}", r.trials);
}

/// A capacity search as the H200 measured it (R50 OS16 512²): the device holds
/// more beside the live tensors the larger the batch (`slack` GiB a sample), so a line through the
/// original's live tensors (0.3 GiB + 0.6 GiB a sample) overshoots the boundary by a few batches.
struct GrowingSlack {
    slack: f64,
}

impl Oracle for GrowingSlack {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let b: f64 = c.get("data.batch").map_or(4.0, |v| v.parse().unwrap());
        let live = 0.3 + 0.6 * b;
        under_24_gib(live + 0.5 + self.slack * b, live, 0.3)
    }
}

/// The batches a capacity search probes from batch 4 (the original) on an axis of 1..=64, and its
/// verdict.
fn capacity_probes(slack: f64) -> (Vec<String>, AxisSearch) {
    let a = Axis {
        tag: Tag::default(),
        original: 3,
        ..axis("batch", "data.batch", 64)
    };
    probed_search(&mut GrowingSlack { slack }, &a, 3, 63)
}

#[test]
fn an_overshooting_prediction_gallops_back_instead_of_bisecting_the_axis() {
    // 0.04 GiB a sample: the line predicts 38, batch 36 fits and 37 does not. The top end, the
    // prediction and its neighbour (both out of memory), then 35 (two below: fits), then 36.
    // Bisecting [4, 37] after the neighbour took eight trials in all.
    let (probed, r) = capacity_probes(0.04);
    check(64, 36, &r, false);
    assert_eq!(probed, ["original", "64", "38", "37", "35", "36"], "{r:?}");
    // 0.1 GiB a sample (the H200 probed 38, 37, 35, 31, 32, 34, 33): 33 fits, 34 does not. The gallop
    // goes 37, 35, 31 (fits); plain bisection halves [31, 35] from there.
    let (probed, r) = capacity_probes(0.1);
    check(64, 33, &r, false);
    assert_eq!(
        probed,
        ["original", "64", "38", "37", "35", "31", "33", "34"],
        "{r:?}"
    );
}

/// Trials replayed through the caching allocator say their need on both sides of the ceiling:
/// needs rise by about 0.4 GiB a size step, with a pool's worth of noise; the prediction through the
/// pair that brackets the ceiling lands on the boundary.
struct Replayed;

impl Oracle for Replayed {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let side: u64 = c
            .get("data.size")
            .map(|v| {
                v.trim_matches(['[', ']'])
                    .split(',')
                    .next()
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap()
            })
            .unwrap_or(1024);
        let need =
            0.6 + 2.4e-5 * (side * side) as f64 + [0.0, 0.3, 0.1, 0.25][(side / 8 % 4) as usize];
        let mut m = Measurement::new(if need <= 24.0 {
            Outcome::Fits
        } else {
            Outcome::Oom
        });
        m.need_bytes = Some((need * (1u64 << 30) as f64) as u64);
        m
    }
}

#[test]
fn needs_on_both_sides_of_the_ceiling_find_the_boundary_in_few_probes() {
    let a = Axis {
        tag: Tag::default(),
        name: "size".into(),
        noun: "input size".into(),
        fix: None,
        key: "data.size".into(),
        values: (0..=64)
            .map(|k| {
                let side = 512 + 8 * k;
                AxisValue {
                    value: format!("[{side}, {side}]"),
                    label: format!("{side}×{side}"),
                    x: Some((side as f64).powi(2)),
                }
            })
            .collect(),
        original: 64,
        fine: vec![],
    };
    let (probed, r) = probed_search(&mut Replayed, &a, 0, 64);
    match &r.verdict {
        AxisVerdict::Boundary {
            last_fit,
            first_oom,
            ..
        } => {
            let need = |p: &Probe| p.measurement.need_bytes.unwrap() as f64 / (1u64 << 30) as f64;
            assert!(need(last_fit) <= 24.0 && need(first_oom) > 24.0, "{r:?}");
        }
        v => panic!("{v:?}"),
    }
    // The original (the top), the bottom, then the predicted pair.
    assert!(probed.len() <= 4, "{probed:?}");
}

/// [`GrowingSlack`] that also writes down, in order, what it runs and what it is told to start
/// ahead (`sure` or `guess`, the batches).
struct Told {
    inner: GrowingSlack,
    log: Vec<String>,
    /// Batches whose first run has finished ahead (`Oracle::ready`).
    ready: Vec<&'static str>,
}

impl Oracle for Told {
    fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
        let b = c.get("data.batch").unwrap_or("original");
        self.log.push(format!("run {b}"));
        self.inner.run(c, attempt)
    }

    fn prefetch(&mut self, asks: &[(Candidate, u32)], sure: bool) {
        let batches: Vec<&str> = asks
            .iter()
            .filter_map(|(c, _)| c.get("data.batch"))
            .collect();
        let kind = if sure { "sure" } else { "guess" };
        self.log.push(format!("{kind} {}", batches.join(" ")));
    }

    fn ready(&self, c: &Candidate, attempt: u32) -> bool {
        attempt == 0 && self.ready.iter().any(|b| c.get("data.batch") == Some(*b))
    }
}

/// The capacity search of [`capacity_probes`] at 0.04 GiB a sample (probes original, 64, 38, 37,
/// 35, 36) against a [`Told`] whose `ready` batches finished ahead; returns its log.
fn told_capacity(ready: Vec<&'static str>) -> Vec<String> {
    let a = Axis {
        tag: Tag::default(),
        original: 3,
        ..axis("batch", "data.batch", 64)
    };
    let mut o = Told {
        inner: GrowingSlack { slack: 0.04 },
        log: vec![],
        ready,
    };
    let (probed, _) = probed_search(&mut o, &a, 3, 63);
    assert_eq!(probed, ["original", "64", "38", "37", "35", "36"]);
    o.log
}

/// A capacity search starts its first predicted probe beside the top of the axis, not after it:
/// where the original fits, the prediction needs nothing but the top's running out of memory.
#[test]
fn the_first_prediction_starts_beside_the_top() {
    let log = told_capacity(vec![]);
    let top = log.iter().position(|l| l == "run 64").unwrap();
    let before: Vec<&str> = log[..top].iter().map(String::as_str).collect();
    // The prediction (38) is sure; its neighbours (39 if it fits, 37 if not) are guesses.
    assert_eq!(before[1..], ["sure 38", "guess 39 37"], "{log:?}");
}

/// A probe whose result is already there (finished ahead) answers at once: nothing is guessed for
/// it, since the step after it guesses anew and what was guessed would only take slots.
#[test]
fn nothing_is_guessed_for_a_probe_that_finished_ahead() {
    let log = told_capacity(vec!["38"]);
    let from = log.iter().position(|l| l == "run 64").unwrap();
    let to = log.iter().position(|l| l == "run 38").unwrap();
    assert_eq!(log[from + 1..to], [] as [String; 0], "{log:?}");
    // Its neighbour, not ready, has its guesses.
    assert!(log[to + 1].starts_with("guess"), "{log:?}");
}

/// What a search asks for ahead (sure) and what it runs, each with its attempt number.
struct Attempts {
    inner: GrowingSlack,
    ahead: Vec<(String, u32)>,
    ran: Vec<(String, u32)>,
}

impl Oracle for Attempts {
    fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
        let b = c.get("data.batch").unwrap_or("original").to_string();
        self.ran.push((b, attempt));
        self.inner.run(c, attempt)
    }

    fn prefetch(&mut self, asks: &[(Candidate, u32)], sure: bool) {
        for (c, a) in asks.iter().filter(|_| sure) {
            self.ahead
                .push((c.get("data.batch").unwrap_or("original").to_string(), *a));
        }
    }
}

/// A probe next to an end of the interval may close it: the confirmation's re-runs of the pair it
/// would close start beside it, under the attempt numbers the confirmation then asks for, so that
/// the last round is the probe and the re-runs at once instead of the probe, then the re-runs.
#[test]
fn the_confirmation_starts_beside_a_probe_that_may_close_the_interval() {
    // 0.04 GiB a sample: 64, 38 and 37 run out of memory, 35 fits, then 36 (fits) closes it.
    let a = Axis {
        tag: Tag::default(),
        original: 3,
        ..axis("batch", "data.batch", 64)
    };
    let mut o = Attempts {
        inner: GrowingSlack { slack: 0.04 },
        ahead: vec![],
        ran: vec![],
    };
    let mut ev = |_: &Event| {};
    let clock = TestClock::default();
    let mut s = searcher(&mut o, &mut ev, &clock);
    s.measure(&Candidate::original(), Purpose::Original);
    let r = bisect_axis(
        &mut s,
        &a,
        &Candidate::original(),
        3,
        63,
        &opts(24 << 30, true, 1),
    );
    check(64, 36, &r, false);
    assert!(matches!(
        r.verdict,
        AxisVerdict::Boundary {
            confirmed: true,
            ..
        }
    ));
    let pair = |b: &str, n: u32| (b.to_string(), n);
    // Asked for before 36 first ran: the re-runs of 35, 36 (after its first run) and 37.
    let ahead_of_36 = o.ahead.iter().position(|x| *x == pair("36", 1));
    assert!(ahead_of_36.is_some(), "{:?}", o.ahead);
    for b in ["35", "37"] {
        assert!(o.ahead.contains(&pair(b, 1)), "{:?}", o.ahead);
    }
    // The confirmation re-ran 36 and 37 under those numbers, and nothing ran a third time.
    assert!(
        o.ran.contains(&pair("36", 1)) && o.ran.contains(&pair("37", 1)),
        "{:?}",
        o.ran
    );
    assert!(o.ran.iter().all(|(_, n)| *n <= 1), "{:?}", o.ran);
}

/// A batch axis whose values below `boundary` fit and above it do not, and `boundary` itself fits
/// on its run number `attempt` only: a flaky boundary.
struct FitsOnAttempt {
    boundary: usize,
    attempt: u32,
}

impl Oracle for FitsOnAttempt {
    fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
        let i: usize = c.get("data.batch").map(|v| v.parse().unwrap()).unwrap_or(8);
        let fits = i < self.boundary || (i == self.boundary && attempt == self.attempt);
        Measurement::new(if fits { Outcome::Fits } else { Outcome::Oom })
    }
}

#[test]
fn unstable_boundary_is_reported() {
    // The last fitting value fits on its first run and runs out of memory on its re-run.
    let a = axis("batch", "data.batch", 8);
    let mut o = FitsOnAttempt {
        boundary: 4,
        attempt: 0,
    };
    let mut ev = |_: &Event| {};
    let clock = TestClock::default();
    let mut s = searcher(&mut o, &mut ev, &clock);
    let r = bisect_axis(&mut s, &a, &Candidate::original(), 0, 7, &opts(0, false, 1));
    assert!(matches!(r.verdict, AxisVerdict::Unstable { .. }), "{r:?}");
}

#[test]
fn more_confirmation_runs_catch_a_rarer_flake() {
    // The first failing value fits on its third run only (attempt 2).
    let a = axis("batch", "data.batch", 8);
    let run = |confirm_runs: u32| {
        let mut o = FitsOnAttempt {
            boundary: 4,
            attempt: 2,
        };
        let mut ev = |_: &Event| {};
        let clock = TestClock::default();
        let mut s = searcher(&mut o, &mut ev, &clock);
        bisect_axis(
            &mut s,
            &a,
            &Candidate::original(),
            0,
            7,
            &opts(0, false, confirm_runs),
        )
    };
    let once = run(1);
    assert!(
        matches!(
            once.verdict,
            AxisVerdict::Boundary {
                confirmed: true,
                ..
            }
        ),
        "{once:?}"
    );
    assert_eq!(once.confirmations, 2);
    let twice = run(2);
    assert_eq!(twice.confirmations, 4);
    match &twice.verdict {
        AxisVerdict::Unstable { message, .. } => {
            assert!(message.contains("oom 2/3 runs (else fits)"), "{message}");
            assert!(message.contains("fits 3/3 runs"), "{message}");
        }
        v => panic!("{v:?}"),
    }
}

/// A batch axis under 24 GiB whose batch `b` holds `gib_per_sample × b` GiB at its peak: the
/// candidates run, in order.
struct Samples {
    gib_per_sample: f64,
    ran: Vec<(String, u32)>,
    /// A batch whose fit disagrees with its replay.
    disagree: Option<f64>,
}

impl Oracle for Samples {
    fn run(&mut self, c: &Candidate, attempt: u32) -> Measurement {
        let b: f64 = c.get("data.batch").map_or(8.0, |v| v.parse().unwrap());
        self.ran.push((b.to_string(), attempt));
        let need = self.gib_per_sample * b;
        let mut m = under_24_gib(need, need, 0.5);
        m.need_bytes = Some((need * (1u64 << 30) as f64) as u64);
        m.replay_disagrees = self.disagree == Some(b);
        m
    }
}

/// Where trials are replayed, a side of the boundary is re-run only where its need lies within
/// `rerun_within` of the ceiling, or the device and the replay disagreed; a side with no need
/// (the device's own out-of-memory) is not.
#[test]
fn a_side_is_re_run_only_where_its_need_is_near_the_ceiling() {
    let reruns = |gib_per_sample: f64, disagree: Option<f64>| {
        let a = axis("batch", "data.batch", 8);
        let mut o = Samples {
            gib_per_sample,
            ran: vec![],
            disagree,
        };
        let mut ev = |_: &Event| {};
        let clock = TestClock::default();
        let mut s = searcher(&mut o, &mut ev, &clock);
        let options = AxisOptions {
            rerun_within: Some(0.005),
            ..opts(24 << 30, false, 1)
        };
        let r = bisect_axis(&mut s, &a, &Candidate::original(), 0, 7, &options);
        drop(s);
        (reran(&o), r)
    };
    // 7 GiB a sample: batch 3 needs 21 GiB, batch 4 28: neither near 24, neither re-run.
    let (again, r) = reruns(7.0, None);
    assert!(again.is_empty(), "{r:?}");
    assert_eq!(r.reruns, Sides::default());
    // 7.98 GiB a sample: batch 3 needs 23.94 GiB, within 0.5% of 24: re-run; batch 4 is not.
    let (again, r) = reruns(7.98, None);
    assert_eq!(again, ["3"], "{r:?}");
    assert_eq!(
        r.reruns,
        Sides {
            last_fit: 1,
            first_oom: 0
        }
    );
    // A last fit the device fitted where its replay did not: re-run however far its need.
    let (again, _) = reruns(7.0, Some(3.0));
    assert_eq!(again, ["3"]);
}

/// The batches re-run, in order.
fn reran(o: &Samples) -> Vec<String> {
    o.ran
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(b, _)| b.clone())
        .collect()
}

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

/// The identity list as the caller writes it.
fn toml_list(ids: &[String]) -> String {
    let list: Vec<String> = ids.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", list.join(", "))
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
        }],
        modules: Modules {
            key: "model.identity".into(),
            encode: toml_list,
            fixed: vec![],
            items: MODULES
                .iter()
                .map(|(id, _)| ModuleItem {
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
        modules: Modules {
            key: "model.identity".into(),
            encode: toml_list,
            fixed: vec![],
            items: vec![],
            unswappable: String::new(),
        },
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
