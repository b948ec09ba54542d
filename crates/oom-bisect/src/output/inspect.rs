//! `inspect`: the module tree with the ids `identity` accepts and each module's parameters, the stages
//! `truncate_after` accepts with their shapes and what each keeps for backward, and the estimated
//! peak of a step. All from the architecture: no tensor is allocated.

use deeplab::{Architecture, Config, MemoryEstimate};
use oom_trial::fmt_bytes;

pub fn inspect(c: &Config, arch: &Architecture) -> String {
    let est = arch.memory_estimate(c);
    let mut s = format!("{}\n", super::title(c));
    s += &format!("trainable parameters: {}\n", est.params);
    s += &modules(arch);
    s += &stages(&est);
    let p = est.peak;
    s += &format!(
        "\nEstimated peak of a step ({}): {} = weights {} + gradients {} + optimizer state {} + batch {} + activations {} \
         (burn's autodiff on the CPU backend; an estimate: `trial` measures).\n",
        c.train.phase.name(),
        fmt_bytes(p.total()),
        fmt_bytes(p.weights),
        fmt_bytes(p.gradients),
        fmt_bytes(p.optimizer_state),
        fmt_bytes(p.batch),
        fmt_bytes(p.activations),
    );
    s
}

fn modules(arch: &Architecture) -> String {
    let mut s = "\nModules (ids for `identity = [..]`):\n".to_string();
    s += &format!(
        "  {:<24} {:>11}  {:<40} swappable\n",
        "id", "params", "kind"
    );
    let params = arch.params_by_module();
    for (m, (_, p)) in arch.modules.iter().zip(&params) {
        let swappable = match (&m.not_swappable, arch.is_identity(&m.id)) {
            (_, true) => "SWAPPED for identity".to_string(),
            (None, false) => "yes".to_string(),
            (Some(why), false) => format!("no: {why}"),
        };
        s += &format!("  {:<24} {:>11}  {:<40} {swappable}\n", m.id, p, m.kind);
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
