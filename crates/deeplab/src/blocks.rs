//! The building blocks shared by the backbone, the ASPP and the heads: conv + BN + ReLU, its
//! depthwise-separable variant, and torchvision's two ResNet blocks.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, PaddingConfig2d};
use burn::prelude::*;
use std::cell::Cell;

use crate::config::{BatchNormKind, MemoryModel};
use crate::primitive::{float, prim};
use crate::pytorch::{as_dtype, PytorchOps};

/// A bias-free convolution, as every convolution followed by BatchNorm in torchvision.
pub fn conv(
    channels: [usize; 2],
    kernel: usize,
    stride: usize,
    dilation: usize,
    groups: usize,
) -> Conv2dConfig {
    let pad = dilation * (kernel - 1) / 2;
    Conv2dConfig::new(channels, [kernel, kernel])
        .with_stride([stride, stride])
        .with_dilation([dilation, dilation])
        .with_groups(groups)
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(false)
}

/// `c.forward(x)`, or under autocast (`x` in a lower precision than the f32 weights) the same
/// convolution on a copy of the weights cast to `x`'s precision: PyTorch's autocast runs
/// convolutions so, and backward keeps the cast copy, as PyTorch's does. Gradients reach the f32
/// weights through the cast.
pub fn run_conv<B: Backend>(c: &Conv2d<B>, x: Tensor<B, 4>) -> Tensor<B, 4> {
    let dtype = x.dtype();
    let weight = c.weight.val();
    if weight.dtype() == dtype {
        return c.forward(x);
    }
    // Every convolution here pads symmetrically (or not at all).
    let pad = |p: &PaddingConfig2d| match p {
        PaddingConfig2d::Explicit(top, left, _, _) => [*top, *left],
        _ => [0, 0],
    };
    let options =
        burn::tensor::ops::ConvOptions::new(c.stride, pad(&c.padding), c.dilation, c.groups);
    burn::tensor::module::conv2d(
        x,
        weight.cast(dtype),
        c.bias.as_ref().map(|b| b.val().cast(dtype)),
        options,
    )
}

/// How BatchNorm (and the ReLU after it) is computed in training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NormKind {
    /// burn-nn's module; ReLU as burn computes it.
    #[default]
    Burn,
    /// `model.batch_norm = "lean"` under the burn memory model.
    Lean,
    /// PyTorch's (see [`crate::pytorch`]).
    Pytorch,
}

impl NormKind {
    pub fn of(batch_norm: BatchNormKind, memory: MemoryModel) -> NormKind {
        match (memory, batch_norm) {
            (MemoryModel::Pytorch, _) => NormKind::Pytorch,
            (MemoryModel::Burn, BatchNormKind::Burn) => NormKind::Burn,
            (MemoryModel::Burn, BatchNormKind::Lean) => NormKind::Lean,
        }
    }

    fn memory_model(self) -> MemoryModel {
        match self {
            NormKind::Pytorch => MemoryModel::Pytorch,
            NormKind::Burn | NormKind::Lean => MemoryModel::Burn,
        }
    }
}

thread_local! {
    /// How the model being built on this thread computes BatchNorm (see `building_with`).
    static NORM_KIND: Cell<NormKind> = const { Cell::new(NormKind::Burn) };
}

/// Runs `build` with every `bn` it creates of `kind`: the model reads its options once, here,
/// instead of threading them through every block's constructor.
pub(crate) fn building_with<T>(kind: NormKind, build: impl FnOnce() -> T) -> T {
    let before = NORM_KIND.replace(kind);
    let out = build();
    NORM_KIND.set(before);
    out
}

pub fn bn<B: Backend>(channels: usize, device: &B::Device) -> Norm<B> {
    Norm {
        bn: BatchNormConfig::new(channels).init(device),
        kind: NORM_KIND.get(),
    }
}

/// torchvision's `BatchNorm2d`: burn-nn's module (its parameters, running statistics and
/// inference path), trained as burn-nn computes it, lean, or as PyTorch keeps it (see [`NormKind`]).
#[derive(Module, Debug)]
pub struct Norm<B: Backend> {
    pub bn: BatchNorm<B>,
    #[module(skip)]
    pub kind: NormKind,
}

