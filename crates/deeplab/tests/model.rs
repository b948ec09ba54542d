//! The model on the CPU backend at small sizes: exact parameter counts of the torchvision recipe,
//! output shapes for every output stride and option, and a full training step for every identity swap
//! and every truncation point.

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use deeplab::{Architecture, Config, DeepLabV3Plus, Phase, Trainer};

type B = Autodiff<Flex>;

fn small(extra: &[&str]) -> Config {
    let base = Config::from_toml_str(
        r#"
[model]
backbone = "resnet18"
output_stride = 16
classes = 3
aspp_channels = 32
[data]
batch = 2
size = [64, 64]
[train]
steps = 1
"#,
    )
    .unwrap();
    base.with_overrides(extra).unwrap()
}

fn params(backbone: &str) -> usize {
    let c = Config::example()
        .with_overrides(&[
            &format!("model.backbone={backbone}"),
            "model.output_stride=8",
        ])
        .unwrap();
    let arch = Architecture::new(&c).unwrap();
    deeplab::model::trainable_params(&DeepLabV3Plus::<B>::new(arch, &Default::default()))
}

#[test]
fn parameter_counts_match_torchvision_recipe() {
    assert_eq!(params("resnet50"), 40_352_181);
    assert_eq!(params("resnet101"), 59_344_309);
}

fn run_step(c: &Config) -> deeplab::StepResult {
    let device = Default::default();
    let mut t = Trainer::<B>::new(c, &device).unwrap();
    let mut seen = vec![];
    let r = t.step(&mut |p| seen.push(format!("{p:?}")));
    assert!(r.check.is_finite(), "step produced {r:?} for {c:?}");
    assert!(seen.iter().any(|s| s == "Loss"));
    r
}

fn logits_shape(c: &Config) -> [usize; 4] {
    let device = Default::default();
    let arch = Architecture::new(c).unwrap();
    let model = DeepLabV3Plus::<B>::new(arch, &device);
    let x = Tensor::<B, 4>::zeros([c.data.batch, 3, c.data.size[0], c.data.size[1]], &device);
    match model.forward(x, &mut |_| {}).head {
        deeplab::model::Head::Logits(l) => l.dims(),
        deeplab::model::Head::Truncated(_) => panic!("not truncated"),
    }
}

#[test]
fn output_shape_for_every_stride_and_option() {
    for os in [8, 16, 32] {
        let os = format!("model.output_stride={os}");
        for opt in [
            "model.separable=false",
            "model.separable=true",
            "model.attention_heads=4",
            "model.aux_head=true",
            "model.aspp_rates=[1, 2, 3]",
            "train.checkpointing=true",
            "train.optimizer=adamw",
        ] {
            let c = small(&[&os, opt]);
            assert_eq!(logits_shape(&c), [2, 3, 64, 64], "{os} {opt}");
        }
    }
    let c = small(&["data.size=[64, 96]", "model.backbone=resnet50"]);
    assert_eq!(logits_shape(&c), [2, 3, 64, 96]);
    let c = small(&["train.loss_resolution=quarter"]);
    assert_eq!(logits_shape(&c), [2, 3, 16, 16]);
}

#[test]
fn every_identity_swap_trains() {
    let base = small(&[
        "model.attention_heads=2",
        "model.aux_head=true",
        "model.output_stride=8",
    ]);
    let ids = Architecture::new(&base).unwrap().swappable_ids();
    assert!(ids.len() >= 15, "{ids:?}");
    for id in &ids {
        let c = base
            .with_overrides(&[&format!("model.identity=[\"{id}\"]")])
            .unwrap();
        run_step(&c);
    }
    // Neighbours adapt to several swaps at once, too.
    let c = base
        .with_overrides(&[
            "model.identity=[\"aspp.branch0\", \"aspp.pool\", \"decoder.project\", \"decoder.fuse.0\"]",
        ])
        .unwrap();
    run_step(&c);
    let c = base
        .with_overrides(&["model.identity=[\"decoder\", \"attention\"]"])
        .unwrap();
    assert_eq!(logits_shape(&c), [2, 3, 64, 64]);
    let c = base.with_overrides(&["model.identity=[\"aspp\"]"]).unwrap();
    run_step(&c);
    // Every branch swapped: nothing feeds the projection, so the ASPP passes layer4 through.
    let all = "model.identity=[\"aspp.branch0\", \"aspp.branch1\", \"aspp.branch2\", \"aspp.branch3\", \"aspp.pool\"]";
    let c = base.with_overrides(&[all]).unwrap();
    assert!(Architecture::new(&c).unwrap().aspp_is_identity());
    run_step(&c);
}

#[test]
fn every_truncation_point_trains() {
    let base = small(&["model.attention_heads=2", "model.aux_head=true"]);
    let stages: Vec<String> = Architecture::new(&base)
        .unwrap()
        .stages
        .iter()
        .map(|s| s.id.clone())
        .collect();
    assert_eq!(stages.first().unwrap(), "backbone.stem");
    assert_eq!(stages.last().unwrap(), "classifier");
    for s in &stages {
        let c = base
            .with_overrides(&[&format!("model.truncate_after=\"{s}\"")])
            .unwrap();
        run_step(&c);
    }
}

#[test]
fn phases_and_optimizers_train() {
    for phase in Phase::ALL {
        for opt in ["sgd", "adamw"] {
            let c = small(&[
                &format!("train.phase={}", phase.name()),
                &format!("train.optimizer={opt}"),
            ]);
            run_step(&c);
        }
    }
}

