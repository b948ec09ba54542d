//! The building blocks shared by the backbone, the ASPP and the heads: conv + BN + ReLU, its
//! depthwise-separable variant, and torchvision's two ResNet blocks.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::activation::relu;

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

pub fn bn<B: Backend>(channels: usize, device: &B::Device) -> BatchNorm<B> {
    BatchNormConfig::new(channels).init(device)
}

/// `Conv2d → BatchNorm → ReLU`, torchvision's `Sequential(conv, bn, relu)`.
#[derive(Module, Debug)]
pub struct ConvBnRelu<B: Backend> {
    pub conv: Conv2d<B>,
    pub bn: BatchNorm<B>,
}

impl<B: Backend> ConvBnRelu<B> {
    pub fn new(config: Conv2dConfig, device: &B::Device) -> Self {
        let out = config.channels[1];
        ConvBnRelu {
            conv: config.init(device),
            bn: bn(out, device),
        }
    }

    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        relu(self.bn.forward(self.conv.forward(x)))
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

impl<B: Backend> Conv3x3<B> {
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
    pub bn: BatchNorm<B>,
}

impl<B: Backend> Downsample<B> {
    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.bn.forward(self.conv.forward(x))
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
    pub bn1: BatchNorm<B>,
    pub conv2: Conv2d<B>,
    pub bn2: BatchNorm<B>,
    pub downsample: Option<Downsample<B>>,
}

/// torchvision's `Bottleneck` (ResNet-50 and deeper, stride on the 3×3 as in ResNet v1.5).
#[derive(Module, Debug)]
pub struct Bottleneck<B: Backend> {
    pub conv1: Conv2d<B>,
    pub bn1: BatchNorm<B>,
    pub conv2: Conv2d<B>,
    pub bn2: BatchNorm<B>,
    pub conv3: Conv2d<B>,
    pub bn3: BatchNorm<B>,
    pub downsample: Option<Downsample<B>>,
}

#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Block<B: Backend> {
    Basic(BasicBlock<B>),
    Bottleneck(Bottleneck<B>),
}

impl<B: Backend> Block<B> {
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
                let out = relu(b.bn1.forward(b.conv1.forward(x)));
                let out = b.bn2.forward(b.conv2.forward(out));
                relu(out + identity)
            }
            Block::Bottleneck(b) => {
                let identity = match &b.downsample {
                    Some(d) => d.forward(x.clone()),
                    None => x.clone(),
                };
                let out = relu(b.bn1.forward(b.conv1.forward(x)));
                let out = relu(b.bn2.forward(b.conv2.forward(out)));
                let out = b.bn3.forward(b.conv3.forward(out));
                relu(out + identity)
            }
        }
    }
}
