//! The subcommands, one file each: each resolves its settings, does its one job, and returns the
//! exit code. Text comes from `output`; trials from a runner chosen in `shared.rs`.

pub mod bench;
pub mod bisect;
pub mod inspect;
mod report;
mod shared;
pub mod trial;

/// `bisect`: the diagnosis (`bisect.rs`), then its report (`report.rs`).
pub fn bisect(args: &crate::cli::BisectArgs) -> anyhow::Result<i32> {
    let run = bisect::run_bisect(args)?;
    report::report_run(&run)
}
