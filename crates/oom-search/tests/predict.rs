//! Predicted probes: lines through measured peaks and needs, overshoots, and what is started ahead.

mod common;

use common::*;
use oom_search::*;

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

/// A capacity search whose trials say their needs, as the H200 replays them (R50 OS16 512² under
/// 24 GiB: 22.80 GiB at batch 32, 23.50 at 33): 0.4 GiB + 0.7 GiB a sample, with a few pool
/// rounding's worth of noise, above the 0.3 GiB held before the first forward pass.
struct CapacityNeeds;

impl Oracle for CapacityNeeds {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let b: u64 = c.get("data.batch").map_or(4, |v| v.parse().unwrap());
        let need = 0.4 + 0.7 * b as f64 + [0.0, 0.04, 0.02, 0.03][(b % 4) as usize];
        let mut m = Measurement::new(if need <= 24.0 {
            Outcome::Fits
        } else {
            Outcome::Oom
        });
        m.need_bytes = Some((need * (1u64 << 30) as f64) as u64);
        m.base_bytes = Some(3 << 28);
        m
    }
}

/// From the original's need, the largest batch is found on needs alone: the predicted last fit, a
/// line through the needs nearest the ceiling, and the neighbour that closes it. The top of the
/// axis (batch 64) never runs: the original and three probes.
#[test]
fn a_capacity_search_on_needs_never_runs_the_top() {
    let a = Axis {
        tag: Tag::default(),
        original: 3,
        ..axis("batch", "data.batch", 64)
    };
    let (probed, r) = probed_search(&mut CapacityNeeds, &a, 3, 63);
    let AxisVerdict::Boundary {
        last_fit,
        first_oom,
        ..
    } = &r.verdict
    else {
        panic!("{r:?}")
    };
    assert_eq!(
        (last_fit.label.as_str(), first_oom.label.as_str()),
        ("33", "34")
    );
    assert!(!probed.contains(&"64".to_string()), "{probed:?}");
    assert!(
        probed.len() <= 4,
        "the original and at most three probes: {probed:?}"
    );
}

/// The forum's size axis as a device under a ceiling runs it (R101 OS8 batch 4, 23.7 GiB): a run
/// that fits says its need; one that runs out of memory under the ceiling stops there and says
/// none; one without the ceiling (on the whole card) always says it. Needs grow a little faster
/// than the pixels, with a pool's worth of wobble; `slack`: GiB the device fits beyond what the
/// replay says (where the two disagree, the device is the certificate).
#[derive(Default)]
struct ForumDevice {
    slack: f64,
    /// GiB the allocator holds beyond the smooth curve, most at 800², none below 400²: what bends
    /// a line drawn through the ends of the axis (held blocks of split segments do).
    bump: f64,
}

impl ForumDevice {
    fn need(&self, side: u64) -> f64 {
        forum_need(side) + self.bump * (1.0 - (side as f64 - 800.0).abs() / 400.0).max(0.0)
    }
}

const FORUM_CEILING: f64 = 23.7;

fn forum_need(side: u64) -> f64 {
    let pixels = (side * side) as f64;
    0.9 + 4.0 * pixels * 7.57e-6 * (1.0 + 0.15 * side as f64 / 1024.0)
        + [0.0, 0.12, 0.04, 0.09][(side / 8 % 4) as usize]
}

fn side(c: &Candidate) -> u64 {
    c.get("data.size").map_or(1024, |v| {
        v.trim_matches(['[', ']'])
            .split(',')
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    })
}

impl Oracle for ForumDevice {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let need = self.need(side(c));
        let gib = |g: f64| (g * (1u64 << 30) as f64) as u64;
        let fits = c.unbounded || need <= FORUM_CEILING + self.slack;
        let mut m = Measurement::new(if fits { Outcome::Fits } else { Outcome::Oom });
        // As a real trial's report: its device verdict against its own stream's replay.
        m.replay_disagrees = !c.unbounded && fits != (need <= FORUM_CEILING);
        if m.outcome == Outcome::Fits {
            m.need_bytes = Some(gib(need));
            m.peak_bytes = Some(gib(need));
        }
        m
    }
}

/// The forum's batch axis: 1 to 4, configured 4.
fn forum_batch_axis() -> Axis {
    Axis {
        tag: Tag::default(),
        original: 3,
        ..axis("batch", "data.batch", 4)
    }
}