impl<B: PytorchOps> Norm<B> {
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        match (B::ad_enabled(&x.device()), self.kind) {
            (true, NormKind::Lean) => self.forward_lean(x),
            (true, NormKind::Pytorch) => self.forward_pytorch(x),
            // burn-nn's module (inference, or trained as burn computes it) wants one precision:
            // under autocast it runs in its weights' f32.
            _ => {
                let (low, weights) = (x.dtype(), self.bn.gamma.val().dtype());
                as_dtype(self.bn.forward(as_dtype(x, weights)), low)
            }
        }
    }

    /// The ReLU that follows this BatchNorm (or a residual sum after it), as its memory model keeps it.
    pub fn relu(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        crate::pytorch::relu(x, self.kind.memory_model())
    }

    /// One backward node keeping the input and per-channel statistics (see [`crate::pytorch`]).
    fn forward_pytorch(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let bn = &self.bn;
        // Under autocast `x` is in the low precision and the weights in f32: the op computes in
        // f32 and returns `y` in `x`'s precision.
        let (y, mean, var) = B::batch_norm_train(
            prim(x),
            prim(bn.gamma.val()),
            prim(bn.beta.val()),
            bn.epsilon,
        );
        self.update_running(float(mean), float(var));
        float(y)
    }

    /// burn-nn's running-statistics update, from this batch's mean and biased variance `[C]`.
    fn update_running(&self, mean: Tensor<B, 1>, var: Tensor<B, 1>) {
        let bn = &self.bn;
        let m = bn.momentum;
        let device = mean.device();
        let running_mean = bn.running_mean.value_sync().to_device(&device);
        let running_var = bn.running_var.value_sync().to_device(&device);
        let (mean, var) = (
            as_dtype(mean, running_mean.dtype()),
            as_dtype(var, running_var.dtype()),
        );
        bn.running_mean.update(
            running_mean
                .mul_scalar(1.0 - m)
                .add(mean.detach().mul_scalar(m))
                .detach(),
        );
        bn.running_var.update(
            running_var
                .mul_scalar(1.0 - m)
                .add(var.detach().mul_scalar(m))
                .detach(),
        );
    }

    /// burn-nn's training forward computes `x − mean` twice and keeps three input-sized tensors for
    /// backward (`sub`, `square` and the scaling each keep an operand); PyTorch keeps one. This is
    /// the same function, the same gradient and the same running-statistics update, written so that
    /// the one centred tensor is what backward keeps (`cargo run -p oom-trial --example
    /// saved_bytes` measures both).
    fn forward_lean(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let bn = &self.bn;
        let [n, c, h, w] = x.dims();
        let per_channel = |t: Tensor<B, 4>| {
            t.swap_dims(0, 1)
                .reshape([c, n * h * w])
                .mean_dim(1)
                .reshape([1, c, 1, 1])
        };
        let mean = per_channel(x.clone());
        let centred = x - mean.clone();
        let var = per_channel(centred.clone().powi_scalar(2));
        self.update_running(mean.reshape([c]), var.clone().reshape([c]));
        let dtype = centred.dtype();
        let scale =
            as_dtype(bn.gamma.val(), dtype).reshape([1, c, 1, 1]) / (var + bn.epsilon).sqrt();
        centred * scale + as_dtype(bn.beta.val(), dtype).reshape([1, c, 1, 1])
    }
}

/// `Conv2d → BatchNorm → ReLU`, torchvision's `Sequential(conv, bn, relu)`.
#[derive(Module, Debug)]
pub struct ConvBnRelu<B: Backend> {
    pub conv: Conv2d<B>,
    pub bn: Norm<B>,
}

impl<B: PytorchOps> ConvBnRelu<B> {
    pub fn new(config: Conv2dConfig, device: &B::Device) -> Self {
        let out = config.channels[1];
        ConvBnRelu {
            conv: config.init(device),
            bn: bn(out, device),
        }
    }

    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.bn.relu(self.bn.forward(run_conv(&self.conv, x)))
    }
}

