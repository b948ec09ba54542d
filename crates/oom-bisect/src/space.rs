//! The search space of one workload: its monotone axes (values in order of growing memory), the
//! capacity axes used when it fits, the fixes a user would try, and the module items (each swapped
//! alone, then ddmin when none alone fits).

use crate::cli::Step;
use deeplab::{ids, Architecture, Config, LossResolution, Optimizer, Phase, Precision};
use oom_search::{Axis, AxisValue, Fix, ModuleItem, Modules, Space};

fn value(value: String, label: String, x: Option<f64>) -> AxisValue {
    AxisValue { value, label, x }
}

fn batch_axis(config: &Config, upto: usize) -> Axis {
    Axis {
        name: "batch".into(),
        noun: "batch dimension".into(),
        fix: Some("largest batch that fits".into()),
        key: "data.batch".into(),
        values: (1..=upto)
            .map(|b| value(b.to_string(), b.to_string(), Some(b as f64)))
            .collect(),
        original: config.data.batch - 1,
        fine: vec![],
    }
}

/// Input sizes that are multiples of `m` with the aspect ratio kept, from `m` up to `max_side` (or
/// the configured size), which is always one of them; smallest first.
fn sizes(config: &Config, m: usize, max_side: usize) -> Vec<[usize; 2]> {
    let [h, w] = config.data.size;
    let mut sizes: Vec<[usize; 2]> = (1..)
        .map(|k| k * m)
        .take_while(|sh| *sh <= max_side.max(h))
        .filter(|sh| *sh != h)
        .map(|sh| {
            let sw = ((sh as f64 * w as f64 / h as f64 / m as f64).round() as usize).max(1) * m;
            [sh, sw]
        })
        .collect();
    sizes.push([h, w]);
    sizes.sort_by_key(|s| s[0] * s[1]);
    sizes.dedup();
    sizes
}

fn size_values(sizes: &[[usize; 2]]) -> Vec<AxisValue> {
    sizes
        .iter()
        .map(|[a, b]| {
            value(
                format!("[{a}, {b}]"),
                format!("{a}×{b}"),
                Some((a * b) as f64),
            )
        })
        .collect()
}

/// Input sizes in steps of 32 (or of the output stride when larger), valid at every output stride
/// the search may try; refined to the model's own step (its output stride, at least 4: what the
/// config accepts) around the boundary.
fn size_axis(config: &Config, max_side: usize) -> Axis {
    let stride = config.model.output_stride;
    let coarse = sizes(config, stride.max(32), max_side);
    let fine = match stride.max(4) < stride.max(32) {
        true => size_values(&sizes(config, stride.max(4), max_side)),
        false => vec![],
    };
    let original = coarse
        .iter()
        .position(|s| *s == config.data.size)
        .expect("configured size present");
    Axis {
        name: "size".into(),
        noun: "input size".into(),
        fix: Some("largest input size that fits".into()),
        key: "data.size".into(),
        values: size_values(&coarse),
        original,
        fine,
    }
}

fn stride_axis(config: &Config) -> Axis {
    let values: Vec<usize> = [32, 16, 8]
        .into_iter()
        .filter(|s| *s >= config.model.output_stride)
        .collect();
    Axis {
        name: "stride".into(),
        noun: "output stride".into(),
        fix: None,
        key: "model.output_stride".into(),
        original: values.len() - 1,
        values: values
            .iter()
            .map(|s| value(s.to_string(), format!("OS{s}"), None))
            .collect(),
        fine: vec![],
    }
}

fn depth_axis(config: &Config, arch: &Architecture) -> Axis {
    let last = arch.stages.len() - 1;
    Axis {
        name: "depth".into(),
        noun: "depth of the model".into(),
        fix: None,
        key: "model.truncate_after".into(),
        values: arch
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let label = ids::short(&s.id).to_string();
                let label = if i == last {
                    format!("{label} (whole model)")
                } else {
                    label
                };
                value(format!("\"{}\"", s.id), label, None)
            })
            .collect(),
        original: config
            .model
            .truncate_after
            .as_ref()
            .map(|t| arch.stage_index(t))
            .unwrap_or(last),
        fine: vec![],
    }
}

fn phase_axis(config: &Config) -> Axis {
    Axis {
        name: "phase".into(),
        noun: "phase of the step".into(),
        fix: None,
        key: "train.phase".into(),
        values: Phase::ALL
            .iter()
            .map(|p| value(format!("\"{}\"", p.name()), p.name().into(), None))
            .collect(),
        original: Phase::ALL
            .iter()
            .position(|p| *p == config.train.phase)
            .unwrap_or(2),
        fine: vec![],
    }
}

/// Module items: the model's swap groups (later blocks of each layer together, every head module).
fn module_items(arch: &Architecture) -> Modules {
    Modules {
        key: "model.identity".into(),
        fixed: arch.identity.clone(),
        items: arch
            .swap_groups()
            .into_iter()
            .map(|(label, ids)| ModuleItem { label, ids })
            .collect(),
        unswappable: ids::UNSWAPPABLE.into(),
    }
}