fn forum_size_axis() -> Axis {
    let value = |side: u64| AxisValue {
        value: format!("[{side}, {side}]"),
        label: format!("{side}×{side}"),
        x: Some((side * side) as f64),
    };
    Axis {
        tag: Tag::default(),
        name: "size".into(),
        noun: "input size".into(),
        fix: None,
        key: "data.size".into(),
        values: (1..=32).map(|k| value(32 * k)).collect(),
        original: 31,
        fine: (4..=128).map(|k| value(8 * k)).collect(),
    }
}

/// The diagnosis of an original that runs out of memory under the forum's ceiling, on `axis` alone
/// (no fixes, modules or minimal configuration), its axes' probes without the ceiling or not.
fn axis_search(device: &mut dyn Oracle, axis: Axis, without_ceiling: bool) -> Diagnosis {
    let opts = SearchOptions {
        minimise: false,
        ..forum_options(without_ceiling)
    };
    let mut ev = |_: &Event| {};
    diagnose(
        device,
        &mut ev,
        &TestClock::default(),
        &forum_space(vec![axis]),
        &opts,
    )
}

/// A space of `axes` alone: no fixes, no modules.
fn forum_space(axes: Vec<Axis>) -> Space {
    Space {
        axes,
        capacity: vec![],
        fixes: vec![],
        modules: no_modules(),
    }
}

/// The forum's ceiling with the options of a diagnosis whose needs are replayed (no fixes or
/// modules), its axes' probes without the ceiling or not.
fn forum_options(without_ceiling: bool) -> SearchOptions {
    SearchOptions {
        ceiling: Some((FORUM_CEILING * (1u64 << 30) as f64) as u64),
        rerun_within: Some(0.005),
        fixes: false,
        modules: false,
        probe_without_ceiling: without_ceiling,
        ..Default::default()
    }
}

fn forum_size_search(device: &mut ForumDevice, without_ceiling: bool) -> Diagnosis {
    axis_search(device, forum_size_axis(), without_ceiling)
}

fn boundary(d: &Diagnosis) -> (&Probe, &Probe) {
    match &d.axes[0].verdict {
        AxisVerdict::Boundary {
            last_fit,
            first_oom,
            ..
        } => (last_fit, first_oom),
        v => panic!("{v:?}"),
    }
}

/// Probes without the ceiling say their need past the boundary too, so each line is drawn
/// through needs on both sides of it; the pair found then runs under the ceiling.
#[test]
fn probes_without_the_ceiling_find_the_size_boundary_in_fewer_trials() {
    let truth = (4..=128)
        .map(|k| 8 * k)
        .filter(|s| forum_need(*s) <= FORUM_CEILING)
        .max();
    let capped = forum_size_search(&mut ForumDevice::default(), false);
    let free = forum_size_search(&mut ForumDevice::default(), true);
    for d in [&capped, &free] {
        let (fit, oom) = boundary(d);
        assert_eq!(side(&fit.candidate), truth.unwrap());
        assert_eq!(side(&oom.candidate), truth.unwrap() + 8);
        // Each side ran under the ceiling: the device's own verdict.
        for p in [fit, oom] {
            assert!(d.trials.iter().any(|t| t.candidate == p.candidate), "{p:?}");
        }
    }
    let (before, after) = (capped.axes[0].trials, free.axes[0].trials);
    assert!(after < before, "{after} trials, {before} under the ceiling");
}

/// Where the line through the ends puts the boundary too high, the probe predicted to fit runs out
/// of memory under the ceiling and says no need; the probes after it run without the ceiling, so
/// that each draws the next line through a need (a secant step), instead of galloping down through
/// out-of-memories that say nothing.
#[test]
fn a_line_that_overshoots_is_redrawn_through_needs() {
    let mut device = ForumDevice {
        bump: 3.5,
        ..Default::default()
    };
    let truth = (4..=128)
        .map(|k| 8 * k)
        .filter(|s| device.need(*s) <= FORUM_CEILING)
        .max()
        .unwrap();
    let capped = forum_size_search(&mut device, false);
    let free = forum_size_search(&mut device, true);
    for d in [&capped, &free] {
        let (fit, oom) = boundary(d);
        assert_eq!(
            (side(&fit.candidate), side(&oom.candidate)),
            (truth, truth + 8)
        );
    }
    let (before, after) = (capped.axes[0].trials, free.axes[0].trials);
    assert!(after < before, "{after} trials, {before} under the ceiling");
    // Galloping down from the overshoot under the ceiling: 792, 784, 768, 736, 752, 760 and the
    // bottom. Redrawn through the need at 768: 792, 784, 768, 760, and 768's certificate.
    assert!(after <= 6, "{after} trials");
}

