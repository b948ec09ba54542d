//! The ops whose memory differs between burn and PyTorch, written to keep for backward what PyTorch's
//! kernels keep (`device.memory_model = "pytorch"`). Each computes the same function and gradients as
//! the burn composition it replaces (tests below); only what stays alive until backward differs:
//!
//! | op | burn 0.21 keeps | PyTorch keeps (`tools/autograd/derivatives.yaml`) | here |
//! |---|---|---|---|
//! | ReLU | its input | its output (`threshold_backward(grad, result)`) | its output |
//! | BatchNorm (training) | 3 input-sized tensors (burn-nn) | the input and per-channel statistics (`cudnn_batch_norm_backward`) | the same |
//! | dropout | a float mask | a bool mask (`native_dropout_backward`) | a bool mask |
//!
//! The output of ReLU is what the next convolution keeps anyway, so keeping it costs nothing more: one
//! buffer, two references. Backward recomputes what PyTorch's fused kernels compute on the fly
//! (BatchNorm's normalised input), as short-lived tensors of one layer.
//!
//! The trait is implemented for burn's autodiff backend (custom backward nodes) and, with its
//! defaults (plain computation, nothing is kept without autodiff), for every inner backend we run.

use crate::config::MemoryModel;
use crate::primitive::{float, prim};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{unary, Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::nn::Dropout;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::{BoolTensor, FloatTensor};
use burn::tensor::Distribution;

/// Training BatchNorm's output and the batch statistics it used (mean, biased variance).
pub type NormOutput<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

/// The ops of the `pytorch` memory model. The defaults compute plainly: without autodiff nothing is
/// kept, so every inner backend uses them as they are.
pub trait PytorchOps: Backend + crate::attention::EfficientAttention {
    /// ReLU whose backward reads its output.
    fn relu_keeping_output(x: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::relu(x)
    }

    /// Training BatchNorm of `x` `[N, C, H, W]` with batch statistics, keeping `x` and per-channel
    /// statistics for backward.
    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> NormOutput<Self> {
        let n = norm_forward::<Self>(float(x), float(gamma), float(beta), epsilon);
        (prim(n.y), prim(n.mean), prim(n.var))
    }

    /// Dropout keeping only the bool mask of kept elements (`keep`), scaled by `scale`.
    fn dropout_keeping_mask(
        x: FloatTensor<Self>,
        keep: BoolTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        prim(drop::<Self>(float(x), Tensor::from_primitive(keep), scale))
    }

    /// A one-element root whose backward hands `y` the gradient `dy`, as
    /// `torch.autograd.backward(y, dy)` does: checkpointing runs backward through one recomputed
    /// segment from the gradient its output received, with nothing kept beyond `dy` itself.
    fn backward_seed(y: FloatTensor<Self>, dy: FloatTensor<Self>) -> FloatTensor<Self> {
        let _ = (y, dy);
        unreachable!("backward_seed is only called on an autodiff backend")
    }
}

impl PytorchOps for burn::backend::Flex {}
impl crate::attention::EfficientAttention for burn::backend::Flex {}

/// ReLU as the memory model computes it.
pub fn relu<B: PytorchOps>(x: Tensor<B, 4>, model: MemoryModel) -> Tensor<B, 4> {
    match model {
        MemoryModel::Pytorch => float(B::relu_keeping_output(prim(x))),
        MemoryModel::Burn => burn::tensor::activation::relu(x),
    }
}

/// Dropout as the memory model computes it (only in training: without autodiff it passes through).
pub fn dropout<B: PytorchOps>(d: &Dropout, x: Tensor<B, 4>, model: MemoryModel) -> Tensor<B, 4> {
    if model == MemoryModel::Burn || !B::ad_enabled(&x.device()) || d.prob == 0.0 {
        return d.forward(x);
    }
    let keep_p = 1.0 - d.prob;
    let keep = x
        .random_like(Distribution::Bernoulli(keep_p))
        .greater_elem(0.5);
    float(B::dropout_keeping_mask(
        prim(x),
        keep.into_primitive(),
        1.0 / keep_p,
    ))
}

#[cfg(feature = "cuda")]
impl PytorchOps for burn_cuda::Cuda {}
#[cfg(feature = "cuda")]
impl crate::attention::EfficientAttention for burn_cuda::Cuda {}

#[cfg(feature = "cuda")]
impl PytorchOps for burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8> {}
#[cfg(feature = "cuda")]
impl crate::attention::EfficientAttention
    for burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>
{
}

/// `[C]` to `[1, C, 1, 1]`.
fn per_channel<B: Backend>(t: Tensor<B, 1>) -> Tensor<B, 4> {
    let c = t.dims()[0];
    t.reshape([1, c, 1, 1])
}

/// Mean over batch and pixels, `[N, C, H, W]` to `[C]`, accumulated in f32 (f64 for f64: [`accumulate_type`]) whatever
/// `t`'s precision, as PyTorch's BatchNorm kernels accumulate: the mean over the batch (a few values)
/// in `t`'s precision, then over the pixels in f32, from a copy N times smaller than `t` (PyTorch's
/// kernels hold none). A mean of means over equal groups, so that no partial sum leaves the range of
/// f16 (65504), as a sum over 64k pixels would.
fn channel_mean<B: Backend>(t: Tensor<B, 4>) -> Tensor<B, 1> {
    let c = t.dims()[1];
    let acc = accumulate_type(t.dtype());
    as_dtype(t.mean_dim(0), acc)
        .mean_dim(2)
        .mean_dim(3)
        .reshape([c])
}

/// The precision BatchNorm's statistics are accumulated and kept in for an input of `dtype`:
/// PyTorch's accumulate type, f32 for f32 and lower, f64 for f64.
fn accumulate_type(dtype: burn::tensor::DType) -> burn::tensor::DType {
    match dtype {
        burn::tensor::DType::F64 => burn::tensor::DType::F64,
        _ => burn::tensor::DType::F32,
    }
}

/// What the forward pass of training BatchNorm computes.
struct Norm<B: Backend> {
    y: Tensor<B, 4>,
    mean: Tensor<B, 1>,
    var: Tensor<B, 1>,
    invstd: Tensor<B, 1>,
}

/// `x` in `dtype`: itself when it already is (no cast node in the graph).
pub(crate) fn as_dtype<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    dtype: burn::tensor::DType,
) -> Tensor<B, D> {
    match x.dtype() == dtype {
        true => x,
        false => x.cast(dtype),
    }
}