/// The paper's atrous separable convolution: a depthwise 3×3 (dilated) and a pointwise 1×1, each
/// followed by BatchNorm and ReLU (Chen et al. 2018, section 3.2, Xception style).
#[derive(Module, Debug)]
pub struct SeparableConv<B: Backend> {
    pub depthwise: ConvBnRelu<B>,
    pub pointwise: ConvBnRelu<B>,
}

/// A 3×3 convolution block of the ASPP or the decoder, plain or depthwise-separable.
// Built once per model; boxing would only add indirection to burn's derived Module impl.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Conv3x3<B: Backend> {
    Plain(ConvBnRelu<B>),
    Separable(SeparableConv<B>),
}

impl<B: PytorchOps> Conv3x3<B> {
    pub fn new(channels: [usize; 2], dilation: usize, separable: bool, device: &B::Device) -> Self {
        let [cin, cout] = channels;
        if separable {
            Conv3x3::Separable(SeparableConv {
                depthwise: ConvBnRelu::new(conv([cin, cin], 3, 1, dilation, cin), device),
                pointwise: ConvBnRelu::new(conv([cin, cout], 1, 1, 1, 1), device),
            })
        } else {
            Conv3x3::Plain(ConvBnRelu::new(
                conv([cin, cout], 3, 1, dilation, 1),
                device,
            ))
        }
    }

    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        match self {
            Conv3x3::Plain(c) => c.forward(x),
            Conv3x3::Separable(s) => s.pointwise.forward(s.depthwise.forward(x)),
        }
    }
}

/// torchvision's `downsample`: a strided 1×1 convolution and BatchNorm on the identity path.
#[derive(Module, Debug)]
pub struct Downsample<B: Backend> {
    pub conv: Conv2d<B>,
    pub bn: Norm<B>,
}

impl<B: PytorchOps> Downsample<B> {
    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.bn.forward(run_conv(&self.conv, x))
    }
}

/// The shape of one residual block, as torchvision's `_make_layer` computes it.
#[derive(Debug, Clone, Copy)]
pub struct BlockSpec {
    pub inplanes: usize,
    pub planes: usize,
    pub stride: usize,
    pub dilation: usize,
    pub downsample: bool,
}

/// torchvision's `BasicBlock` (ResNet-18/34). torchvision refuses dilation here; we dilate both 3×3
/// convolutions so that output strides 8 and 16 work on the small backbones too.
#[derive(Module, Debug)]
pub struct BasicBlock<B: Backend> {
    pub conv1: Conv2d<B>,
    pub bn1: Norm<B>,
    pub conv2: Conv2d<B>,
    pub bn2: Norm<B>,
    pub downsample: Option<Downsample<B>>,
}

/// torchvision's `Bottleneck` (ResNet-50 and deeper, stride on the 3×3 as in ResNet v1.5).
#[derive(Module, Debug)]
pub struct Bottleneck<B: Backend> {
    pub conv1: Conv2d<B>,
    pub bn1: Norm<B>,
    pub conv2: Conv2d<B>,
    pub bn2: Norm<B>,
    pub conv3: Conv2d<B>,
    pub bn3: Norm<B>,
    pub downsample: Option<Downsample<B>>,
}

#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Block<B: Backend> {
    Basic(BasicBlock<B>),
    Bottleneck(Bottleneck<B>),
}

