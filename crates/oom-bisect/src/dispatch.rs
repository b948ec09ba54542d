//! Where trials run: `--devices`, `--jobs` and `--launcher` resolved into the pool's workers.
//!
//! - CUDA: each trial on its card through `CUDA_VISIBLE_DEVICES`. Under ballast one worker per
//!   GPU, as the ballast takes the whole card; under a ceiling held inside the trial's process
//!   (`cap`, the built-in trials' default, or `command` for a `--exec` command that holds its own) as many
//!   workers per GPU as ceilings fit in its free memory (five 24 GiB ceilings on an H200), each
//!   trial its own process. An inherited `CUDA_VISIBLE_DEVICES` (Slurm, Kubernetes) is
//!   respected: `--devices` picks among the devices it leaves visible.
//! - CPU: `--jobs` workers on this host; by default, for the built-in model, as many as there are
//!   cores and as the memory now available holds trials under the ceiling (both cores of a 2-core
//!   machine for the quickstart), else one.
//! - `--launcher 'srun -n1 --exact'`: every trial's command is prefixed with the launcher, which
//!   places it (a Slurm job step in the current allocation); `--jobs` steps at once, by default
//!   `$SLURM_NTASKS`, else 1.

use crate::exit_codes::{self as code, user};
use anyhow::Result;
use oom_trial::{
    BackendKind, CeilingBy, Engine, ProcessRunner, Request, ServedRunner, Serves, Worker,
};

/// What places trials: the flags (`--devices`, `--jobs`, `--launcher`, `--guesses`, `--spares`)
/// and the device facts the settings resolved, gathered by the settings so that nothing here reads
/// an argument.
#[derive(Debug, Clone)]
pub struct Placement {
    pub devices: Option<String>,
    pub jobs: Option<usize>,
    pub launcher: Option<String>,
    /// `--guesses`: overrides [`Dispatch::guesses`].
    pub guesses: Option<bool>,
    /// `--spares`: overrides [`Dispatch::spares`].
    pub spares: Option<bool>,
    pub backend: BackendKind,
    pub ceiling_by: CeilingBy,
    /// The ceiling in bytes, where known before a trial.
    pub ceiling_bytes: Option<u64>,
    pub engine: Engine,
    /// Stream-only trials and no GPU to certify on: no GPU is placed at all.
    pub streams_only: bool,
}

/// One worker's place: its label and what its trials' processes get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// `cuda:1`, `cpu:0`, `srun:2`.
    pub label: String,
    pub env: Vec<(String, String)>,
}

/// The workers a diagnosis runs its trials on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    pub slots: Vec<Slot>,
    /// The launcher's words (empty: trials are children of this process).
    pub launcher: Vec<String>,
    /// Whether idle slots may start trials the search only may ask for (guesses; what it will
    /// ask for is started ahead regardless). Not where slots share one device, several per GPU
    /// under the cap or the CPU's cores: a guess there takes compute from the trials the search
    /// waits on (forum under the cap 207 s → 173 s, the CPU quickstart 54 s → 48 s:
    /// docs/performance.md); but yes for commands that hold their own ceiling (below).
    /// `--guesses on|off` overrides, for measuring.
    pub guesses: bool,
    /// Whether a served worker (`--exec --serve`) starts its command ahead: its holder before its
    /// first trial, and a spare that has run no trial for the next re-run, so that neither waits
    /// for the command's start (PyTorch's: 9-13 s on the H200). Only where an idle command takes
    /// nothing a trial measures: on CUDA where the command holds its own ceiling and each card
    /// has room for two idle commands a worker beside its ceilings (not under a ballast, which
    /// leaves a trial exactly its ceiling); not on the CPU, whose cores the trials run on, nor
    /// through a launcher, where each would hold a job step. `--spares on|off` overrides, for
    /// measuring.
    pub spares: bool,
}

/// The room an idle command is given on its card: its CUDA context and what its framework loads
/// at the start (burn's context: 518 MiB on the H200), with a margin.
const IDLE_COMMAND: u64 = 1 << 30;

impl Dispatch {
    pub fn resolve(p: &Placement) -> Result<Dispatch> {
        let mut d = Self::place(p)?;
        d.guesses = p.guesses.unwrap_or(d.guesses);
        d.spares = p.spares.unwrap_or(d.spares);
        Ok(d)
    }

