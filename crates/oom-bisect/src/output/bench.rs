//! `bench`: where a diagnosis's time went. Trials per axis against plain bisection; per trial, the
//! child's whole life against the training steps it measured; the first trial (cold kernel caches)
//! against the later ones.

use oom_search::{Candidate, Diagnosis};
use oom_trial::pool::PoolStats;
use oom_trial::{TrialOutcome, TrialReport};
use std::collections::HashMap;

/// The timings of a finished diagnosis, `reports` by candidate and attempt.
pub fn bench(
    d: &Diagnosis,
    reports: &HashMap<(Candidate, u32), TrialReport>,
    wall_seconds: f64,
    resumed: usize,
    kernel_cache: Option<&std::path::Path>,
) -> String {
    let mut s = format!(
        "diagnosis: {} trials, {wall_seconds:.1} s wall ({resumed} answered from the journal)\n",
        d.trials.len()
    );
    s += &axes(d);
    // Reports in the order the trials ran.
    let ran: Vec<&TrialReport> = d
        .trials
        .iter()
        .filter_map(|t| reports.get(&(t.candidate.clone(), t.attempt)))
        .collect();
    s += &per_trial(&ran);
    s += &format!(
        "  kernel cache: {}\n",
        kernel_cache
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "none".into())
    );
    s
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

/// The mean, or nothing when nothing was measured (a `--exec` command builds no model and reports
/// no steps: its rows are left out rather than shown as 0 s).
fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Everything a finished trial spent beyond its steps at their steady speed.
fn overhead(r: &TrialReport) -> f64 {
    let steady = r
        .steps
        .iter()
        .skip(1)
        .map(|s| s.seconds)
        .fold(f64::INFINITY, f64::min);
    r.wall_seconds - steady * r.steps.len() as f64
}

fn per_trial(ran: &[&TrialReport]) -> String {
    let walls: Vec<f64> = ran.iter().map(|r| r.wall_seconds).collect();
    let ready: Vec<f64> = ran.iter().filter_map(|r| r.ready_seconds).collect();
    let built: Vec<f64> = ran
        .iter()
        .filter_map(|r| Some(r.built_seconds? - r.ready_seconds?))
        .collect();
    // Trials that finished every step: their first step against their later ones.
    let finished: Vec<&TrialReport> = ran
        .iter()
        .copied()
        .filter(|r| r.outcome == TrialOutcome::Fits && r.steps.len() > 1)
        .collect();
    let of = |f: &dyn Fn(&TrialReport) -> f64| finished.iter().map(|r| f(r)).collect::<Vec<_>>();
    let later: Vec<f64> = finished
        .iter()
        .flat_map(|r| r.steps.iter().skip(1).map(|s| s.seconds))
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
            mean(&of(&|r| r.wall_seconds)),
        ),
        (
            "finished trials: all training steps",
            mean(&of(&|r| r.steps.iter().map(|s| s.seconds).sum())),
        ),
        (
            "finished trials: first step (compilation included)",
            mean(&of(&|r| r.steps[0].seconds)),
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

/// The workers: what they ran, how often the whole search stood waiting on them (its rounds of
/// dependent trials: with one worker, one per trial) and how busy each was.
pub fn slots(labels: &[&str], st: &PoolStats, finished: usize, used: usize) -> String {
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
    format!(
        "  workers: {}; {finished} trials run, {used} used by the search, {} started ahead and not \
         needed\n  critical path: {} rounds of dependent trials (the search waiting on them {:.1} s of \
         the {wall:.1} s)\n  busy: {} on average ({})\n",
        labels.len(),
        finished.saturating_sub(used),
        st.rounds,
        st.waited.as_secs_f64(),
        share(total),
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn slots_say_rounds_and_how_busy_each_worker_was() {
        let st = PoolStats {
            rounds: 7,
            waited: Duration::from_secs(30),
            busy: vec![Duration::from_secs(40), Duration::from_secs(20)],
            elapsed: Duration::from_secs(40),
        };
        let s = slots(&["cpu:0", "cpu:1"], &st, 12, 10);
        assert!(
            s.contains("workers: 2; 12 trials run, 10 used by the search, 2 started ahead"),
            "{s}"
        );
        assert!(s.contains("critical path: 7 rounds"), "{s}");
        assert!(s.contains("30.0 s of the 40.0 s"), "{s}");
        assert!(
            s.contains("busy: 75% on average (cpu:0 100%, cpu:1 50%)"),
            "{s}"
        );
    }
}
