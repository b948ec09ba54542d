//! One trial: a resolved config on a device, N real training steps under a memory ceiling, measured
//! and classified; and the seam through which the search asks for one ([`TrialRunner`]). Both sides
//! of the parent/child protocol live here: the child (`oom-bisect __trial`, [`child`]) and the parent
//! ([`ProcessRunner`]) that spawns it, watches it and classifies what it left behind ([`outcome`]).

pub mod alloc;
pub mod cache;
pub mod card;
pub mod card_probe;
pub mod child;
pub mod classify;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod cudnn;
pub mod emit;
pub mod estimated;
pub mod exec;
pub mod faults;
pub mod lines;
#[cfg(feature = "cuda")]
pub mod nvml;
pub mod outcome;
pub mod pool;
pub mod protocol;
pub mod replayed;
pub mod runner;
pub mod served;
pub mod switches;
pub mod sync;
pub mod trial_report;
pub mod turns;

pub use outcome::assemble;
pub use pool::{Finished, Pool, Worker};
pub use protocol::{
    BackendKind, Ceiling, CeilingBy, ChildEvent, Engine, Fault, Request, SUBCOMMAND,
};
pub use runner::{
    install_interrupt_handler, kill_running_trials, parse_events, ProcessRunner, TrialRunner,
    MAX_RUNNING,
};
pub use served::{ServedRunner, Serves};
pub use switches::Switches;
pub use trial_report::{
    ChildExit, Evidence, OomInfo, StageMemory, StepRecord, TrialOutcome, TrialReport, LEAK_BYTES,
};
pub use turns::CARD_LOCK_ENV;

mod device;
mod shell;
mod units;

pub use device::{
    cuda_device, cuda_device_count, cuda_free_bytes, cuda_total_bytes, host_available, host_total,
};
pub use shell::shell_word;
pub use units::{exact_size, fmt_bytes, parse_size};
