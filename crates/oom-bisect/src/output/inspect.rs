//! `inspect`: the module tree with the ids `identity` accepts and each module's parameters, the stages
//! `truncate_after` accepts with their shapes and what each keeps for backward, and the estimated
//! peak of a step. All from the architecture: no tensor is allocated.

use deeplab::{Architecture, Config, MemoryEstimate};
use oom_trial::{fmt_bytes, Ceiling};

pub fn inspect(c: &Config, arch: &Architecture, ceiling: Ceiling) -> String {
    let est = arch.memory_estimate(c);
    let mut s = format!("{}\n", super::title(c));
    s += &format!("trainable parameters: {}\n", super::count(est.params));
    s += &modules(arch);
    s += &stages(&est);
    let p = est.peak;
    s += &format!(
        "\nEstimated peak of a step ({}): {} = weights {} + gradients {} + optimizer state {} + batch {} + activations {} \
         ({}; an estimate: `trial` measures).\n",
        c.train.phase.name(),
        fmt_bytes(p.total()),
        fmt_bytes(p.weights),
        fmt_bytes(p.gradients),
        fmt_bytes(p.optimizer_state),
        fmt_bytes(p.batch),
        fmt_bytes(p.activations),
        match c.device.memory_model() {
            deeplab::MemoryModel::Pytorch => "what PyTorch keeps for backward, the pytorch memory model",
            deeplab::MemoryModel::Burn => "what burn's autodiff keeps for backward, the burn memory model",
        },
    );
    s += &against(&est, ceiling);
    s += &not_in_the_estimate(c);
    s
}

/// What the estimate leaves out, which a measured need holds: said beside any comparison, so an
/// estimate that fits is not read as a verdict.
fn not_in_the_estimate(c: &deeplab::Config) -> String {
    let attention = match c.model.attention_heads {
        0 => "",
        _ => {
            " and attention's softmax transients, which this config has (docs/estimate.md: there \
               the estimate runs short by most)"
        }
    };
    format!(
        "Not in it: what the caching allocator holds in split segments, the CUDA context{attention}; \
         `bisect` and `trial` measure the need.\n"
    )
}

fn modules(arch: &Architecture) -> String {
    let mut s = "\nModules (ids for `identity = [..]`):\n".to_string();
    s += &format!(
        "  {:<24} {:>13}  {:<40} swappable\n",
        "id", "params", "kind"
    );
    let params = arch.params_by_module();
    for (m, (_, p)) in arch.modules.iter().zip(&params) {
        let swappable = match (&m.not_swappable, arch.is_identity(&m.id)) {
            (_, true) => "SWAPPED for identity".to_string(),
            (None, false) => "yes".to_string(),
            (Some(why), false) => format!("no: {why}"),
        };
        s += &format!(
            "  {:<24} {:>13}  {:<40} {swappable}\n",
            m.id,
            super::count(*p),
            m.kind
        );
    }
    s
}

fn stages(est: &MemoryEstimate) -> String {
    let mut s = "\nStages (ids for `truncate_after`), output shapes and estimated activation memory kept for backward:\n"
        .to_string();
    s += &format!(
        "  {:<26} {:<22} {:>12} {:>12}\n",
        "stage", "output [B, C, H, W]", "estimate", "cumulative"
    );
    let mut acc = 0;
    for st in &est.stages {
        acc += st.saved_bytes;
        let cut = if st.runs {
            ""
        } else {
            "  (not run: truncated)"
        };
        s += &format!(
            "  {:<26} {:<22} {:>12} {:>12}{cut}\n",
            st.id,
            format!("{:?}", st.shape),
            fmt_bytes(st.saved_bytes),
            fmt_bytes(acc)
        );
    }
    s
}

/// What the text says, as JSON (`inspect --json`): the modules, the stages and the estimate, with
/// the ceiling in bytes where it is one.
pub fn json(c: &Config, arch: &Architecture, ceiling: Ceiling) -> serde_json::Value {
    let est = arch.memory_estimate(c);
    let params = arch.params_by_module();
    let modules: Vec<_> = (arch.modules.iter().zip(&params))
        .map(|(m, (_, p))| {
            serde_json::json!({
                "id": m.id, "kind": m.kind, "params": p,
                "swapped": arch.is_identity(&m.id), "not_swappable": m.not_swappable,
            })
        })
        .collect();
    let stages: Vec<_> = (est.stages.iter())
        .map(|s| {
            serde_json::json!({
                "id": s.id, "shape": s.shape, "saved_bytes": s.saved_bytes, "runs": s.runs,
            })
        })
        .collect();
    let p = est.peak;
    serde_json::json!({
        "config": super::title(c),
        "params": est.params,
        "modules": modules,
        "stages": stages,
        "estimate": {
            "phase": c.train.phase.name(),
            "peak_bytes": p.total(),
            "weights_bytes": p.weights,
            "gradients_bytes": p.gradients,
            "optimizer_state_bytes": p.optimizer_state,
            "batch_bytes": p.batch,
            "activations_bytes": p.activations,
            "between_steps_bytes": est.between_steps,
        },
        "ceiling_bytes": match ceiling { Ceiling::Bytes(b) => Some(b), _ => None },
    })
}

/// The estimate against the ceiling (the flag's, else the config's), when it is given in bytes.
fn against(est: &MemoryEstimate, ceiling: Ceiling) -> String {
    let need = est.peak.total();
    match ceiling {
        Ceiling::None => "No ceiling in the config: nothing to compare the estimate with.\n".into(),
        Ceiling::Fraction(f) => format!(
            "The ceiling is {:.0}% of the device; inspect does not look for a device, \
             so the estimate is not compared with it.\n",
            f * 100.0
        ),
        Ceiling::Bytes(c) if need <= c => format!(
            "Against the ceiling of {}: the estimate fits, {} to spare ({:.0}% of it).\n",
            fmt_bytes(c),
            fmt_bytes(c - need),
            (c - need) as f64 / c as f64 * 100.0
        ),
        Ceiling::Bytes(c) => format!(
            "Against the ceiling of {}: the estimate is over by {} (+{:.0}%); `bisect` \
             measures why.\n",
            fmt_bytes(c),
            fmt_bytes(need - c),
            (need as f64 / c as f64 - 1.0) * 100.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is to spare is the share of the ceiling left over, not the share used.
    #[test]
    fn the_spare_share_is_what_is_left() {
        let c = deeplab::Config::example();
        let est = deeplab::Architecture::new(&c).unwrap().memory_estimate(&c);
        let need = est.peak.total();
        let text = against(&est, Ceiling::Bytes(need * 4));
        assert!(text.contains("(75% of it)"), "{text}");
    }
}
