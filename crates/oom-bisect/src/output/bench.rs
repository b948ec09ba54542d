//! `bench`: where a diagnosis's time went. Trials per axis against plain bisection; per trial, the
//! child's whole life against the training steps it measured; the first trial (cold kernel caches)
//! against the later ones.

use oom_search::{Candidate, Diagnosis};
use oom_trial::pool::PoolStats;
use oom_trial::{TrialOutcome, TrialReport};
use std::collections::HashMap;

/// The timings of a finished diagnosis, `reports` by candidate and attempt; `exec`: the trials
/// were a user's command (`--exec`).
pub fn bench(
    d: &Diagnosis,
    reports: &HashMap<(Candidate, u32), TrialReport>,
    wall_seconds: f64,
    resumed: usize,
    kernel_cache: Option<&std::path::Path>,
    exec: bool,
) -> String {
    let mut s = format!(
        "diagnosis: {} trials, {wall_seconds:.1} s wall ({resumed} answered from the journal)\n",
        d.trials.len()
    );
    s += &axes(d);
    s += &by_step(d);
    // Reports in the order the trials ran.
    let ran: Vec<&TrialReport> = d
        .trials
        .iter()
        .filter_map(|t| reports.get(&(t.candidate.clone(), t.attempt)))
        .collect();
    s += &per_trial(&ran, exec);
    s += &format!("  kernel cache: {}\n", cache_line(kernel_cache));
    s
}

/// Where the kernel cache is and how much every trial reads from it as it starts.
fn cache_line(dir: Option<&std::path::Path>) -> String {
    let Some(dir) = dir else {
        return "none".into();
    };
    format!(
        "{} ({} of compiled kernels, read whole by every trial as it starts)",
        dir.display(),
        oom_trial::fmt_bytes(oom_trial::cache::compiled_bytes(dir))
    )
}

fn axes(d: &Diagnosis) -> String {
    let mut s = format!(
        "\n  {:<8} {:>7} {:>14} {:>16}\n",
        "axis", "trials", "confirmations", "plain bisection"
    );
    for a in d.axes.iter().chain(d.capacity.iter()) {
        s += &format!(
            "  {:<8} {:>7} {:>14} {:>16}\n",
            a.axis,
            a.trials - a.confirmations,
            a.confirmations,
            a.plain_bisection
        );
    }
    s
}

/// How many trials each step of the diagnosis ran, in the order of the steps: where a count could
/// still shrink.
fn by_step(d: &Diagnosis) -> String {
    use oom_search::Purpose::*;
    let steps = ["original", "axes", "fixes", "modules", "minimal failing"];
    let mut n = [0usize; 5];
    for t in &d.trials {
        let k = match t.purpose {
            Original | Need => 0,
            Axis { .. } | Confirm { .. } | Capacity { .. } => 1,
            Fix { .. } => 2,
            Modules => 3,
            Minimise => 4,
        };
        n[k] += 1;
    }
    let parts: Vec<String> = steps
        .iter()
        .zip(n)
        .filter(|(_, k)| *k > 0)
        .map(|(s, k)| format!("{s} {k}"))
        .collect();
    format!(
        "  trials by step: {}
",
        parts.join(", ")
    )
}

/// The mean, or nothing when nothing was measured (a `--exec` command builds no model and reports
/// no steps: its rows are left out rather than shown as 0 s).
pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Everything a finished trial spent beyond its steps at their steady speed.
fn overhead(r: &TrialReport) -> f64 {
    let steady = r
        .memory
        .steps
        .iter()
        .skip(1)
        .map(|s| s.seconds)
        .fold(f64::INFINITY, f64::min);
    r.timing.wall_seconds - steady * r.memory.steps.len() as f64
}

