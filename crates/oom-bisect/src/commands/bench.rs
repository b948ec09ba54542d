//! `bench`: one diagnosis with its report, then where its time went.

use super::bisect::run_bisect;
use super::report::report_run;
use crate::cli::BenchArgs;
use crate::output;
use anyhow::Result;

/// `bench`: one diagnosis (its full report first), then where its time went.
pub fn bench(args: &BenchArgs) -> Result<i32> {
    let run = run_bisect(&args.bisect)?;
    let code = report_run(&run)?;
    let st = &run.settings;
    showln!(
        "\nbench: {} on {}",
        output::title(&st.workload.config),
        st.device.label()
    );
    show!(
        "{}",
        output::bench::bench(
            &run.diagnosis,
            &run.reports,
            run.wall_seconds,
            run.resumed,
            run.kernel_cache.as_deref(),
            matches!(st.device.engine, oom_trial::Engine::Exec { .. })
        )
    );
    let slots: Vec<&str> = run
        .dispatch
        .slots
        .iter()
        .map(|s| s.label.as_str())
        .collect();
    let used = run.diagnosis.trials.len() - run.resumed;
    let walls: Vec<f64> = run
        .reports
        .values()
        .map(|r| r.timing.wall_seconds)
        .collect();
    let mean_trial = output::bench::mean(&walls);
    show!(
        "{}",
        output::bench::slots(&slots, &run.pool, (run.trials_finished, used), mean_trial)
    );
    show!("{}", run.steps.line(&run.pool));
    Ok(code)
}
