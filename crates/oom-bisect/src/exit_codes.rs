//! Every exit code of `oom-bisect`, in one place. `trial` speaks `git bisect run`'s language, so
//! it can drive it directly: 0 good (fits), 3 bad (out of memory), 125 skip (this commit cannot
//! be measured: its config is unreadable or invalid, or the trial was inconclusive), and 128 or
//! more where nothing can be measured at all (no device, a bad command line or ceiling, an
//! unwritable output, an internal error), which makes git stop instead of blaming a commit.

use oom_trial::protocol::exit as child;
use std::fmt;

/// `trial`: the configuration fits (the child's own code).
pub const SUCCESS: i32 = child::FITS;
/// An unexpected internal error (a bug).
pub const INTERNAL: i32 = 1;
/// The command line could not be parsed (clap's own code).
pub const USAGE: i32 = 2;
/// `trial`: the configuration ran out of memory (the child's own code).
pub const OOM: i32 = child::OOM;
/// The config file could not be read.
pub const CONFIG_UNREADABLE: i32 = 10;
/// The config has an unknown key or a value out of range.
pub const CONFIG_INVALID: i32 = 11;
/// No CUDA driver or device, or this binary lacks CUDA support.
pub const NO_DEVICE: i32 = 12;
/// The memory ceiling is invalid or larger than the device.
pub const BAD_CEILING: i32 = 13;
/// An output path (report, JSON, journal, minimal config) cannot be written.
pub const UNWRITABLE: i32 = 14;
/// `bisect`: the original configuration could not be measured (error or timeout), so there is
/// nothing to bisect.
pub const INCONCLUSIVE_ORIGINAL: i32 = 15;
/// `trial`: the trial failed for a reason other than memory, or timed out (the child's own code).
pub const INCONCLUSIVE: i32 = child::INCONCLUSIVE;
/// Interrupted (Ctrl-C); what was measured is in the journal. Exited with by the signal handler
/// in `oom_trial::runner`.
pub const INTERRUPTED: i32 = oom_trial::runner::INTERRUPTED;

/// `trial`'s code for an error of another command's code `code` (see the module documentation).
pub fn git_bisect_code(code: i32) -> i32 {
    match code {
        SUCCESS | OOM | INCONCLUSIVE | INTERRUPTED => code,
        CONFIG_UNREADABLE | CONFIG_INVALID => INCONCLUSIVE,
        _ => TRIAL_STOP + code,
    }
}

/// `trial`: 200 + the code above, where nothing can be measured at any commit.
pub const TRIAL_STOP: i32 = 200;

/// A `trial` error with its exit code turned into `git bisect run`'s (see [`git_bisect_code`]).
pub fn for_git_bisect(e: anyhow::Error) -> anyhow::Error {
    let (code, message) = match e.downcast_ref::<UserError>() {
        Some(u) => (u.code, u.message.clone()),
        None => (INTERNAL, format!("{e:#}")),
    };
    user(git_bisect_code(code), message)
}

/// Every code with its meaning: the one table `--help` prints.
const TABLE: &[(i32, &str)] = &[
    (SUCCESS, "success (`trial`: the configuration fits)"),
    (INTERNAL, "internal error"),
    (USAGE, "bad command line"),
    (OOM, "`trial`: out of memory"),
    (CONFIG_UNREADABLE, "config file cannot be read"),
    (
        CONFIG_INVALID,
        "config invalid (unknown key, value out of range)",
    ),
    (NO_DEVICE, "no CUDA driver or device (try --backend cpu)"),
    (
        BAD_CEILING,
        "memory ceiling invalid or larger than the device",
    ),
    (
        UNWRITABLE,
        "an output path cannot be written, or names an input or another output",
    ),
    (
        INCONCLUSIVE_ORIGINAL,
        "`bisect`: the original configuration could not be measured",
    ),
    (
        INCONCLUSIVE,
        "`trial`: inconclusive (error or timeout), as `git bisect skip`",
    ),
    (
        INTERRUPTED,
        "interrupted; finished trials are kept in the journal",
    ),
];

/// The table printed in `--help`.
pub fn help() -> String {
    let mut s = String::from("Exit codes:\n");
    for (code, meaning) in TABLE {
        s += &format!("  {code:>3}    {meaning}\n");
    }
    s + "\n`trial` drives `git bisect run`: 0 fits (good), 3 out of memory (bad), 125 this commit \
         cannot be measured (config unreadable or invalid, trial inconclusive: skip), and 200 + the \
         code above where nothing can be measured at all (201 internal, 202 command line, 212 no \
         device, 213 ceiling, 214 output), which makes git stop."
}

/// An error a user can act on, with its exit code.
#[derive(Debug)]
pub struct UserError {
    pub code: i32,
    pub message: String,
}

impl UserError {
    /// The message is made safe to print (control characters escaped, cut when huge): it may echo
    /// what a user typed.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        UserError {
            code,
            message: deeplab::config::cut(&message.into(), 4000),
        }
    }
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UserError {}

/// Shorthand: `Err(user(CODE, "..."))?`.
pub fn user(code: i32, message: impl Into<String>) -> anyhow::Error {
    UserError::new(code, message).into()
}