fn per_trial(ran: &[&TrialReport], exec: bool) -> String {
    let walls: Vec<f64> = ran.iter().map(|r| r.timing.wall_seconds).collect();
    let ready: Vec<f64> = ran.iter().filter_map(|r| r.timing.ready_seconds).collect();
    let built: Vec<f64> = ran
        .iter()
        .filter_map(|r| Some(r.timing.built_seconds? - r.timing.ready_seconds?))
        .collect();
    // Trials that finished every step: their first step against their later ones.
    let finished: Vec<&TrialReport> = ran
        .iter()
        .copied()
        .filter(|r| r.outcome() == TrialOutcome::Fits && r.memory.steps.len() > 1)
        .collect();
    let of = |f: &dyn Fn(&TrialReport) -> f64| finished.iter().map(|r| f(r)).collect::<Vec<_>>();
    let later: Vec<f64> = finished
        .iter()
        .flat_map(|r| r.memory.steps.iter().skip(1).map(|s| s.seconds))
        .collect();
    let rows = [
        (
            "process start to device ready (context, ceiling)",
            mean(&ready),
        ),
        ("building model, optimizer and batch", mean(&built)),
        ("whole trial, any outcome", mean(&walls)),
        (
            "finished trials: whole trial",
            mean(&of(&|r| r.timing.wall_seconds)),
        ),
        (
            "finished trials: all training steps",
            mean(&of(&|r| r.memory.steps.iter().map(|s| s.seconds).sum())),
        ),
        (
            // A command's first step is timed from its start: its interpreter, imports and build.
            match exec {
                true => "finished trials: first step (the command's start included)",
                false => "finished trials: first step (compilation included)",
            },
            mean(&of(&|r| r.memory.steps[0].seconds)),
        ),
        ("finished trials: a later step", mean(&later)),
        (
            "finished trials: overhead beyond steady steps",
            mean(&of(&overhead)),
        ),
    ];
    let mut s = format!(
        "\nper trial (means; {} trials ran, {} finished every step):\n",
        ran.len(),
        finished.len()
    );
    for (what, secs) in rows.into_iter().filter_map(|(w, m)| Some((w, m?))) {
        s += &format!("  {what:<50} {secs:>8.2} s\n");
    }
    if let (Some(first), Some(later)) = (walls.first(), mean(walls.get(1..).unwrap_or_default())) {
        s += &format!("  first trial {first:.2} s, later trials {later:.2} s on average\n");
    }
    s
}

/// The workers: what they ran, the search's critical path (its rounds of dependent trials, and
/// how long it waited in units of a mean trial, `mean_trial` seconds) and how busy each worker was.
pub fn slots(
    labels: &[&str],
    st: &PoolStats,
    (finished, used): (usize, usize),
    mean_trial: Option<f64>,
) -> String {
    let wall = st.elapsed.as_secs_f64();
    let share = |busy: f64| match wall > 0.0 {
        true => format!("{:.0}%", 100.0 * busy / wall),
        false => "-".into(),
    };
    let busy: Vec<f64> = st.busy.iter().map(|b| b.as_secs_f64()).collect();
    let each: Vec<String> = labels
        .iter()
        .zip(&busy)
        .map(|(l, b)| format!("{l} {}", share(*b)))
        .collect();
    let total = busy.iter().sum::<f64>() / busy.len().max(1) as f64;
    let waited = st.waited.as_secs_f64();
    let trials = match mean_trial.filter(|m| *m > 0.0) {
        Some(m) => format!(
            ", about {:.0} trials end to end at {m:.1} s a trial",
            waited / m
        ),
        None => String::new(),
    };
    let mut s = format!(
        "  workers: {}; {finished} trials run, {used} used by the search, {} started ahead and not \
         needed\n",
        labels.len(),
        finished.saturating_sub(used),
    );
    s += &format!(
        "  critical path: {} rounds of dependent trials (each a trial started when asked for) and {} \
         waits on trials started ahead; the search waited {waited:.1} s of the {wall:.1} s{trials}\n",
        st.rounds, st.caught_up
    );
    s += &format!(
        "  busy: {} on average ({})\n",
        share(total),
        each.join(", ")
    );
    s
}

/// Where the rounds went: the pool's figures at the start of each step of the search (the axes,
/// searched side by side, count as one step), for `bench`.
#[derive(Debug, Default)]
pub struct Steps {
    marks: Vec<(String, u64, f64)>,
}

