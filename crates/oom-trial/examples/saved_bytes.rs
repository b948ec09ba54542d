//! What burn's autodiff keeps for backward, op by op, on the CPU backend under the counting allocator:
//! `cargo run --release -p oom-trial --example saved_bytes`. Each line is the growth of live memory
//! after running one op (or module) forward on a tracked input and dropping everything but its output,
//! in units of the input's size F; the output itself is subtracted, so what remains is what the
//! autodiff graph holds for backward. Used to explain why burn's peaks are about 2x PyTorch's
//! and to check the pytorch memory model's ops
//! (docs/fidelity.md).

use burn::backend::{Autodiff, Flex};
use burn::nn::conv::Conv2dConfig;
use burn::nn::{BatchNormConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::Distribution;
use deeplab::blocks::{Norm, NormKind};
use deeplab::pytorch::dropout;
use deeplab::resize::resize;
use deeplab::MemoryModel;

#[global_allocator]
static ALLOC: oom_trial::alloc::CountingAlloc = oom_trial::alloc::CountingAlloc;

type B = Autodiff<Flex>;

const N: usize = 4;
const C: usize = 256;
const H: usize = 32;
const F: f64 = (N * C * H * H * 4) as f64;

fn input(device: &burn::tensor::Device<B>) -> Tensor<B, 4> {
    Tensor::<B, 4>::random([N, C, H, H], Distribution::Normal(0.0, 1.0), device).require_grad()
}

/// Live bytes `f` leaves behind besides its output, in units of F: what the autodiff graph keeps for
/// backward (the input counts when it is kept; an op that keeps nothing shows 0).
fn held(name: &str, f: impl Fn(Tensor<B, 4>) -> Tensor<B, 4>) {
    let device = Default::default();
    let x = input(&device);
    let before = oom_trial::alloc::in_use() as f64 - F;
    let y = f(x);
    let out = y.shape().num_elements() as f64 * 4.0;
    let after = oom_trial::alloc::in_use() as f64;
    println!("  {name:<46} {:>5.2} F", (after - before - out) / F);
    drop(y);
}

fn main() {
    let device = Default::default();
    println!(
        "kept for backward by burn 0.21 autodiff (burn-flex), in F = one {N}x{C}x{H}x{H} f32 tensor ({:.0} KiB):",
        F / 1024.0
    );
    held("relu", relu);
    held("x * 2 (mul_scalar)", |x| x.mul_scalar(2.0));
    held("x - mean (sub, broadcast)", |x| {
        let m = x.clone().mean_dim(0);
        x - m
    });
    held("square", |x| x.powi_scalar(2));
    held("x / std(x) (var, sqrt, div)", |x| {
        let s = x.clone().var(0).sqrt();
        x / s
    });
    let bn = BatchNormConfig::new(C).init::<B>(&device);
    // The model's lean BatchNorm (`model.batch_norm = "lean"`) and PyTorch's (the pytorch memory
    // model) around the same module.
    let norm = |kind| Norm {
        bn: bn.clone(),
        kind,
    };
    let (lean, torch) = (norm(NormKind::Lean), norm(NormKind::Pytorch));
    held("burn-nn BatchNorm (train)", |x| bn.forward(x));
    held("burn-nn BatchNorm + relu", |x| relu(bn.forward(x)));
    let conv = Conv2dConfig::new([C, C], [3, 3])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .with_bias(false)
        .init::<B>(&device);
    // The CPU convolution keeps a scratch buffer after its first call: make that call outside.
    drop(conv.forward(input(&device)));
    held("conv 3x3 + BatchNorm + relu", |x| {
        relu(bn.forward(conv.forward(x)))
    });
    held("BatchNorm written lean (one tensor kept)", |x| {
        lean.forward(x)
    });
    held("conv 3x3 + lean BatchNorm + relu", |x| {
        relu(lean.forward(conv.forward(x)))
    });
    println!("the same ops as the pytorch memory model computes them:");
    held("relu keeping its output", |x| torch.relu(x));
    held("BatchNorm keeping its input", |x| torch.forward(x));
    held("conv 3x3 + BatchNorm + relu (PyTorch's)", |x| {
        torch.relu(torch.forward(conv.forward(x)))
    });
    // Both memory models: products with constant matrices keep only the matrices.
    held("bilinear resize x2 (matrix products)", |x| {
        resize(x, [2 * H, 2 * H])
    });
    let drop = burn::nn::DropoutConfig::new(0.5).init();
    held("dropout, burn-nn's", |x| {
        dropout(&drop, x, MemoryModel::Burn)
    });
    held("dropout keeping a bool mask", |x| {
        dropout(&drop, x, MemoryModel::Pytorch)
    });
    // That each computes what burn's does (output, gradients, running statistics) is the unit tests
    // `deeplab::blocks::tests::every_batch_norm_computes_what_burn_nn_does` and `deeplab::pytorch::tests`.
}
