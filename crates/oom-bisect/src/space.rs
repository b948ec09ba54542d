//! The search space of one workload: its monotone axes (values in order of growing memory), the
//! capacity axes used when it fits, the fixes a user would try, and the module items (each swapped
//! alone, then ddmin when none alone fits).

use crate::cli::Step;
use crate::kinds::{AxisKind, FixKind};
use crate::toml_value;
use deeplab::{ids, Architecture, Config, Phase};
use oom_search::{Axis, AxisValue, Fix, ModuleItem, Modules, Space};

/// An axis of `kind`, its words from the kind.
fn axis(kind: AxisKind, values: Vec<AxisValue>, original: usize, fine: Vec<AxisValue>) -> Axis {
    Axis {
        name: kind.name().into(),
        tag: kind.tag(),
        noun: kind.noun().into(),
        fix: kind.fix().map(String::from),
        key: kind.key().into(),
        values,
        original,
        fine,
    }
}

fn value(value: String, label: String, x: Option<f64>) -> AxisValue {
    AxisValue { value, label, x }
}

fn batch_axis(config: &Config, upto: usize) -> Axis {
    let values = (1..=upto)
        .map(|b| value(b.to_string(), b.to_string(), Some(b as f64)))
        .collect();
    axis(AxisKind::Batch, values, config.data.batch - 1, vec![])
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
    axis(AxisKind::Size, size_values(&coarse), original, fine)
}

fn stride_axis(config: &Config) -> Axis {
    let values: Vec<usize> = [32, 16, 8]
        .into_iter()
        .filter(|s| *s >= config.model.output_stride)
        .collect();
    let original = values.len() - 1;
    let values = values
        .iter()
        .map(|s| {
            let mut c = config.clone();
            c.model.output_stride = *s;
            value(s.to_string(), format!("OS{s}"), estimated_x(&c))
        })
        .collect();
    axis(AxisKind::Stride, values, original, vec![])
}

fn depth_axis(config: &Config, arch: &Architecture) -> Axis {
    let last = arch.stages.len() - 1;
    let values = arch
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
            value(toml_value::string(&s.id), label, depth_x(config, &s.id))
        })
        .collect();
    let original = config
        .model
        .truncate_after
        .as_ref()
        .map(|t| arch.stage_index(t))
        .unwrap_or(last);
    axis(AxisKind::Depth, values, original, vec![])
}

/// The depth axis's x at a stage: [`estimated_x`] of the model truncated after it.
fn depth_x(config: &Config, stage: &str) -> Option<f64> {
    let mut c = config.clone();
    c.model.truncate_after = Some(stage.to_string());
    estimated_x(&c)
}

/// An axis's x where memory does not grow with a number of its own (depth, output stride): what
/// `config` is estimated to hold in a step beyond what outlives the step (deeplab's estimate:
/// activations and gradients; 0 is the weights, state and batch alone). Measured needs lie close
/// to a line along it (the estimate errs by a share, not value by value), so needs predict the
/// boundary as they do the batch's.
fn estimated_x(config: &Config) -> Option<f64> {
    let arch = Architecture::new(config).ok()?;
    let e = arch.memory_estimate(config);
    Some(e.peak.total().saturating_sub(e.between_steps) as f64)
}

fn phase_axis(config: &Config) -> Axis {
    let values = Phase::ALL
        .iter()
        .map(|p| value(toml_value::string(p.name()), p.name().into(), None))
        .collect();
    let original = Phase::ALL
        .iter()
        .position(|p| *p == config.train.phase)
        .unwrap_or(2);
    axis(AxisKind::Phase, values, original, vec![])
}

/// Module items: the model's swap groups (later blocks of each layer together, every head module),
/// each with what swapping it saves by the estimate (none where it adds: an identity in place of
/// decoder.project passes all its input's channels on).
fn module_items(config: &Config, arch: &Architecture) -> Modules {
    let saving = saving_against(config);
    let saving = |ids: &[String]| {
        let mut c = config.clone();
        c.model.identity.extend(ids.iter().cloned());
        saving(&c)
    };
    Modules {
        key: "model.identity".into(),
        encode: |ids| toml_value::strings(ids),
        fixed: arch.identity.clone(),
        items: (arch.swap_groups().into_iter())
            .map(|(label, ids)| ModuleItem {
                estimated_saving: saving(&ids),
                label,
                ids,
            })
            .collect(),
        unswappable: ids::UNSWAPPABLE.into(),
    }
}

