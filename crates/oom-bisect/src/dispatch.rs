//! Where trials run: `--devices`, `--jobs` and `--launcher` resolved into the pool's workers.
//!
//! - CUDA: one worker per GPU, each trial on its own card through `CUDA_VISIBLE_DEVICES` (the
//!   ceiling is per device, so two trials never share one). An inherited `CUDA_VISIBLE_DEVICES`
//!   (Slurm, Kubernetes) is respected: `--devices` picks among the devices it leaves visible.
//! - CPU: `--jobs` workers on this host (default 1).
//! - `--launcher 'srun -n1 --exact'`: every trial's command is prefixed with the launcher, which
//!   places it (a Slurm job step in the current allocation); `--jobs` steps at once, by default
//!   `$SLURM_NTASKS`, else 1.

use crate::cli::BisectArgs;
use crate::exit_codes::{self as code, user};
use anyhow::Result;
use oom_trial::{BackendKind, ProcessRunner, Worker};

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
}

impl Dispatch {
    pub fn resolve(args: &BisectArgs, backend: BackendKind) -> Result<Dispatch> {
        let jobs = args.jobs.map(usize::from);
        if let Some(l) = &args.launcher {
            if args.devices.is_some() {
                return Err(usage(
                    "--devices and --launcher do not go together: the launcher places each trial \
                     (for Slurm, ask for GPUs with --gpus-per-task=1 in the launcher)",
                ));
            }
            return launcher(l, jobs);
        }
        match backend {
            BackendKind::Cuda => gpus(args.devices.as_deref(), jobs),
            BackendKind::Cpu => {
                if args.devices.is_some() {
                    return Err(usage("--devices names CUDA devices; on the CPU use --jobs"));
                }
                Ok(Dispatch {
                    slots: (0..jobs.unwrap_or(1))
                        .map(|i| slot(format!("cpu:{i}"), vec![]))
                        .collect(),
                    launcher: vec![],
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
    pub fn workers(&self, base: &ProcessRunner) -> Vec<Worker> {
        self.slots
            .iter()
            .map(|s| {
                Box::new(ProcessRunner {
                    launcher: self.launcher.clone(),
                    env: s.env.clone(),
                    ..base.clone()
                }) as Worker
            })
            .collect()
    }
}

fn usage(msg: &str) -> anyhow::Error {
    user(code::USAGE, msg.to_string())
}

fn slot(label: String, env: Vec<(String, String)>) -> Slot {
    Slot { label, env }
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
    let tasks = std::env::var("SLURM_NTASKS")
        .ok()
        .and_then(|n| n.parse().ok());
    let n = jobs.or(tasks).unwrap_or(1).max(1);
    Ok(Dispatch {
        slots: (0..n)
            .map(|i| slot(format!("{}:{i}", words[0]), vec![]))
            .collect(),
        launcher: words,
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

fn gpus(devices: Option<&str>, jobs: Option<usize>) -> Result<Dispatch> {
    let visible = visible_gpus()?;
    let picked = pick(devices, &visible)?;
    let n = jobs.unwrap_or(picked.len());
    if n > picked.len() {
        return Err(usage(&format!(
            "--jobs {n} asks for more trials at once than GPUs ({}): each trial needs a card of \
             its own, because the ceiling is per device",
            picked.len()
        )));
    }
    let slots = picked[..n]
        .iter()
        .map(|(i, entry)| {
            slot(
                format!("cuda:{i}"),
                vec![("CUDA_VISIBLE_DEVICES".into(), entry.clone())],
            )
        })
        .collect();
    Ok(Dispatch {
        slots,
        launcher: vec![],
    })
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

    #[test]
    fn a_launcher_is_words_without_a_shell() {
        let d = launcher("srun -N1 -n1  --exact", Some(2)).unwrap();
        assert_eq!(d.launcher, ["srun", "-N1", "-n1", "--exact"]);
        assert_eq!(d.slots.len(), 2);
        assert!(launcher("srun --export='A B'", None).is_err());
        assert!(launcher("  ", None).is_err());
    }
}
