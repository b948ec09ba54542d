//! What every subcommand that runs trials shares: the runner of trial processes and the notes the
//! settings left for the user.

use crate::settings::DeviceSettings;
use oom_trial::{BackendKind, ProcessRunner};

/// The runner every command uses: a child process per trial (training, or the estimate with
/// `--fake-trials`).
pub fn runner(device: &DeviceSettings) -> ProcessRunner {
    // Only burn's CUDA trials compile kernels: a CPU run or a user's command neither checks nor
    // creates the cache. A user's command keeps its Python bytecode in the cache's folder.
    let burn_cuda =
        device.backend == BackendKind::Cuda && device.engine == oom_trial::Engine::Train;
    let dir = oom_trial::cache::dir().filter(|_| burn_cuda);
    let (kernel_cache, warning) = oom_trial::cache::usable(dir);
    if let Some(w) = warning {
        tell!("oom-bisect: warning: {w}");
    }
    let exec = matches!(device.engine, oom_trial::Engine::Exec { .. });
    ProcessRunner {
        timeout: device.trial_timeout,
        kernel_cache,
        python_bytecode: oom_trial::cache::python_bytecode_dir().filter(|_| exec),
        ceiling_by: device.ceiling_by,
        ..ProcessRunner::default()
    }
}

pub fn say(notes: &[String], quiet: bool) {
    if !quiet {
        for n in notes {
            tell!("oom-bisect: {n}");
        }
    }
}