    fn place(p: &Placement) -> Result<Dispatch> {
        if p.streams_only {
            return Ok(stream_slots());
        }
        let jobs = p.jobs;
        if let Some(l) = &p.launcher {
            if p.devices.is_some() {
                return Err(usage(
                    "--devices and --launcher do not go together: the launcher places each trial \
                     (for Slurm, ask for GPUs with --gpus-per-task=1 in the launcher)",
                ));
            }
            return launcher(l, jobs);
        }
        match p.backend {
            BackendKind::Cuda => {
                let may_keep_spares = p.ceiling_by == CeilingBy::Command && p.spares != Some(false);
                let mut d = gpus(p.devices.as_deref(), jobs, sharing(p), may_keep_spares)?;
                // A command that holds its own ceiling is, in practice, a framework's start-up
                // (the PyTorch reference: 10.4 s a trial five at once, 11.1 s alone): guesses
                // cost the trials waited on little (capacity 111 s → 61 s, docs/performance.md).
                d.guesses |= p.ceiling_by == CeilingBy::Command;
                Ok(d)
            }
            BackendKind::Cpu => {
                if p.devices.is_some() {
                    return Err(usage("--devices names CUDA devices; on the CPU use --jobs"));
                }
                Ok(Dispatch {
                    slots: (0..jobs.unwrap_or_else(|| cpu_jobs(p)))
                        .map(|i| slot(format!("cpu:{i}"), vec![]))
                        .collect(),
                    launcher: vec![],
                    // The slots share the host's cores.
                    guesses: false,
                    spares: false,
                })
            }
        }
    }

    /// One line for the user when trials run on more than one worker.
    pub fn describe(&self) -> Option<String> {
        (self.slots.len() > 1).then(|| {
            let labels: Vec<&str> = self.slots.iter().map(|s| s.label.as_str()).collect();
            format!("{} trials at once: {}", self.slots.len(), labels.join(", "))
        })
    }

    /// The pool's workers, each a process runner like `base` with this dispatch's place.
    /// One runner per slot; where the `--exec` command serves trials or may (`serve`), each keeps
    /// its command between trials; where this dispatch keeps spares, each starts its command
    /// ahead with `serve`'s request (the original's) instead of at its first trial.
    pub fn workers(&self, base: &ProcessRunner, serve: Option<&(Request, Serves)>) -> Vec<Worker> {
        self.slots
            .iter()
            .map(|s| {
                let runner = ProcessRunner {
                    launcher: self.launcher.clone(),
                    env: s.env.clone(),
                    ..base.clone()
                };
                match serve {
                    Some((r, serves)) => {
                        let ahead = self.spares.then(|| r.clone());
                        Box::new(ServedRunner::new(runner, ahead, *serves)) as Worker
                    }
                    None => Box::new(runner) as Worker,
                }
            })
            .collect()
    }
}

/// The workers of stream-only trials. They take no device memory and the GPU computes nothing for
/// them, so they run beside the GPU's own trials whatever `--jobs`: one per two cores (a trial
/// keeps about two busy, its own thread and burn's device threads handing work to each other; on
/// an H100's 16 cores eight at once took 3.0 s against 1.5 s alone), at least two.
///
/// They see the first GPU, if any, for one thing: the convolution workspaces cuDNN's heuristics
/// give on it (`oom_trial::cudnn`), asked by the first trial that meets a convolution and kept in
/// the kernel cache for the others.
pub fn stream_slots() -> Dispatch {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let gpu = visible_gpus()
        .ok()
        .and_then(|g| g.into_iter().next())
        .unwrap_or_default();
    Dispatch {
        slots: (0..(cores / 2).max(2))
            .map(|i| {
                slot(
                    format!("stream:{i}"),
                    vec![("CUDA_VISIBLE_DEVICES".into(), gpu.clone())],
                )
            })
            .collect(),
        launcher: vec![],
        guesses: false,
        spares: false,
    }
}

/// Memory a CPU trial's process takes beyond its ceiling (the binary, burn's runtime, threads).
const CPU_TRIAL_OVERHEAD: u64 = 512 << 20;