impl<B: PytorchOps> Block<B> {
    pub fn new(spec: BlockSpec, bottleneck: bool, device: &B::Device) -> Self {
        let BlockSpec {
            inplanes,
            planes,
            stride,
            dilation,
            downsample,
        } = spec;
        let expansion = if bottleneck { 4 } else { 1 };
        let downsample = downsample.then(|| Downsample {
            conv: conv([inplanes, planes * expansion], 1, stride, 1, 1).init(device),
            bn: bn(planes * expansion, device),
        });
        if bottleneck {
            Block::Bottleneck(Bottleneck {
                conv1: conv([inplanes, planes], 1, 1, 1, 1).init(device),
                bn1: bn(planes, device),
                conv2: conv([planes, planes], 3, stride, dilation, 1).init(device),
                bn2: bn(planes, device),
                conv3: conv([planes, planes * 4], 1, 1, 1, 1).init(device),
                bn3: bn(planes * 4, device),
                downsample,
            })
        } else {
            Block::Basic(BasicBlock {
                conv1: conv([inplanes, planes], 3, stride, dilation, 1).init(device),
                bn1: bn(planes, device),
                conv2: conv([planes, planes], 3, 1, dilation, 1).init(device),
                bn2: bn(planes, device),
                downsample,
            })
        }
    }

    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        match self {
            Block::Basic(b) => {
                let identity = match &b.downsample {
                    Some(d) => d.forward(x.clone()),
                    None => x.clone(),
                };
                let out = b.bn1.relu(b.bn1.forward(run_conv(&b.conv1, x)));
                let out = b.bn2.forward(run_conv(&b.conv2, out));
                b.bn2.relu(out + identity)
            }
            Block::Bottleneck(b) => {
                let identity = match &b.downsample {
                    Some(d) => d.forward(x.clone()),
                    None => x.clone(),
                };
                let out = b.bn1.relu(b.bn1.forward(run_conv(&b.conv1, x)));
                let out = b.bn2.relu(b.bn2.forward(run_conv(&b.conv2, out)));
                let out = b.bn3.forward(run_conv(&b.conv3, out));
                b.bn3.relu(out + identity)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::Distribution;

    type B = Autodiff<Flex>;

    fn max<const D: usize>(t: Tensor<Flex, D>) -> f32 {
        t.abs().max().into_scalar()
    }

    /// Lean, PyTorch's and burn-nn's BatchNorm (each followed by its ReLU): same output, same input
    /// and parameter gradients, same running statistics afterwards.
    #[test]
    fn every_batch_norm_computes_what_burn_nn_does() {
        let device = Default::default();
        let base: BatchNorm<B> = BatchNormConfig::new(6).init(&device);
        // Each its own copy (a loaded record), so that each updates its own running statistics.
        let norm = |kind| Norm {
            bn: BatchNormConfig::new(6)
                .init::<B>(&device)
                .load_record(base.clone().into_record()),
            kind,
        };
        let x = Tensor::<B, 4>::random([3, 6, 5, 4], Distribution::Normal(1.0, 2.0), &device);
        let r = Tensor::<B, 4>::random([3, 6, 5, 4], Distribution::Default, &device);
        let run = |n: &Norm<B>| {
            let x = x.clone().detach().require_grad();
            let y = n.relu(n.forward(x.clone()));
            let grads = (y.clone() * r.clone()).sum().backward();
            let g = |p: &burn::module::Param<Tensor<B, 1>>| p.grad(&grads).unwrap();
            (
                y.inner(),
                x.grad(&grads).unwrap(),
                g(&n.bn.gamma),
                g(&n.bn.beta),
            )
        };
        let plain = norm(NormKind::Burn);
        let want = run(&plain);
        for kind in [NormKind::Lean, NormKind::Pytorch] {
            let n = norm(kind);
            let got = run(&n);
            assert!(max(want.0.clone() - got.0) < 1e-5, "{kind:?}: output");
            assert!(
                max(want.1.clone() - got.1) < 1e-5,
                "{kind:?}: input gradient"
            );
            assert!(
                max(want.2.clone() - got.2) < 1e-4,
                "{kind:?}: gamma gradient"
            );
            assert!(
                max(want.3.clone() - got.3) < 1e-4,
                "{kind:?}: beta gradient"
            );
            for (a, b) in [
                (&plain.bn.running_mean, &n.bn.running_mean),
                (&plain.bn.running_var, &n.bn.running_var),
            ] {
                let d: f32 = (a.value_sync() - b.value_sync()).abs().max().into_scalar();
                assert!(d < 1e-5, "{kind:?}: running statistics differ by {d}");
            }
            // Updated (the input's mean is about 1, the initial running mean 0).
            let m: f32 = n.bn.running_mean.value_sync().mean().into_scalar();
            assert!(m > 0.05, "{kind:?}: {m}");
        }
    }
}
