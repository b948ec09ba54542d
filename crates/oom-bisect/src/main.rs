//! oom-bisect: parse, resolve, dispatch, and map the result to an exit code. Nothing else.

mod cache;
mod cli;
mod commands;
mod estimate;
mod exit_codes;
mod gpus;
mod journal;
mod progress;
mod report;
mod runner;
mod settings;
mod space;

use clap::Parser;
use cli::{Cli, Command};
use exit_codes::UserError;

/// Every allocation is counted: on the CPU backend this is the memory ceiling (see `oom_trial::alloc`).
#[global_allocator]
static ALLOC: oom_trial::alloc::CountingAlloc = oom_trial::alloc::CountingAlloc;

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::ChildTrial => {
            let mut request = String::new();
            let code = match std::io::Read::read_to_string(&mut std::io::stdin(), &mut request) {
                Ok(_) => oom_trial::child::main(&request),
                Err(e) => {
                    eprintln!("oom-bisect __trial: cannot read the request: {e}");
                    oom_trial::report::exit::INCONCLUSIVE
                }
            };
            std::process::exit(code);
        }
        Command::Bisect(a) | Command::Bench(cli::BenchArgs { bisect: a })
            if a.device.gpu.as_deref() == Some("help") =>
        {
            print!("{}", gpus::table());
            Ok(exit_codes::SUCCESS)
        }
        Command::Trial(a) if a.device.gpu.as_deref() == Some("help") => {
            print!("{}", gpus::table());
            Ok(exit_codes::SUCCESS)
        }
        Command::Bisect(a) => {
            runner::install_interrupt_handler();
            commands::bisect(a)
        }
        Command::Trial(a) => {
            runner::install_interrupt_handler();
            commands::trial(a)
        }
        Command::Inspect(a) => commands::inspect(a),
        Command::Bench(a) => {
            runner::install_interrupt_handler();
            commands::bench(a)
        }
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => match e.downcast_ref::<UserError>() {
            Some(u) => {
                eprintln!("error: {}", u.message);
                u.code
            }
            None => {
                eprintln!("error: {e:#}");
                exit_codes::INTERNAL
            }
        },
    };
    std::process::exit(code);
}
