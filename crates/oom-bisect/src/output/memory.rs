//! How much a configuration needs and what that memory is: the "needs X, has Y" line, the
//! breakdown of a trial's peak into weights, gradients, optimizer state, batch, activations,
//! allocator slack and context, and the memory an out-of-memory trial held when it failed.

use deeplab::{Architecture, Config, Phase};
use oom_trial::{fmt_bytes, BackendKind, TrialOutcome, TrialReport};
use serde::Serialize;

/// One part of a peak.
/// The part of the breakdown that is the optimizer's state (the diagnosis names it).
pub const OPTIMIZER_STATE: &str = "optimizer state";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    pub part: &'static str,
    pub bytes: u64,
    /// How the figure was obtained, in words.
    pub how: String,
    /// Fixed by the model and optimizer: no change of batch or input size reduces it.
    pub fixed: bool,
}

/// The bytes [`breakdown`] splits: the need where the run was replayed through the caching
/// allocator, else the peak.
pub fn whole(r: &TrialReport) -> Option<u64> {
    r.need_bytes().or(r.memory.peak_bytes)
}

/// The need (or peak) of `r` (a built-in trial of `config` that ran to the end) split into its
/// parts. The weights, optimizer state and batch are exact sizes; the gradients are those the
/// model's estimate has alive at its peak (all of them when the peak is the optimizer step), at
/// most what the measurement leaves; activations are the allocated peak (or the in-use peak) less
/// those; what the caching allocator held beyond it is in segments that earlier requests split.
/// `None` when the trial has nothing to split.
/// What was in use at the peak, of `held` (the peak less the context): the replay's allocated
/// bytes, else on CUDA the highest in-use reading; on the CPU, all of it.
fn in_use_at_peak(r: &TrialReport, held: u64, cuda: bool) -> u64 {
    match (&r.memory.allocator, cuda) {
        (Some(a), _) => a.allocated_bytes.min(held),
        (None, true) => r.memory.peak_in_use_bytes.unwrap_or(held).min(held),
        (None, false) => held,
    }
}

pub fn breakdown(r: &TrialReport, config: &Config) -> Option<Vec<Part>> {
    let peak = whole(r)?;
    let arch = Architecture::new(config).ok()?;
    let params = arch.params();
    let res = arch.resident(config, params);
    // On the CPU what the process held before the model is a few KiB of its heap: not a part.
    let cuda = r.backend() == Some(BackendKind::Cuda);
    let context = match cuda {
        true => r.context_bytes().unwrap_or(0).min(peak),
        false => 0,
    };
    let in_use = in_use_at_peak(r, peak - context, cuda);
    let state = match config.train.phase {
        Phase::Step => res.optimizer_state,
        _ => 0,
    };
    let e = res.weights / params.max(1);
    let gradients = arch
        .memory_estimate(config)
        .peak
        .gradients
        .min(in_use.saturating_sub(res.weights + state + res.batch));
    let mut parts = vec![
        Part {
            part: "weights",
            bytes: res.weights,
            how: format!("{} parameters × {e} bytes", super::count(params)),
            fixed: true,
        },
        gradients_part(gradients, res.weights),
        Part {
            part: OPTIMIZER_STATE,
            bytes: state,
            how: match state {
                0 if res.optimizer_state == 0 => format!("none: {}", res.optimizer_state_is),
                0 => "none: the run stops before the optimizer step".into(),
                _ => format!("{}, from the first update on", res.optimizer_state_is),
            },
            fixed: true,
        },
        Part {
            part: "batch",
            bytes: res.batch,
            how: "images and labels".into(),
            fixed: false,
        },
        Part {
            part: "activations",
            bytes: in_use.saturating_sub(res.weights + gradients + state + res.batch),
            how: "saved for backward, temporaries (the rest of the peak)".into(),
            fixed: false,
        },
    ];
    if r.memory.allocator.is_some() || cuda {
        parts.push(Part {
            part: "held, not in use",
            bytes: peak - context - in_use,
            how: match r.memory.allocator {
                Some(_) => "free blocks of segments that earlier requests split, which the \
                            allocator cannot give back"
                    .into(),
                None => "held by the memory pools but not in use at the highest reading".into(),
            },
            fixed: false,
        });
    }
    if cuda {
        parts.push(Part {
            part: "CUDA context",
            bytes: context,
            how: "the driver's, before any tensor".into(),
            fixed: true,
        });
    }
    Some(parts)
}

/// The gradients alive at the peak, `weights` bytes when every parameter has one.
fn gradients_part(bytes: u64, weights: u64) -> Part {
    Part {
        part: "gradients",
        bytes,
        how: match bytes {
            0 => "none alive at the peak".into(),
            g if g >= weights => {
                "one per parameter, all alive at the peak (the optimizer step)".into()
            }
            _ => "of the layers backward has reached at the peak (the estimate's share)".into(),
        },
        fixed: true,
    }
}