/// Written so that at most one input-sized temporary lives beside the input and the output (the
/// squared deviations while they are summed), as PyTorch's fused kernel holds none.
///
/// The statistics are accumulated and kept in f32 whatever `x`'s precision (autocast, or pure
/// f16/bf16), as PyTorch's kernels accumulate them; the elementwise normalisation runs in `x`'s
/// precision with the per-channel scale and shift brought to it, so that no input-sized f32 copy
/// exists (PyTorch's kernels hold none).
fn norm_forward<B: Backend>(
    x: Tensor<B, 4>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> Norm<B> {
    let low = x.dtype();
    let (gamma, beta) = (
        as_dtype(gamma, accumulate_type(low)),
        as_dtype(beta, accumulate_type(low)),
    );
    let mean = channel_mean(x.clone());
    let var = channel_mean((x.clone() - per_channel(as_dtype(mean.clone(), low))).powi_scalar(2));
    let invstd = var.clone().add_scalar(epsilon).sqrt().recip();
    let scale = invstd.clone() * gamma;
    let shift = beta - mean.clone() * scale.clone();
    let y = x * per_channel(as_dtype(scale, low)) + per_channel(as_dtype(shift, low));
    Norm {
        y,
        mean,
        var,
        invstd,
    }
}

/// Gradients of training BatchNorm for input, scale and shift, from the input and its statistics.
/// With x̂ = (x − μ)·σ⁻¹, m pixels per channel: dβ = Σdy, dγ = Σ(dy·x̂), and
/// dx = γσ⁻¹·dy − γσ⁻²·dγ/m·(x − μ) − γσ⁻¹·dβ/m, computed as dy·a + x·b + c per channel so that
/// one input-sized temporary lives at a time besides dy and dx, and from means (not sums) so that
/// f16 does not overflow.
fn norm_backward<B: Backend>(
    x: Tensor<B, 4>,
    stats: [Tensor<B, 1>; 3],
    dy: Tensor<B, 4>,
) -> (Tensor<B, 4>, Tensor<B, 1>, Tensor<B, 1>) {
    let [mean, invstd, gamma] = stats;
    // The per-channel sums in f32 (f64 for f64), as the statistics (see `norm_forward`); the elementwise terms
    // in `x`'s precision; each gradient in its tensor's precision.
    let (low, weights) = (x.dtype(), gamma.dtype());
    let gamma = as_dtype(gamma, accumulate_type(low));
    let [n, _, h, w] = x.dims();
    let count = (n * h * w) as f64;
    // Per-channel means of dy and dy·(x − μ): dβ and dγ divided by the pixel count.
    let dy_mean = channel_mean(dy.clone());
    let centred = x.clone() - per_channel(as_dtype(mean.clone(), low));
    let dyx_mean = channel_mean(centred * dy.clone()) * invstd.clone();
    let a = gamma * invstd.clone();
    // σ⁻¹·mean(dy·x̂) before γσ⁻¹: γσ⁻² alone leaves f16's range when a channel's variance is tiny
    // (the ASPP's image pooling sees 4 values per channel at batch 4).
    let b = -(a.clone() * (invstd * dyx_mean.clone()));
    let c = -(a.clone() * dy_mean.clone()) - b.clone() * mean;
    let to_low = |t: Tensor<B, 1>| per_channel(as_dtype(t, low));
    let dx = dy * to_low(a) + x * to_low(b) + to_low(c);
    let (dgamma, dbeta) = (dyx_mean.mul_scalar(count), dy_mean.mul_scalar(count));
    (dx, as_dtype(dgamma, weights), as_dtype(dbeta, weights))
}

fn drop<B: Backend>(x: Tensor<B, 4>, keep: Tensor<B, 4, Bool>, scale: f64) -> Tensor<B, 4> {
    x.mask_fill(keep.bool_not(), 0.0).mul_scalar(scale)
}

impl<B: Backend, C: CheckpointStrategy> PytorchOps for Autodiff<B, C> {
    fn relu_keeping_output(x: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Relu;
        impl<B: Backend> Backward<B, 1> for Relu {
            /// The output.
            type State = FloatTensor<B>;
            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                _: &mut Checkpointer,
            ) {
                let output = ops.state;
                unary::<B, _>(ops.parents, ops.node, grads, |g| {
                    B::relu_backward(output, g)
                });
            }
        }
        let out = B::relu(x.primitive);
        match Relu
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(out.clone(), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> NormOutput<Self> {
        #[derive(Debug)]
        struct BatchNorm;
        impl<B: Backend> Backward<B, 3> for BatchNorm {
            /// The input (by node), and mean, 1/σ and γ (per channel).
            type State = (NodeId, [FloatTensor<B>; 3]);
            fn backward(
                self,
                ops: Ops<Self::State, 3>,
                grads: &mut Gradients,
                c: &mut Checkpointer,
            ) {
                let (input, stats) = ops.state;
                let x = float::<B, 4>(c.retrieve_node_output(input));
                let dy = float::<B, 4>(grads.consume::<B>(&ops.node));
                let (dx, dgamma, dbeta) = norm_backward(x, stats.map(float), dy);
                let [px, pgamma, pbeta] = ops.parents;
                for (node, grad) in [(px, prim(dx)), (pgamma, prim(dgamma)), (pbeta, prim(dbeta))] {
                    if let Some(node) = node {
                        grads.register::<B>(node.id, grad);
                    }
                }
            }
        }
        let nodes = [x.node.clone(), gamma.node.clone(), beta.node.clone()];
        let inner = |x: &FloatTensor<Self>| float::<B, 4>(x.primitive.clone());
        let n = norm_forward::<B>(
            inner(&x),
            float(gamma.primitive.clone()),
            float(beta.primitive),
            epsilon,
        );
        let stats = (
            Self::from_inner(prim(n.mean.clone())),
            Self::from_inner(prim(n.var)),
        );
        let y = match BatchNorm.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(mut prep) => {
                let input = prep.checkpoint(&x);
                let kept = [prim(n.mean), prim(n.invstd), gamma.primitive];
                prep.finish((input, kept), prim(n.y))
            }
            OpsKind::UnTracked(prep) => prep.finish(prim(n.y)),
        };
        (y, stats.0, stats.1)
    }

    fn backward_seed(y: FloatTensor<Self>, dy: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Seed;
        impl<B: Backend> Backward<B, 1> for Seed {
            /// The gradient handed to the parent.
            type State = FloatTensor<B>;
            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                _: &mut Checkpointer,
            ) {
                // The root's own gradient (ones) is not needed.
                let _ = grads.consume::<B>(&ops.node);
                if let [Some(parent)] = ops.parents {
                    grads.register::<B>(parent.id, ops.state);
                }
            }
        }
        let device = B::float_device(&y.primitive);
        let root = B::float_zeros(Shape::new([1]), &device, burn::tensor::FloatDType::F32);
        match Seed
            .prepare::<C>([y.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(dy.primitive, root),
            OpsKind::UnTracked(prep) => prep.finish(root),
        }
    }

    fn dropout_keeping_mask(
        x: FloatTensor<Self>,
        keep: BoolTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Dropout;
        impl<B: Backend> Backward<B, 1> for Dropout {
            /// The mask of kept elements and the scale.
            type State = (BoolTensor<B>, f64);
            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                _: &mut Checkpointer,
            ) {
                let (keep, scale) = ops.state;
                unary::<B, _>(ops.parents, ops.node, grads, |g| {
                    prim(drop::<B>(float(g), Tensor::from_primitive(keep), scale))
                });
            }
        }
        let out = prim(drop::<B>(
            float(x.primitive.clone()),
            Tensor::from_primitive(keep.clone()),
            scale,
        ));
        match Dropout
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((keep, scale), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::nn::DropoutConfig;

    type A = Autodiff<Flex>;

    fn max<const D: usize>(t: Tensor<Flex, D>) -> f32 {
        t.abs().max().into_scalar()
    }

    /// Output and input gradient of `f` on `x`, with a random upstream gradient `r`.
    fn run(
        f: impl Fn(Tensor<A, 4>) -> Tensor<A, 4>,
        x: &Tensor<A, 4>,
        r: &Tensor<A, 4>,
    ) -> (Tensor<Flex, 4>, Tensor<Flex, 4>) {
        let x = x.clone().detach().require_grad();
        let y = f(x.clone());
        let grads = (y.clone() * r.clone()).sum().backward();
        (y.inner(), x.grad(&grads).unwrap())
    }

    fn random(shape: [usize; 4]) -> Tensor<A, 4> {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), &Default::default())
    }

    #[test]
    fn relu_keeping_its_output_computes_what_burn_does() {
        let (x, r) = (random([2, 3, 4, 5]), random([2, 3, 4, 5]));
        let a = run(|x| relu(x, MemoryModel::Burn), &x, &r);
        let b = run(|x| relu(x, MemoryModel::Pytorch), &x, &r);
        assert_eq!(max(a.0 - b.0), 0.0);
        assert_eq!(max(a.1 - b.1), 0.0);
    }

    /// The mask is random, so compare with what dropout must be: kept elements scaled by 1/(1−p),
    /// the rest 0, and the same mask and scale on the gradient.
    #[test]
    fn dropout_keeping_a_bool_mask_is_dropout() {
        let d = DropoutConfig::new(0.25).init();
        let (x, r) = (random([4, 8, 16, 16]), random([4, 8, 16, 16]));
        let (y, g) = run(|x| dropout(&d, x, MemoryModel::Pytorch), &x, &r);
        let kept = y.clone().not_equal_elem(0.0);
        let scale = 1.0 / 0.75;
        let x = x.inner();
        let want_y = x.mask_fill(kept.clone().bool_not(), 0.0).mul_scalar(scale);
        let want_g = r
            .inner()
            .mask_fill(kept.clone().bool_not(), 0.0)
            .mul_scalar(scale);
        assert!(max(y - want_y) < 1e-5);
        assert!(max(g - want_g) < 1e-5);
        let share: f32 = kept.float().mean().into_scalar();
        assert!((share - 0.75).abs() < 0.03, "kept {share}");
    }
}