/// What a changed config saves against `config` by deeplab's estimate of the peak (nothing where
/// it adds); `config`'s own peak estimated once.
fn saving_against(config: &Config) -> impl Fn(&Config) -> Option<u64> {
    let whole = estimated_peak(config);
    move |changed| Some(whole?.saturating_sub(estimated_peak(changed)?))
}

/// deeplab's estimate of the peak of a step of `config` (none where the model cannot be built).
pub fn estimated_peak(config: &Config) -> Option<u64> {
    Some(
        Architecture::new(config)
            .ok()?
            .memory_estimate(config)
            .peak
            .total(),
    )
}

/// The fixes that change `config`, least change to the training first, each with what it saves
/// by the estimate.
fn fixes(config: &Config) -> Vec<Fix> {
    let saving = saving_against(config);
    FixKind::ALL
        .into_iter()
        .filter(|k| k.applies(config))
        .map(|k| {
            let mut fix = Fix {
                change: k.label().into(),
                tag: k.tag(),
                sets: k.sets(config),
                covered_by: (k.covered_by())
                    .filter(|c| c.applies(config))
                    .map(|c| c.label().into()),
                estimated_saving: None,
                early: k.compiles_its_own(),
            };
            let changed = crate::candidate::resolve(config, &fix.candidate()).ok();
            fix.estimated_saving = changed.and_then(|(c, _)| saving(&c));
            fix
        })
        .collect()
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
        modules: match on(Step::Modules) || on(Step::Minimal) {
            true => module_items(config, &arch),
            false => Modules {
                items: vec![],
                ..module_items(config, &arch)
            },
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

    /// The depth and stride axes' x (the estimate of the model truncated there, or at that
    /// stride) grows value by value, as the prediction's lines assume, on the forum's model and the
    /// quickstart's (attention included). Along the stride it may stay level: the estimate is a
    /// peak, and where the decoder's full-resolution tensors make it (the quickstart at 128²),
    /// OS32 and OS16 peak alike; the line then predicts the higher of the two.
    #[test]
    fn the_estimate_grows_along_depth_and_stride() {
        for f in ["forum-r101-os8-1024.toml", "quickstart.toml"] {
            let path = format!("{}/../../configs/{f}", env!("CARGO_MANIFEST_DIR"));
            let c = Config::from_toml_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            let xs = |step: Step| -> Vec<f64> {
                let space = build(&c, &[step]);
                space.axes[0].values.iter().map(|v| v.x.unwrap()).collect()
            };
            let depth = xs(Step::Depth);
            assert!(
                depth.windows(2).all(|w| w[0] < w[1]),
                "{f} depth: {depth:?}"
            );
            let stride = xs(Step::Stride);
            assert!(
                stride.windows(2).all(|w| w[0] <= w[1]),
                "{f} stride: {stride:?}"
            );
            assert!(
                stride[0] < stride[stride.len() - 1],
                "{f} stride: {stride:?}"
            );
        }
    }

    /// Each fix carries what it saves by the estimate: on the forum (32.4 GiB measured under a
    /// 23.7 GiB ceiling) SGD without momentum saves its buffer, one f32 per parameter, and the
    /// quarter-resolution loss little; checkpointing and the precisions save the most.
    #[test]
    fn fixes_carry_their_estimated_saving() {
        let path = format!(
            "{}/../../configs/forum-r101-os8-1024.toml",
            env!("CARGO_MANIFEST_DIR")
        );
        let c = Config::from_toml_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let space = build(&c, &[]);
        let gib = |change: &str| {
            let f = space.fixes.iter().find(|f| f.change == change).unwrap();
            f.estimated_saving.unwrap() as f64 / (1u64 << 30) as f64
        };
        let params = Architecture::new(&c).unwrap().params() as f64;
        let momentum = params * 4.0 / (1u64 << 30) as f64;
        assert!(
            (gib("SGD without momentum") - momentum).abs() < 0.01,
            "{momentum}"
        );
        assert!(gib("quarter-resolution loss") < 2.0);
        assert!(gib("gradient checkpointing") > 8.7 && gib("pure f16") > 8.7);
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
