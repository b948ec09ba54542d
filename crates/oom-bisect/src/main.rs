//! oom-bisect: parse, resolve, dispatch, and map the result to an exit code. Nothing else.

mod cli;
mod commands;
mod dispatch;
mod exit_codes;
mod experiment;
mod files;
mod gpus;
mod journal;
mod oracle;
mod output;
mod settings;
mod space;

use clap::Parser;
use cli::{Cli, Command};
use exit_codes::UserError;

/// Every allocation is counted: on the CPU backend this is the memory ceiling (see `oom_trial::alloc`).
#[global_allocator]
static ALLOC: oom_trial::alloc::CountingAlloc = oom_trial::alloc::CountingAlloc;

fn main() {
    if asks_for_gpu_help() {
        print!("{}", gpus::table());
        std::process::exit(exit_codes::SUCCESS);
    }
    let cli = Cli::parse();
    if let Command::ChildTrial = cli.command {
        std::process::exit(child_trial());
    }
    oom_trial::install_interrupt_handler();
    let result = match &cli.command {
        Command::Bisect(a) => commands::bisect(a),
        Command::Trial(a) => commands::trial(a),
        Command::Inspect(a) => commands::inspect(a),
        Command::Bench(a) => commands::bench(a),
        Command::ChildTrial => unreachable!("handled above"),
    };
    std::process::exit(exit_code(result));
}

/// `--gpu help` lists the cards whatever else the command line lacks (it needs no config), so it
/// is answered before the command line is parsed.
fn asks_for_gpu_help() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = args.windows(2).any(|w| w[0] == "--gpu" && w[1] == "help");
    split || args.iter().any(|a| a == "--gpu=help")
}

/// The child side of a trial: the request on stdin, the trial, its exit code.
fn child_trial() -> i32 {
    let mut request = String::new();
    match std::io::Read::read_to_string(&mut std::io::stdin(), &mut request) {
        Ok(_) => oom_trial::child::main(&request),
        Err(e) => {
            eprintln!("oom-bisect __trial: cannot read the request: {e}");
            oom_trial::protocol::exit::INCONCLUSIVE
        }
    }
}

fn exit_code(result: anyhow::Result<i32>) -> i32 {
    match result {
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
    }
}
