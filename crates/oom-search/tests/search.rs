//! Bisection against fake oracles: every monotone sequence up to length 12 with inconclusive
//! results injected everywhere, re-runs of flaky boundaries, and where sides are re-run.

mod common;

use common::*;
use oom_search::*;
use std::collections::HashMap;

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

/// Fits at every batch; batches above 2 stop after their first step (a need that is a lower
/// bound) unless run over every step. Counts the runs.
struct Steps {
    runs: Vec<Candidate>,
}

impl Oracle for Steps {
    fn run(&mut self, c: &Candidate, _: u32) -> Measurement {
        self.runs.push(c.clone());
        let mut m = Measurement::new(Outcome::Fits);
        m.need_bytes = Some(gib(1.0));
        m.need_at_least = !c.every_step && c.get("data.batch") != Some("2");
        m
    }
}

/// A configuration run over every step answers the same one run plainly, and a plain run answers
/// one over every step only where its need is the whole run's.
#[test]
fn a_whole_run_answers_its_plain_twin_and_not_the_reverse() {
    let mut o = Steps { runs: vec![] };
    let mut ev = |_: &Event| {};
    let clock = TestClock::default();
    let mut s = searcher(&mut o, &mut ev, &clock);
    let at = |b: &str| Candidate::original().with("data.batch", b);
    // Batch 3 stopped early: its run over every step runs; then it answers the plain one.
    s.measure(&at("3"), Purpose::Modules);
    assert!(s.known(&at("3").every_step()).is_none());
    let whole = s.measure(&at("3").every_step(), Purpose::Modules);
    assert!(!whole.need_at_least);
    // Batch 2 ran every step plainly: it answers its run over every step.
    s.measure(&at("2"), Purpose::Modules);
    assert!(s.known(&at("2").every_step()).is_some());
    // Batch 4 over every step first: the plain one is answered without a run.
    s.measure(&at("4").every_step(), Purpose::Modules);
    assert!(!s.measure(&at("4"), Purpose::Modules).need_at_least);
    drop(s);
    assert_eq!(o.runs.len(), 4, "{:?}", o.runs);
}