/// Where the device fits a side that the replay puts over the ceiling, the device's verdict
/// stands: the boundary is searched on from it under the ceiling, and the side says so. (The
/// replay puts the boundary at 816 | 824, the device 0.75 GiB higher at 832 | 840.)
#[test]
fn the_device_overrules_a_replay_it_contradicts() {
    let d = forum_size_search(
        &mut ForumDevice {
            slack: 0.75,
            ..Default::default()
        },
        true,
    );
    let (fit, oom) = boundary(&d);
    assert_eq!((side(&fit.candidate), side(&oom.candidate)), (832, 840));
    assert!(fit.measurement.replay_disagrees, "{fit:?}");
    let sides = [&fit.candidate, &oom.candidate];
    for c in sides {
        assert!(
            d.trials.iter().any(|t| &t.candidate == c),
            "{c} never ran under the ceiling"
        );
    }
}

/// The forum's depth axis: 37 stages, each estimated to add about 0.75 GiB; the device needs the
/// weights and state (0.6 GiB) plus a little more than the estimate, with wobble. A run under the
/// ceiling that runs out of memory says no need; one without it always does.
struct DepthDevice;

fn depth_need(stage: usize) -> f64 {
    0.6 + 1.04 * depth_estimate(stage) + [0.0, 0.1, 0.05][stage % 3]
}

fn depth_estimate(stage: usize) -> f64 {
    0.75 * (stage + 1) as f64
}

fn stage(c: &Candidate) -> usize {
    c.get("model.truncate_after")
        .map_or(36, |v| v.parse().unwrap())
}

impl Oracle for DepthDevice {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let need = depth_need(stage(c));
        let fits = need <= FORUM_CEILING;
        let mut m = Measurement::new(if fits || c.unbounded {
            Outcome::Fits
        } else {
            Outcome::Oom
        });
        if m.outcome == Outcome::Fits {
            m.need_bytes = Some((need * (1u64 << 30) as f64) as u64);
        }
        m.base_bytes = Some(6 << 29);
        m
    }
}

/// With the estimate as its x, the depth axis is searched on needs like the batch: fewer trials
/// than bisecting its 37 stages, the same boundary.
#[test]
fn needs_along_the_estimate_find_the_depth_boundary() {
    let depth = |x: bool| Axis {
        tag: Tag::default(),
        name: "depth".into(),
        noun: "depth".into(),
        fix: None,
        key: "model.truncate_after".into(),
        values: (0..37)
            .map(|i| AxisValue {
                value: i.to_string(),
                label: i.to_string(),
                x: x.then(|| depth_estimate(i) * (1u64 << 30) as f64),
            })
            .collect(),
        original: 36,
        fine: vec![],
    };
    let truth = (0..37)
        .filter(|i| depth_need(*i) <= FORUM_CEILING)
        .max()
        .unwrap();
    let mut trials = vec![];
    for x in [false, true] {
        let d = axis_search(&mut DepthDevice, depth(x), true);
        let (fit, oom) = boundary(&d);
        assert_eq!(
            (stage(&fit.candidate), stage(&oom.candidate)),
            (truth, truth + 1)
        );
        trials.push(d.axes[0].trials);
    }
    assert!(trials[1] < trials[0], "{trials:?}");
}

/// The forum's batch and size together, as a device under a ceiling runs them: need grows with
/// the batch and a little faster than the pixels; a run that runs out of memory under the ceiling
/// says no need, one without the ceiling always does.
struct ForumPlane;

fn plane_need(batch: u64, side: u64) -> f64 {
    let pixels = (side * side) as f64;
    0.9 + batch as f64 * pixels * 7.57e-6 * (1.0 + 0.15 * side as f64 / 1024.0)
        + [0.0, 0.12, 0.04, 0.09][(side / 8 % 4) as usize]
}