#[cfg(test)]
mod f16_tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::DType;

    /// In f16, a channel of near-constant values (the ASPP's image pooling sees 4 values per channel
    /// at batch 4) must not overflow BatchNorm's backward: σ⁻² is past f16's 65504 there.
    #[test]
    fn batch_norm_backward_stays_finite_in_f16() {
        type A = Autodiff<Flex>;
        let device = Default::default();
        let x = Tensor::<A, 4>::from_floats([[[[1.0]], [[2.0]]], [[[1.0]], [[2.001]]]], &device)
            .cast(DType::F16)
            .require_grad();
        let gamma = Tensor::<A, 1>::ones([2], &device)
            .cast(DType::F16)
            .require_grad();
        let beta = Tensor::<A, 1>::zeros([2], &device)
            .cast(DType::F16)
            .require_grad();
        let (y, _, _) = A::batch_norm_train(prim(x.clone()), prim(gamma), prim(beta), 1e-5);
        let y: Tensor<A, 4> = float(y);
        let r = Tensor::<A, 4>::from_floats([[[[0.3]], [[-0.2]]], [[[0.1]], [[0.5]]]], &device)
            .cast(DType::F16);
        let grads = (y * r).sum().backward();
        let dx = x.grad(&grads).unwrap().cast(DType::F32);
        let finite: bool = dx.clone().is_finite().all().into_scalar();
        assert!(finite, "{dx}");
    }

    /// Pure f16: the statistics come out in f32 (as PyTorch's kernels accumulate), the output and
    /// every gradient in its own tensor's f16.
    #[test]
    fn batch_norm_statistics_are_f32_in_f16() {
        type A = Autodiff<Flex>;
        let device = Default::default();
        let f16 = |t: Tensor<A, 4>| t.cast(DType::F16).require_grad();
        let x = f16(Tensor::random(
            [2, 3, 4, 4],
            Distribution::Normal(3.0, 2.0),
            &device,
        ));
        let gamma = Tensor::<A, 1>::ones([3], &device)
            .cast(DType::F16)
            .require_grad();
        let beta = Tensor::<A, 1>::zeros([3], &device)
            .cast(DType::F16)
            .require_grad();
        let (y, mean, var) =
            A::batch_norm_train(prim(x.clone()), prim(gamma.clone()), prim(beta), 1e-5);
        let (mean, var): (Tensor<A, 1>, Tensor<A, 1>) = (float(mean), float(var));
        assert_eq!((mean.dtype(), var.dtype()), (DType::F32, DType::F32));
        let y: Tensor<A, 4> = float(y);
        assert_eq!(y.dtype(), DType::F16);
        let grads = y.powi_scalar(2).sum().backward();
        assert_eq!(x.grad(&grads).unwrap().dtype(), DType::F16);
        assert_eq!(gamma.grad(&grads).unwrap().dtype(), DType::F16);
    }
}