impl Steps {
    /// The search starts the step `name` (an `Event::Step`) with the pool at `at`.
    pub fn mark(&mut self, name: &str, at: &PoolStats) {
        let group = match name.split_once(' ') {
            Some(("axis", _)) => "axes",
            Some(("capacity", _)) => "capacity",
            _ => name,
        };
        if self.marks.last().is_some_and(|(g, _, _)| g == group) {
            return;
        }
        self.marks
            .push((group.into(), at.rounds as u64, at.elapsed.as_secs_f64()));
    }

    /// `original 2 (2.0 s), axes 9 (14.1 s), …`: each step's rounds and time, the first (the
    /// original, and what it needs) up to the first mark, the last up to `end`.
    pub fn line(&self, end: &PoolStats) -> String {
        let mut bounds = vec![("original".to_string(), 0, 0.0)];
        bounds.extend(self.marks.iter().cloned());
        let ends = bounds
            .iter()
            .skip(1)
            .map(|(_, r, t)| (*r, *t))
            .chain([(end.rounds as u64, end.elapsed.as_secs_f64())]);
        let parts: Vec<String> = bounds
            .iter()
            .zip(ends)
            .map(|((g, r0, t0), (r1, t1))| format!("{g} {} ({:.1} s)", r1 - r0, t1 - t0))
            .collect();
        format!("  rounds by step: {}\n", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn trials_are_counted_by_step_and_steps_without_trials_left_out() {
        use oom_search::{Measurement, Outcome, Purpose, TrialRecord};
        let trial = |purpose| TrialRecord {
            candidate: Candidate::original(),
            purpose,
            attempt: 0,
            measurement: Measurement::new(Outcome::Fits),
        };
        let axis = || Purpose::Axis {
            axis: "batch".into(),
            lo: "1".into(),
            hi: "4".into(),
        };
        let d = Diagnosis {
            trials: vec![
                trial(Purpose::Original),
                trial(Purpose::Need),
                trial(axis()),
                trial(Purpose::Confirm {
                    axis: "batch".into(),
                }),
                trial(Purpose::Minimise),
            ],
            ..Diagnosis::of(Measurement::new(Outcome::Oom))
        };
        assert_eq!(
            by_step(&d),
            "  trials by step: original 2, axes 2, minimal failing 1\n"
        );
    }

    #[test]
    fn slots_say_rounds_and_how_busy_each_worker_was() {
        let st = PoolStats {
            rounds: 7,
            caught_up: 3,
            waited: Duration::from_secs(30),
            busy: vec![Duration::from_secs(40), Duration::from_secs(20)],
            elapsed: Duration::from_secs(40),
        };
        let s = slots(&["cpu:0", "cpu:1"], &st, (12, 10), Some(2.0));
        assert!(
            s.contains("workers: 2; 12 trials run, 10 used by the search, 2 started ahead"),
            "{s}"
        );
        assert!(s.contains("critical path: 7 rounds"), "{s}");
        assert!(s.contains("3 waits on trials started ahead"), "{s}");
        assert!(
            s.contains("30.0 s of the 40.0 s, about 15 trials end to end at 2.0 s"),
            "{s}"
        );
        assert!(
            s.contains("busy: 75% on average (cpu:0 100%, cpu:1 50%)"),
            "{s}"
        );
    }

    #[test]
    fn rounds_are_counted_by_step_with_the_axes_as_one() {
        let at = |rounds, secs| PoolStats {
            rounds,
            caught_up: 0,
            waited: Duration::ZERO,
            busy: vec![],
            elapsed: Duration::from_secs(secs),
        };
        let mut st = Steps::default();
        st.mark("axis batch", &at(2, 2));
        st.mark("axis size", &at(2, 2));
        st.mark("fixes", &at(9, 16));
        st.mark("modules", &at(9, 16));
        st.mark("minimal failing", &at(10, 18));
        assert_eq!(
            st.line(&at(16, 30)),
            "  rounds by step: original 2 (2.0 s), axes 7 (14.0 s), fixes 0 (0.0 s), \
             modules 1 (2.0 s), minimal failing 6 (12.0 s)\n"
        );
    }
}