fn batch(c: &Candidate) -> u64 {
    c.get("data.batch").map_or(4, |v| v.parse().unwrap())
}

impl Oracle for ForumPlane {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        plane_measurement(c, plane_need(batch(c), side(c)))
    }
}

/// What a device says of `c` needing `need` GiB: its need only where it fits.
fn plane_measurement(c: &Candidate, need: f64) -> Measurement {
    let fits = c.unbounded || need <= FORUM_CEILING;
    let mut m = Measurement::new(if fits { Outcome::Fits } else { Outcome::Oom });
    if fits {
        m.need_bytes = Some((need * (1u64 << 30) as f64) as u64);
        m.need_floor_bytes = Some((PLANE_FLOOR * (1u64 << 30) as f64) as u64);
    }
    m.base_bytes = Some(9 << 26);
    m
}

/// [`plane_need`] at no pixels: what no value of either axis moves.
const PLANE_FLOOR: f64 = 0.9;

/// The original's need and its floor draw each axis's first line: the predicted last fit runs
/// first, and where it fits, every value below it does; no axis runs its bottom (batch 1, 32²).
#[test]
fn the_axes_start_from_the_top_where_the_original_says_its_need() {
    let batch_axis = forum_batch_axis();
    let space = forum_space(vec![batch_axis, forum_size_axis()]);
    let opts = SearchOptions {
        minimise: false,
        ..forum_options(true)
    };
    let mut ev = |_: &Event| {};
    let d = diagnose(
        &mut ForumPlane,
        &mut ev,
        &TestClock::default(),
        &space,
        &opts,
    );
    let last_fit = |axis: usize| match &d.axes[axis].verdict {
        AxisVerdict::Boundary { last_fit, .. } => {
            (batch(&last_fit.candidate), side(&last_fit.candidate))
        }
        v => panic!("{v:?}"),
    };
    let size = (4..=128)
        .map(|k| 8 * k)
        .filter(|s| plane_need(4, *s) <= FORUM_CEILING)
        .max()
        .unwrap();
    assert_eq!((last_fit(0), last_fit(1)), ((2, 1024), (4, size)));
    let bottom = |t: &TrialRecord| batch(&t.candidate) == 1 || side(&t.candidate) == 32;
    assert!(!d.trials.iter().any(bottom), "{:?}", d.trials);
    // The original, its need, batch 2 and 3; the size's prediction, its neighbour, and the
    // secant step where the line is off.
    assert!(
        d.trials.len() <= 7,
        "{} trials: {:?}",
        d.trials.len(),
        d.trials
    );
}

/// The minimal failing configuration of the forum starts from the batch boundary (3 runs out of
/// memory at 1024²) and lowers the size at batch 3, galloping down from 1024² on the axis's own
/// values until one fits, then closing the interval: 1-minimal on those values, in five trials.
#[test]
fn the_forum_minimal_configuration_lowers_the_size_at_the_batch_boundary() {
    let batch_axis = forum_batch_axis();
    let space = forum_space(vec![batch_axis, forum_size_axis()]);
    let mut ev = |_: &Event| {};
    let clock = TestClock::default();
    let d = diagnose(
        &mut ForumPlane,
        &mut ev,
        &clock,
        &space,
        &forum_options(true),
    );
    let m = d.minimal_failing.as_ref().unwrap();
    // On the axis's own values (every 32 pixels): the minimal configuration is 1-minimal there.
    let truth = (1..=32)
        .map(|k| 32 * k)
        .find(|s| plane_need(3, *s) > FORUM_CEILING)
        .unwrap();
    assert_eq!(
        (batch(&m.candidate), side(&m.candidate)),
        (3, truth),
        "{m:?}"
    );
    assert!(m.one_minimal, "{m:?}");
    // 992 and 960 run out of memory, 896 fits, 928 closes the interval; batch 2 at that size, the
    // other passing neighbour, is not run: batch 2 fits at 1024² (the batch axis measured it).
    let minimal = d
        .trials
        .iter()
        .filter(|t| t.candidate.get("data.batch") == Some("3") || side(&t.candidate) == truth)
        .filter(|t| t.candidate.sets.len() == 2)
        .count();
    assert!(minimal <= 4, "{minimal} trials");
    // The size axis's own search measured 32² to fit at batch 4, which implies it at batch 3; the
    // lowering still gallops down from the top, where the boundary is, not up from that bottom.
    let bottom = |t: &&TrialRecord| batch(&t.candidate) == 3 && side(&t.candidate) <= 128;
    assert!(!d.trials.iter().any(|t| bottom(&t)), "{:?}", d.trials);
    let by_batch = m.neighbours.iter().find(|n| n.change.starts_with("batch"));
    let implied_by = by_batch.and_then(|n| n.implied_by.as_ref());
    assert_eq!(
        implied_by.map(Candidate::to_sets),
        Some(vec!["data.batch=2".to_string()]),
        "{m:?}"
    );
}