/// The default number of CPU trials at once: one per core, as many as the available memory holds
/// at the ceiling plus a process's overhead; one for the estimate (instant) and for `--exec` (a
/// command whose needs are its own).
fn cpu_jobs(p: &Placement) -> usize {
    if p.engine != Engine::Train {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let each = p.ceiling_bytes.unwrap_or(u64::MAX / 2) + CPU_TRIAL_OVERHEAD;
    let fit = (oom_trial::host_available() / each) as usize;
    cores.min(fit).max(1)
}

fn usage(msg: &str) -> anyhow::Error {
    user(code::USAGE, msg.to_string())
}

fn slot(label: String, env: Vec<(String, String)>) -> Slot {
    Slot { label, env }
}

/// The most trials at once a launcher starts by default: `--jobs`'s own bound.
const MAX_TASKS: usize = 256;

/// `$SLURM_NTASKS`, where set: the tasks of the allocation, a launcher's trials at once by default.
/// A value that is no count, or more than `--jobs` allows, is an error that says so: read as 1 or
/// as 100,000 workers it would quietly run one trial at a time, or start a banner per task.
fn slurm_tasks() -> Result<Option<usize>> {
    let Some(v) = std::env::var_os("SLURM_NTASKS").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let text = v.to_string_lossy();
    match text.trim().parse::<usize>() {
        Ok(n @ 1..=MAX_TASKS) => Ok(Some(n)),
        Ok(n) if n > MAX_TASKS => Err(usage(&format!(
            "SLURM_NTASKS is {n}, more trials at once than oom-bisect starts ({MAX_TASKS} at \
             most): give --jobs N"
        ))),
        _ => Err(usage(&format!(
            "SLURM_NTASKS is {text:?}, not a count of tasks (1 to {MAX_TASKS}): fix it, or give \
             --jobs N"
        ))),
    }
}

fn launcher(line: &str, jobs: Option<usize>) -> Result<Dispatch> {
    if line.contains(['"', '\'', '\\', '$', '`']) {
        return Err(usage(
            "--launcher is split on spaces and run without a shell: quotes, `$` and backslashes \
             are not supported (e.g. --launcher 'srun -N1 -n1 --gpus-per-task=1 --exact')",
        ));
    }
    let words: Vec<String> = line.split_whitespace().map(String::from).collect();
    if words.is_empty() {
        return Err(usage(
            "--launcher is empty (e.g. --launcher 'srun -n1 --exact')",
        ));
    }
    let n = match jobs {
        Some(j) => j.max(1),
        None => slurm_tasks()?.unwrap_or(1),
    };
    Ok(Dispatch {
        slots: (0..n)
            .map(|i| slot(format!("{}:{i}", words[0]), vec![]))
            .collect(),
        launcher: words,
        guesses: true,
        spares: false,
    })
}

/// The visible GPUs as `CUDA_VISIBLE_DEVICES` entries: the inherited list when there is one (its
/// entries may be UUIDs or MIG ids), else the indices the driver counts.
fn visible_gpus() -> Result<Vec<String>> {
    if let Ok(v) = std::env::var("CUDA_VISIBLE_DEVICES") {
        let list: Vec<String> = v
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if !list.is_empty() {
            return Ok(list);
        }
    }
    let n = oom_trial::cuda_device_count().map_err(|e| user(code::NO_DEVICE, e))?;
    Ok((0..n).map(|i| i.to_string()).collect())
}

/// The ceiling in bytes when trials may share a GPU (a ceiling of a known size held inside each
/// trial's process: the cap, or a command that holds its own).
fn sharing(p: &Placement) -> Option<u64> {
    p.ceiling_by
        .shares_gpu()
        .then_some(p.ceiling_bytes)
        .flatten()
}

/// Trials at once on a GPU with `free` bytes free: one, or under a cap as many ceilings as that holds.
fn per_gpu(free: u64, ceiling: Option<u64>) -> usize {
    let Some(ceiling) = ceiling.filter(|&c| c > 0) else {
        return 1;
    };
    ((free / ceiling) as usize).max(1)
}

/// `ceiling`: where trials share a card, the ceiling each is held to. `may_keep_spares`: whether
/// workers may keep idle commands beside their trials (see [`Dispatch::spares`]).
fn gpus(
    devices: Option<&str>,
    jobs: Option<usize>,
    ceiling: Option<u64>,
    may_keep_spares: bool,
) -> Result<Dispatch> {
    let visible = visible_gpus()?;
    let picked = pick(devices, &visible)?;
    let frees: Vec<u64> = picked
        .iter()
        .map(|(i, _)| oom_trial::cuda_free_bytes(*i).map_or(0, |(free, _)| free))
        .collect();
    let counts: Vec<usize> = frees.iter().map(|f| per_gpu(*f, ceiling)).collect();
    let mut slots = gpu_slots(&picked, &counts, jobs)?;
    let spares = may_keep_spares && ceiling.is_some_and(|c| room_for_idle(&frees, &counts, c));
    set_card_locks(&mut slots, &picked);
    Ok(Dispatch {
        guesses: slots.len() <= picked.len(),
        slots,
        launcher: vec![],
        spares,
    })
}

/// Whether every picked card holds, beside `counts` ceilings, two idle commands a worker (a
/// served worker's holder and spare before their first trials).
fn room_for_idle(frees: &[u64], counts: &[usize], ceiling: u64) -> bool {
    frees.iter().zip(counts).all(|(&free, &n)| {
        let idle = 2 * n as u64 * IDLE_COMMAND;
        free >= n as u64 * ceiling + idle
    })
}

/// The lock files of the cards workers share ([`set_card_locks`]), removed when this is dropped:
/// made to outlive the pool whose trials take turns through them.
#[derive(Debug)]
pub struct CardLocks(Vec<std::path::PathBuf>);

impl CardLocks {
    /// Each shared card's lock file and its gate (`oom_trial::protocol`), once.
    pub fn of(d: &Dispatch) -> CardLocks {
        let mut files = vec![];
        let locks = d.slots.iter().flat_map(|s| &s.env);
        for (_, v) in locks.filter(|(k, _)| k == oom_trial::CARD_LOCK_ENV) {
            let lock = std::path::PathBuf::from(v);
            if !files.contains(&lock) {
                files.push(lock.with_extension("gate"));
                files.push(lock);
            }
        }
        CardLocks(files)
    }
}

impl Drop for CardLocks {
    fn drop(&mut self) {
        for f in &self.0 {
            // A card no trial took a turn on has no file.
            let _ = std::fs::remove_file(f);
        }
    }
}

/// On a card that several workers share, the lock file through which their trials take turns
/// ([`oom_trial::CARD_LOCK_ENV`]): one per card and per diagnosis, in the temporary directory.
fn set_card_locks(slots: &mut [Slot], picked: &[(usize, String)]) {
    for (i, entry) in picked {
        let on_card = |s: &Slot| {
            s.env
                .iter()
                .any(|(k, v)| k == "CUDA_VISIBLE_DEVICES" && v == entry)
        };
        if slots.iter().filter(|s| on_card(s)).count() < 2 {
            continue;
        }
        let name = format!("oom-bisect-{}-gpu{i}.lock", std::process::id());
        let path = std::env::temp_dir().join(name);
        for s in slots.iter_mut().filter(|s| on_card(s)) {
            s.env
                .push((oom_trial::CARD_LOCK_ENV.into(), path.display().to_string()));
        }
    }
}

/// The workers on the picked GPUs, `counts[g]` on GPU `g`, spread round-robin so that the first
/// `jobs` use every GPU before any GPU's second slot.
fn gpu_slots(
    picked: &[(usize, String)],
    counts: &[usize],
    jobs: Option<usize>,
) -> Result<Vec<Slot>> {
    let room: usize = counts.iter().sum();
    let n = jobs.unwrap_or(room);
    if n > room {
        return Err(usage(&format!(
            "--jobs {n} asks for more trials at once than the GPUs hold ({room}): under \
             --ceiling-by ballast each trial needs a card of its own; under a cap, as many as \
             ceilings fit in a card's free memory"
        )));
    }
    let rounds = counts.iter().copied().max().unwrap_or(0);
    let shared = rounds > 1;
    let mut slots = vec![];
    for k in 0..rounds {
        for ((i, entry), &count) in picked.iter().zip(counts) {
            if k < count && slots.len() < n {
                let label = if shared {
                    format!("cuda:{i}.{k}")
                } else {
                    format!("cuda:{i}")
                };
                slots.push(slot(
                    label,
                    vec![("CUDA_VISIBLE_DEVICES".into(), entry.clone())],
                ));
            }
        }
    }
    Ok(slots)
}

/// `--devices all` or a list of indices into the visible devices (as CUDA numbers them).
fn pick(devices: Option<&str>, visible: &[String]) -> Result<Vec<(usize, String)>> {
    let all = || visible.iter().cloned().enumerate().collect();
    let Some(list) = devices.map(str::trim).filter(|d| *d != "all") else {
        return Ok(all());
    };
    let mut out: Vec<(usize, String)> = vec![];
    for word in list.split(',').map(str::trim) {
        let i: usize = word.parse().map_err(|_| {
            usage(&format!(
                "--devices {list:?}: {word:?} is not a device index (allowed: `all`, or indices \
                 0..{} of the visible devices, comma-separated)",
                visible.len()
            ))
        })?;
        let Some(entry) = visible.get(i) else {
            return Err(user(
                code::NO_DEVICE,
                format!(
                    "--devices {list}: there is no device {i}; {} visible ({})",
                    visible.len(),
                    visible.join(", ")
                ),
            ));
        };
        if out.iter().any(|(j, _)| *j == i) {
            return Err(usage(&format!(
                "--devices {list}: device {i} is named twice"
            )));
        }
        out.push((i, entry.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visible() -> Vec<String> {
        vec!["GPU-aaa".into(), "GPU-bbb".into(), "GPU-ccc".into()]
    }

    /// `--devices` indexes the inherited list, so a Slurm-assigned set is subdivided, not replaced.
    #[test]
    fn devices_pick_from_the_inherited_list() {
        let p = pick(Some("2,0"), &visible()).unwrap();
        assert_eq!(p, vec![(2, "GPU-ccc".into()), (0, "GPU-aaa".into())]);
        assert_eq!(pick(Some("all"), &visible()).unwrap().len(), 3);
        assert_eq!(pick(None, &visible()).unwrap().len(), 3);
        for bad in ["3", "x", "1,1", ""] {
            assert!(pick(Some(bad), &visible()).is_err(), "{bad}");
        }
    }

    /// Under a cap, a GPU takes as many workers as ceilings fit; `--jobs` takes every GPU's first
    /// slot before any second one, and cannot ask for more than there is room for.
    #[test]
    fn shared_gpus_fill_round_robin() {
        let picked = vec![(0, "GPU-aaa".into()), (1, "GPU-bbb".into())];
        let labels = |counts: &[usize], jobs| -> Vec<String> {
            let slots = gpu_slots(&picked, counts, jobs).unwrap();
            slots.into_iter().map(|s| s.label).collect()
        };
        assert_eq!(labels(&[1, 1], None), ["cuda:0", "cuda:1"]);
        assert_eq!(
            labels(&[2, 3], None),
            ["cuda:0.0", "cuda:1.0", "cuda:0.1", "cuda:1.1", "cuda:1.2"]
        );
        assert_eq!(
            labels(&[5, 5], Some(3)),
            ["cuda:0.0", "cuda:1.0", "cuda:0.1"]
        );
        assert!(gpu_slots(&picked, &[1, 1], Some(3)).is_err());
    }

    /// Workers that share a card take turns through one lock file; a worker alone on its card
    /// has none (its trials have the card). The diagnosis removes the files at its end.
    #[test]
    fn workers_on_a_shared_card_share_its_lock() {
        let picked = vec![(0, "GPU-aaa".into()), (1, "GPU-bbb".into())];
        let mut slots = gpu_slots(&picked, &[3, 1], None).unwrap();
        set_card_locks(&mut slots, &picked);
        let lock = |s: &Slot| {
            s.env
                .iter()
                .find(|(k, _)| k == oom_trial::CARD_LOCK_ENV)
                .map(|(_, v)| v.clone())
        };
        let locks: Vec<Option<String>> = slots.iter().map(lock).collect();
        assert_eq!(locks[0], locks[2]);
        assert_eq!(locks[0], locks[3]);
        assert!(locks[0].as_ref().is_some_and(|p| p.ends_with("gpu0.lock")));
        assert_eq!(locks[1], None);
        // Once the diagnosis ends, the lock and its gate leave the temporary directory.
        let d = Dispatch {
            slots,
            launcher: vec![],
            guesses: false,
            spares: false,
        };
        let files = CardLocks::of(&d);
        assert_eq!(files.0.len(), 2, "{files:?}");
        for f in &files.0 {
            std::fs::write(f, "").unwrap();
        }
        let kept = files.0.clone();
        drop(files);
        assert!(kept.iter().all(|f| !f.exists()), "{kept:?}");
    }

    #[test]
    fn a_launcher_is_words_without_a_shell() {
        let d = launcher("srun -N1 -n1  --exact", Some(2)).unwrap();
        assert_eq!(d.launcher, ["srun", "-N1", "-n1", "--exact"]);
        assert_eq!(d.slots.len(), 2);
        assert!(launcher("srun --export='A B'", None).is_err());
        assert!(launcher("  ", None).is_err());
    }
}
