//! Checkpointed blocks (`train.checkpointing` under the `pytorch` memory model) compute the same
//! function and the same gradients as the model without them, wherever the chain of blocks is cut:
//! the auxiliary head on layer3, layer1 into the decoder, a truncation inside a layer, blocks
//! swapped for identity; and the memory-efficient attention kernel computes what the composition does.

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::Distribution;
use deeplab::model::Head;
use deeplab::{Architecture, Config, DeepLabV3Plus, Recompute};

type B = Autodiff<Flex>;

/// Dropout draws from the backend's one random generator, seeded per comparison: tests that seed
/// it must not interleave.
static SEEDED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn config(extra: &[&str]) -> Config {
    Config::from_toml_str(
        r#"
[model]
backbone = "resnet18"
output_stride = 8
classes = 3
aspp_channels = 16
aux_head = true
[data]
batch = 2
size = [32, 32]
[train]
checkpointing = true
"#,
    )
    .unwrap()
    .with_overrides(extra)
    .unwrap()
}

/// The loss (the mean square of every output) and the parameters' gradients.
fn loss_and_grads(model: &DeepLabV3Plus<B>, x: &Tensor<B, 4>) -> (f32, GradientsParams) {
    let mut out = model.forward(x.clone(), &mut |_| {});
    let segments = out.segments.take();
    let project = |t: Tensor<B, 4>| t.powi_scalar(2).mean();
    let head = match out.head {
        Head::Logits(t) | Head::Truncated(t) => t,
    };
    let mut loss = project(head);
    if let Some(aux) = out.aux {
        loss = loss + project(aux);
    }
    let value = loss.clone().into_scalar();
    let grads = loss.backward();
    let params = match segments {
        Some(s) => s.backward(model, &model.backbone.layers, grads),
        None => GradientsParams::from_grads(grads, model),
    };
    (value, params)
}

/// Every trainable parameter's gradient in `a` and `b`: present in both or in neither, and equal
/// within `rel` of the gradient's largest value.
fn assert_same_grads(
    model: &DeepLabV3Plus<B>,
    a: &GradientsParams,
    b: &GradientsParams,
    rel: f32,
) -> usize {
    struct Compare<'a>(&'a GradientsParams, &'a GradientsParams, usize, f32);
    impl ModuleVisitor<B> for Compare<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
            let (a, b) = (self.0.get::<Flex, D>(p.id), self.1.get::<Flex, D>(p.id));
            match (a, b) {
                (Some(a), Some(b)) => {
                    let scale: f32 = a.clone().abs().max().into_scalar();
                    let diff: f32 = (a - b).abs().max().into_scalar();
                    // With a floor for gradients that are zero but for rounding (the key
                    // projection's bias: softmax does not see it).
                    assert!(
                        diff <= self.3 * scale + 1e-7,
                        "{:?}: {diff} of {scale}",
                        p.id
                    );
                    self.2 += 1;
                }
                (None, None) => {}
                (a, b) => panic!(
                    "{:?}: only one has a gradient ({:?})",
                    p.id,
                    (a.is_some(), b.is_some())
                ),
            }
        }
    }
    let mut c = Compare(a, b, 0, rel);
    model.visit(&mut c);
    c.2
}

fn check(extra: &[&str]) {
    let _serial = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
    let c = config(extra);
    assert_eq!(c.recompute(), Recompute::Blocks, "{extra:?}");
    let device = Default::default();
    let mut model = DeepLabV3Plus::<B>::new(Architecture::new(&c).unwrap(), &device);
    model.materialize();
    let x = Tensor::<B, 4>::random([2, 3, 32, 32], Distribution::Normal(0.0, 1.0), &device);
    assert!(model.arch.checkpoint_blocks);
    // Same weights, same batch: the random projections repeat with the seed.
    B::seed(&device, 7);
    let (with, checkpointed) = loss_and_grads(&model, &x);
    model.arch.checkpoint_blocks = false;
    B::seed(&device, 7);
    let (without, plain) = loss_and_grads(&model, &x);
    assert!(
        (with - without).abs() <= 1e-4 * without.abs().max(1.0),
        "{with} vs {without}"
    );
    // The same ops recomputed: equal but for rounding.
    let compared = assert_same_grads(&model, &checkpointed, &plain, 1e-4);
    // The stem's convolution gets its gradient through the chain's input.
    let conv1 = model.backbone.conv1.weight.id;
    assert!(checkpointed.get::<Flex, 4>(conv1).is_some(), "{extra:?}");
    assert!(compared > 20, "{extra:?}: {compared} gradients compared");
}

#[test]
fn checkpointed_blocks_give_the_same_loss_and_gradients() {
    // The whole model: the aux head on layer3, layer1 into the decoder, layer4 into the ASPP.
    check(&[]);
    // Truncated inside the chain; and where the aux head taps it too (two leaves at one place).
    check(&["model.truncate_after=\"backbone.layer2.1\""]);
    check(&["model.truncate_after=\"backbone.layer3.1\""]);
    // Swapped blocks are not segments: the last of layer1 (the decoder's tap) and of the chain.
    check(&["model.identity=[\"backbone.layer1.1\", \"backbone.layer4.1\"]"]);
    check(&["model.attention_heads=2"]);
}

#[test]
fn only_the_pytorch_model_checkpoints_blocks() {
    let burn = config(&["device.memory_model=\"burn\""]);
    assert_eq!(burn.recompute(), Recompute::BurnBalanced);
    assert!(!Architecture::new(&burn).unwrap().checkpoint_blocks);
    let off = config(&["train.checkpointing=false"]);
    assert_eq!(off.recompute(), Recompute::Nothing);
    assert!(!Architecture::new(&off).unwrap().checkpoint_blocks);
}

/// The memory-efficient attention kernel computes what the composition does, inside the model.
#[test]
fn efficient_attention_is_the_models_attention() {
    let _serial = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
    let c = config(&[
        "model.attention_heads=2",
        "train.checkpointing=false",
        "model.truncate_after=\"attention\"",
    ]);
    let device = Default::default();
    // Weights and batch from a seed: the same case every run.
    B::seed(&device, 3);
    let mut model = DeepLabV3Plus::<B>::new(Architecture::new(&c).unwrap(), &device);
    model.materialize();
    let x = Tensor::<B, 4>::random([2, 3, 32, 32], Distribution::Normal(0.0, 1.0), &device);
    B::seed(&device, 7);
    let (math_loss, math) = loss_and_grads(&model, &x);
    model.attention.as_mut().unwrap().kernel = deeplab::AttentionKernel::Efficient;
    B::seed(&device, 7);
    let (eff_loss, eff) = loss_and_grads(&model, &x);
    assert!((math_loss - eff_loss).abs() <= 1e-4 * math_loss.abs().max(1.0));
    // The softmax summed in chunks, in another order: rounding differs, and it carries back
    // through every layer below (1.6e-4 of a gradient's scale seen once at 1e-4). A wrong
    // gradient is off by its own size.
    assert!(assert_same_grads(&model, &eff, &math, 1e-3) > 20);
}