#[test]
fn training_changes_the_weights() {
    let c = small(&[]);
    let device = Default::default();
    let mut t = Trainer::<B>::new(&c, &device).unwrap();
    let before: f64 = t
        .model()
        .backbone
        .conv1
        .weight
        .val()
        .sum()
        .into_scalar()
        .elem();
    t.step(&mut |_| {});
    let after: f64 = t
        .model()
        .backbone
        .conv1
        .weight
        .val()
        .sum()
        .into_scalar()
        .elem();
    assert_ne!(before, after);
}

#[test]
fn invalid_modules_and_stages_are_refused_with_the_key() {
    let c = small(&[]);
    for (set, key, text) in [
        (
            "model.identity=[\"aspp.branch9\"]",
            "model.identity",
            "not a module",
        ),
        (
            "model.identity=[\"backbone.layer2.0\"]",
            "model.identity",
            "cannot be swapped",
        ),
        (
            "model.identity=[\"classifier\"]",
            "model.identity",
            "produces the logits",
        ),
        (
            "model.identity=[\"attention\"]",
            "model.identity",
            "not a module",
        ),
        (
            "model.truncate_after=\"backbone.layer9.0\"",
            "model.truncate_after",
            "not a stage",
        ),
    ] {
        let c = c.with_overrides(&[set]).unwrap();
        let e = Architecture::new(&c).unwrap_err();
        assert_eq!(e.key, key, "{set}");
        assert!(e.message.contains(text), "{set}: {e}");
    }
}

/// The estimate's exact parameter count is the built model's, for every single swap and option.
#[test]
fn estimated_parameters_are_the_built_models() {
    let base = small(&[
        "model.attention_heads=2",
        "model.aux_head=true",
        "model.output_stride=8",
    ]);
    let device = Default::default();
    let count = |c: &Config| {
        let arch = Architecture::new(c).unwrap();
        let built =
            deeplab::model::trainable_params(&DeepLabV3Plus::<B>::new(arch.clone(), &device));
        assert_eq!(arch.params(), built as u64, "{c:?}");
    };
    for opt in [
        "model.separable=true",
        "model.backbone=\"resnet50\"",
        "model.output_stride=16",
    ] {
        count(&base.with_overrides(&[opt]).unwrap());
    }
    for id in Architecture::new(&base).unwrap().swappable_ids() {
        count(
            &base
                .with_overrides(&[format!("model.identity=[\"{id}\"]")])
                .unwrap(),
        );
    }
}

/// `inspect`'s per-module column (the architecture's count, without building anything) is the
/// built model's, module by module, with and without swaps.
#[test]
fn each_modules_parameters_are_the_built_models() {
    let base = small(&["model.attention_heads=2", "model.aux_head=true"]);
    for c in [
        base.clone(),
        base.with_overrides(&["model.identity=[\"aspp.branch1\", \"backbone.layer2.1\"]"])
            .unwrap(),
    ] {
        let arch = Architecture::new(&c).unwrap();
        let built = DeepLabV3Plus::<B>::new(arch.clone(), &Default::default()).params_by_module();
        let estimated: Vec<(String, usize)> = arch
            .params_by_module()
            .into_iter()
            .map(|(id, n)| (id, n as usize))
            .collect();
        assert_eq!(estimated, built);
    }
}

/// `train.premade_state`'s update (zero gradients, zero learning rate) leaves every weight as it
/// was, with either optimizer and with weight decay, and a real step still trains after it.
#[test]
fn making_the_optimizer_state_leaves_the_weights() {
    for opt in ["\"sgd\"", "\"adamw\""] {
        let c = small(&[&format!("train.optimizer={opt}"), "train.weight_decay=0.1"]);
        let mut t = Trainer::<B>::new(&c, &Default::default()).unwrap();
        let weights = |t: &Trainer<B>| -> Vec<f32> {
            t.model()
                .backbone
                .conv1
                .weight
                .val()
                .into_data()
                .to_vec()
                .unwrap()
        };
        let before = weights(&t);
        t.make_optimizer_state();
        assert_eq!(weights(&t), before, "{opt}: the zero update moved a weight");
        let r = t.step(&mut |_| {});
        assert!(r.check.is_finite());
        assert_ne!(
            weights(&t),
            before,
            "{opt}: the step after it did not train"
        );
    }
}

/// The optimizer state made before the first step covers what a real step trains and nothing
/// else: `visit_trained` visits exactly the parameters that get a gradient, at every truncation
/// point, with the auxiliary head and with swapped blocks.
#[test]
fn the_trained_parameters_are_those_that_get_a_gradient() {
    use burn::module::{ModuleVisitor, Param};
    use burn::optim::GradientsParams;
    use deeplab::model::Head;
    struct Trainable(usize);
    impl ModuleVisitor<B> for Trainable {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0 += param.val().is_require_grad() as usize;
        }
    }
    for sets in [
        &[][..],
        &["model.truncate_after=\"backbone.stem\""],
        &["model.truncate_after=\"backbone.layer2.0\""],
        &[
            "model.aux_head=true",
            "model.truncate_after=\"backbone.layer3.1\"",
        ],
        &["model.aux_head=true", "model.truncate_after=\"aspp\""],
        &[
            "model.truncate_after=\"decoder\"",
            "model.identity=[\"backbone.layer4.1\"]",
        ],
    ] {
        let c = small(sets);
        let device = Default::default();
        let model = DeepLabV3Plus::<B>::new(Architecture::new(&c).unwrap(), &device);
        let mut trained = Trainable(0);
        model.visit_trained(&mut trained);
        let x =
            Tensor::<B, 4>::random([2, 3, 64, 64], burn::tensor::Distribution::Default, &device);
        let out = model.forward(x, &mut |_| {});
        let (Head::Logits(y) | Head::Truncated(y)) = out.head;
        let loss = out.aux.into_iter().fold(y.mean(), |l, a| l + a.mean());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        assert_eq!(trained.0, grads.len(), "{sets:?}");
    }
}