/// The breakdown as the report prints it, every part as a share of `peak`.
pub fn breakdown_text(parts: &[Part], peak: u64) -> String {
    let mut s = String::new();
    for p in parts {
        let share = 100.0 * p.bytes as f64 / peak.max(1) as f64;
        s += &format!(
            "  {:<16} {:>10} {share:>4.0}%  {}\n",
            p.part,
            fmt_bytes(p.bytes),
            p.how
        );
    }
    s
}

/// "needs 250.0 MiB (212.9 MiB allocated + 37.1 MiB held in split segments, 1 retry), has 245.0
/// MiB (+2.0%)" from a run replayed through the caching allocator; "needs 183.2 MiB, has …" from
/// the peak of a run without the ceiling; or why the need is not known.
pub fn need_text(need: &TrialReport, ceiling: u64) -> String {
    if let Some(a) = &need.memory.allocator {
        let context = match need.backend() {
            Some(BackendKind::Cuda) => need.context_bytes().unwrap_or(0),
            _ => 0,
        };
        let held = a.need_bytes.saturating_sub(context + a.allocated_bytes);
        return format!(
            "needs {} ({} allocated + {} held in split segments{}, {} at that ceiling{}), has {} ({:+.1}%)",
            fmt_bytes(a.need_bytes),
            fmt_bytes(a.allocated_bytes),
            fmt_bytes(held),
            match context {
                0 => String::new(),
                c => format!(" + {} CUDA context", fmt_bytes(c)),
            },
            // At the need; under a lower ceiling the allocator may release its cache and retry
            // before it fails (the out-of-memory's own line says how often).
            retries(a.retries),
            match a.workspaces {
                0 => String::new(),
                n => format!("; {n} cuDNN convolution workspaces asked"),
            },
            fmt_bytes(ceiling),
            100.0 * (a.need_bytes as f64 / ceiling.max(1) as f64 - 1.0)
        );
    }
    let resident = need.memory.peak_source.as_deref() == Some(oom_trial::exec::RESIDENT_SOURCE);
    match (need.outcome(), need.memory.peak_bytes) {
        // What the processes held is not what the command needs: nothing held it to a ceiling.
        (TrialOutcome::Fits, Some(p)) if resident => format!(
            "held at most {} resident in its processes, has {}; on the CPU nothing holds a \
             command to its ceiling, so that is not its need (a {{\"oom_bisect\": {{\"peak_bytes\": …}}}} \
             line of its own, or PyTorch's allocator trace, says what it needs)",
            fmt_bytes(p),
            fmt_bytes(ceiling)
        ),
        (TrialOutcome::Fits, Some(p)) => format!(
            "needs {}, has {} ({:+.1}%)",
            fmt_bytes(p),
            fmt_bytes(ceiling),
            100.0 * (p as f64 / ceiling.max(1) as f64 - 1.0)
        ),
        (TrialOutcome::Oom, _) => match need.ceiling_bytes() {
            // The most this machine could give is below the ceiling: no figure of its need.
            Some(most) if most < ceiling => format!(
                "has {}; how much it needs is not known: it ran out of memory under {}, the most \
                 this machine could give it (measure it on a machine with more memory)",
                fmt_bytes(ceiling),
                fmt_bytes(most)
            ),
            most => format!(
                "needs more than the {} this machine could give it without a ceiling, has {}",
                most.map(fmt_bytes).unwrap_or_else(|| "memory".into()),
                fmt_bytes(ceiling)
            ),
        },
        _ => format!(
            "has {}; how much it needs could not be measured ({})",
            fmt_bytes(ceiling),
            need.error().unwrap_or("no peak")
        ),
    }
}

/// "no retry", "1 retry", "3 retries": how often the allocator released its cache to retry.
pub fn retries(n: u64) -> String {
    match n {
        0 => "no retry".into(),
        1 => "1 retry".into(),
        n => format!("{n} retries"),
    }
}

/// "171.0 MiB in use + 9.0 MiB" ("≥171.0 MiB in use" where only a reading before the failure is
/// known), for the lines of trials that ran out of memory.
pub fn oom_text(r: &TrialReport) -> String {
    let Some((in_use, exact)) = r.in_use_at_oom() else {
        return "OOM".into();
    };
    let asked = r
        .oom()
        .as_ref()
        .and_then(|o| o.bytes)
        .map(|b| format!(" + {}", fmt_bytes(b)))
        .unwrap_or_default();
    format!(
        "{}{} in use{asked}",
        if exact { "" } else { "≥" },
        fmt_bytes(in_use)
    )
}