/// [`ForumPlane`] with a third axis, `model.detail` (1 or 2, as configured), which halves the need
/// at 1; on workers that can run searches at once (`at_once`) or not.
struct DetailPlane {
    at_once: bool,
}

impl Oracle for DetailPlane {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let share = if c.get("model.detail") == Some("1") {
            0.5
        } else {
            1.0
        };
        plane_measurement(c, share * plane_need(batch(c), side(c)))
    }

    fn fork(&self) -> Option<Box<dyn Oracle + Send + '_>> {
        self.at_once
            .then(|| Box::new(DetailPlane { at_once: true }) as Box<dyn Oracle + Send>)
    }
}

/// The minimal search implies outcomes from what was measured: beside the axes it has seen only the
/// batch axis (and not that detail 1 fits at batch 4, which implies it at batch 3), after them every
/// axis; where it could run beside them it takes only what it would have seen there. So the
/// diagnosis is the same whether the axes ran at once or in turn.
#[test]
fn the_diagnosis_is_the_same_with_the_axes_at_once() {
    let batch_axis = forum_batch_axis();
    let axes = vec![
        batch_axis,
        forum_size_axis(),
        axis("detail", "model.detail", 2),
    ];
    let space = forum_space(axes);
    let clock = TestClock::default();
    let run = |at_once: bool| {
        let oracle = &mut DetailPlane { at_once };
        diagnose(oracle, &mut |_| {}, &clock, &space, &forum_options(true))
    };
    let (in_turn, at_once) = (run(false), run(true));
    assert!(in_turn.minimal_failing.is_some());
    assert_eq!(in_turn.minimal_failing, at_once.minimal_failing);
    assert_eq!(in_turn.trials, at_once.trials);
}

/// A size axis whose need is affine in the pixels (1 GiB at none, 32.4 GiB at 1024²) but whose
/// trials report a floor of 0.5 GiB: the line from the top puts the last fit a step too high.
struct UnderstatedFloor;

fn affine_need(side: u64) -> f64 {
    1.0 + 31.4 * (side * side) as f64 / (1024.0 * 1024.0)
}

impl Oracle for UnderstatedFloor {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        let need = affine_need(side(c));
        let fits = c.unbounded || need <= FORUM_CEILING;
        let mut m = Measurement::new(if fits { Outcome::Fits } else { Outcome::Oom });
        if fits {
            m.need_bytes = Some((need * (1u64 << 30) as f64) as u64);
            m.need_floor_bytes = Some(1 << 29);
        }
        m
    }
}

/// Where the first probe from the top runs out of memory, the next predicted one below it still
/// comes before the bottom: a step too high costs one trial, and 32² never runs.
#[test]
fn a_first_probe_a_step_too_high_is_followed_from_the_top() {
    let d = axis_search(&mut UnderstatedFloor, forum_size_axis(), true);
    let truth = (4..=128)
        .map(|k| 8 * k)
        .filter(|s| affine_need(*s) <= FORUM_CEILING)
        .max()
        .unwrap();
    let (fit, oom) = boundary(&d);
    assert_eq!(
        (side(&fit.candidate), side(&oom.candidate)),
        (truth, truth + 8)
    );
    assert!(
        !d.trials.iter().any(|t| side(&t.candidate) < 256),
        "{:?}",
        d.trials
    );
    // The original, its need, the prediction (one step too high) and its neighbour.
    assert_eq!(d.trials.len(), 4, "{:?}", d.trials);
}