fn fixes(config: &Config) -> Vec<Fix> {
    let mut f = vec![];
    let mut add = |change: &str, sets: &[(&str, &str)]| {
        f.push(Fix {
            change: change.into(),
            sets: sets
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    };
    // In order of how little each changes the training: the numbers' precision, then recomputation,
    // then the model's resolution, the loss, the model itself; the diagnosis ranks them so.
    if config.train.precision == Precision::F32 {
        // Mixed precision as PyTorch's autocast (f32 master weights) first: what users mean by
        // "AMP"; then pure low precision, weights, gradients and optimizer state too.
        add(
            "mixed precision bf16",
            &[("train.precision", "\"mixed-bf16\"")],
        );
        add(
            "mixed precision f16",
            &[("train.precision", "\"mixed-f16\"")],
        );
        add("pure bf16", &[("train.precision", "\"bf16\"")]);
        add("pure f16", &[("train.precision", "\"f16\"")]);
    }
    if !config.train.checkpointing {
        add("gradient checkpointing", &[("train.checkpointing", "true")]);
    }
    if config.model.output_stride == 8 {
        add("output stride 16", &[("model.output_stride", "16")]);
    }
    if config.train.loss_resolution == LossResolution::Full {
        add(
            "quarter-resolution loss",
            &[("train.loss_resolution", "\"quarter\"")],
        );
    }
    if config.train.optimizer == Optimizer::Adamw {
        add("SGD instead of AdamW", &[("train.optimizer", "\"sgd\"")]);
    }
    // The configured identity list plus one more module, as a TOML list.
    let plus = |id: &str| {
        let list: Vec<String> = config
            .model
            .identity
            .iter()
            .map(String::as_str)
            .chain([id])
            .map(|i| format!("\"{i}\""))
            .collect();
        format!("[{}]", list.join(", "))
    };
    let swapped = |id: &str| config.model.identity.iter().any(|i| i == id);
    if config.model.attention_heads > 0 && !swapped(ids::ATTENTION) {
        add("no attention", &[("model.identity", &plus(ids::ATTENTION))]);
    }
    if config.model.aux_head && !swapped(ids::AUX_HEAD) {
        add("no aux head", &[("model.identity", &plus(ids::AUX_HEAD))]);
    }
    f
}

/// The whole space for `steps` (all when empty).
pub fn build(config: &Config, steps: &[Step]) -> Space {
    let arch = Architecture::new(config).expect("validated");
    let on = |s: Step| steps.is_empty() || steps.contains(&s);
    let mut axes = vec![];
    if on(Step::Batch) {
        axes.push(batch_axis(config, config.data.batch));
    }
    if on(Step::Size) {
        axes.push(size_axis(config, 0));
    }
    if on(Step::Stride) {
        axes.push(stride_axis(config));
    }
    if on(Step::Depth) {
        axes.push(depth_axis(config, &arch));
    }
    if on(Step::Phase) {
        axes.push(phase_axis(config));
    }
    let mut capacity = vec![];
    if on(Step::Batch) {
        let b = config.data.batch;
        capacity.push(batch_axis(config, (b * 16).clamp(16, 1024)));
    }
    if on(Step::Size) {
        let [h, _] = config.data.size;
        capacity.push(size_axis(config, (h * 4).min(8192)));
    }
    Space {
        axes,
        capacity,
        fixes: if on(Step::Fixes) {
            fixes(config)
        } else {
            vec![]
        },
        modules: Modules {
            items: if on(Step::Modules) || on(Step::Minimal) {
                module_items(&arch).items
            } else {
                vec![]
            },
            ..module_items(&arch)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(size: [usize; 2], os: usize) -> Config {
        let mut c = Config::example();
        c.data.size = size;
        c.model.output_stride = os;
        c
    }

    #[test]
    fn sizes_keep_aspect_and_end_at_the_original() {
        let a = size_axis(&cfg([512, 1024], 16), 0);
        assert_eq!(a.values[a.original].label, "512×1024");
        assert_eq!(a.original, a.values.len() - 1);
        assert_eq!(a.values[0].label, "32×64");
        assert_eq!(a.values.len(), 16);
        let a = size_axis(&cfg([520, 520], 8), 0);
        assert_eq!(a.values.last().unwrap().label, "520×520");
    }

    #[test]
    fn sizes_refine_to_the_output_stride() {
        // Coarse steps of 32 stay valid at every stride; the fine ones are the model's own step.
        let a = size_axis(&cfg([96, 96], 8), 0);
        let labels =
            |v: &[oom_search::AxisValue]| v.iter().map(|v| v.label.clone()).collect::<Vec<_>>();
        assert_eq!(labels(&a.values), ["32×32", "64×64", "96×96"]);
        assert_eq!(a.fine.len(), 12);
        assert_eq!(a.fine[8].label, "72×72");
        assert!(a.values.iter().all(|v| a.fine.contains(v)));
        // At OS32 the coarse step is already the model's.
        assert!(size_axis(&cfg([96, 96], 32), 0).fine.is_empty());
    }

    #[test]
    fn strides_ascend_in_memory() {
        let a = stride_axis(&cfg([512, 512], 8));
        let labels: Vec<_> = a.values.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["OS32", "OS16", "OS8"]);
        assert_eq!(a.original, 2);
    }
}
