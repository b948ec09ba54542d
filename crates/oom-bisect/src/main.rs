//! oom-bisect: parse, resolve, dispatch, and map the result to an exit code. Nothing else.

/// Prints to stdout, made safe for a terminal (`output::printable`: the one place that does).
/// A closed stdout (`| head`, a pager that quit) costs what was printed, never the run: the files
/// are still written and the exit code is the run's.
macro_rules! show {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let text = crate::output::printable(&format!($($t)*), usize::MAX);
        let _ = std::io::stdout().write_all(text.as_bytes());
    }};
}

/// `show!` with a newline.
macro_rules! showln {
    ($($t:tt)*) => {{
        show!($($t)*);
        show!("\n");
    }};
}

/// A line to stderr (progress, warnings, errors), made safe for a terminal as `show!` is; dropped
/// silently when stderr is closed.
macro_rules! tell {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let text = crate::output::printable(&format!($($t)*), usize::MAX);
        let _ = writeln!(std::io::stderr(), "{text}");
    }};
}

mod candidate;
mod certify;
mod cli;
mod commands;
mod dispatch;
mod exit_codes;
mod experiment;
mod files;
mod gpus;
mod journal;
mod kinds;
mod oracle;
mod output;
mod settings;
mod space;
mod toml_value;

use clap::Parser as _;
use cli::{Cli, Command};
use exit_codes::UserError;

/// Every allocation is counted: on the CPU backend this is the memory ceiling (see `oom_trial::alloc`).
#[global_allocator]
static ALLOC: oom_trial::alloc::CountingAlloc = oom_trial::alloc::CountingAlloc;

fn main() {
    // A file-size limit (`ulimit -f`) makes a write fail with EFBIG, reported with the file's
    // name, instead of killing the run before its report.
    // SAFETY: sets the disposition of one signal to "ignore"; no handler runs.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    if asks_for_gpu_help() {
        show!("{}", gpus::table());
        std::process::exit(exit_codes::SUCCESS);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    if let Command::ChildTrial = cli.command {
        std::process::exit(child_trial());
    }
    oom_trial::install_interrupt_handler();
    let result = match &cli.command {
        Command::Bisect(a) => commands::bisect(a),
        Command::Trial(a) => commands::trial::trial(a).map_err(exit_codes::for_git_bisect),
        Command::Inspect(a) => commands::inspect::inspect(a),
        Command::Bench(a) => commands::bench::bench(a),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "oom-bisect", &mut out);
            let script = String::from_utf8_lossy(&out);
            match shell {
                clap_complete::Shell::Bash => show!("{}", fix_bash_completion(&script)),
                _ => show!("{script}"),
            }
            Ok(exit_codes::SUCCESS)
        }
        Command::ChildTrial => unreachable!("handled above"),
    };
    std::process::exit(exit_code(result));
}

/// clap_complete's bash script for a name with a hyphen names a subcommand's case
/// `oom__subcmd__bisect__subcmd__trial` where its loop sets `oom__bisect__subcmd__trial`, so no
/// subcommand's options were ever completed; and it offers the internal `__trial`.
fn fix_bash_completion(script: &str) -> String {
    script
        .replace("oom__subcmd__bisect__subcmd__", "oom__bisect__subcmd__")
        .replace(&format!(" {} ", oom_trial::SUBCOMMAND), " ")
}

/// The arguments as given; a name that is not UTF-8 is read lossily here (clap reads the real
/// bytes into paths).
fn args() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// A command line clap refuses: its message and exit 2, or, where it names `trial` anywhere (a flag
/// put before it) or a word a typo away from it (`trail`), the code that makes `git bisect run`
/// stop: a bad command line is bad at every commit, and exit 2 would blame one.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let trial = args()
        .iter()
        .skip(1)
        .any(|a| a == "trial" || typo_of_trial(a));
    if trial && !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        std::process::exit(exit_codes::git_bisect_code(exit_codes::USAGE));
    }
    e.exit()
}

/// A word of 4 to 6 letters at most two edits from `trial` (`trail`, `tiral`, `trials`).
fn typo_of_trial(word: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (word.chars().collect(), "trial".chars().collect());
    if !(4..=6).contains(&a.len()) || !a.iter().all(char::is_ascii_alphabetic) {
        return false;
    }
    // Levenshtein distance, one row at a time.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = (prev + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            (prev, row[j + 1]) = (row[j + 1], here);
        }
    }
    row[b.len()] <= 2
}

/// `--gpu help` lists the cards whatever else the command line lacks (it needs no config), so it
/// is answered before the command line is parsed.
fn asks_for_gpu_help() -> bool {
    let args = args();
    let split = args.windows(2).any(|w| w[0] == "--gpu" && w[1] == "help");
    split || args.iter().any(|a| a == "--gpu=help")
}

/// The child side of a trial: the request, one line on stdin, the trial, its exit code. A served
/// `--exec` holder reads its later requests from the same stdin.
fn child_trial() -> i32 {
    let mut request = String::new();
    match std::io::stdin().read_line(&mut request) {
        Ok(_) => oom_trial::child::main(&request),
        Err(e) => {
            tell!("oom-bisect __trial: cannot read the request: {e}");
            oom_trial::protocol::exit::INCONCLUSIVE
        }
    }
}

fn exit_code(result: anyhow::Result<i32>) -> i32 {
    match result {
        Ok(code) => code,
        Err(e) => match e.downcast_ref::<UserError>() {
            Some(u) => {
                tell!("error: {}", u.message);
                u.code
            }
            None => {
                tell!("error: {}", deeplab::config::cut(&format!("{e:#}"), 4000));
                exit_codes::INTERNAL
            }
        },
    }
}
