use burn_backend::TensorMetadata;
use burn_backend::ops::ConvOptions;
use burn_std::Shape;
use cubek::convolution::{AcceleratedTileKind, components::ConvSetupError};

#[cfg(feature = "autotune")]
use crate::kernel::conv::{backward_weight::wgrad_autotune, dgrad_autotune};
use crate::{
    CubeRuntime,
    kernel::conv::{
        backward_data::{fallback::conv_data_backward_fallback, implicit_gemm::*},
        backward_weight::{fallback::conv_weight_backward_fallback, implicit_gemm::*},
        forward::implicit_gemm::conv_gemm_simple_sync,
    },
    ops::{permute_nchw_to_nhwc, permute_nchw_to_nhwc_shape, permute_nhwc_to_nchw},
    tensor::CubeTensor,
};

use super::conv_direct;
#[cfg(feature = "autotune")]
use super::forward::conv_autotune;

/// The strategy to be used when launching a convolution kernel.
pub enum ConvStrategy {
    /// A simple direct convolution.
    Direct,
    #[cfg(feature = "autotune")]
    /// Using autotune to choose the best kernel based on runtime information.
    Autotune,
    /// Implicit GEMM implementation of convolution. Lower memory usage but requires CMMA and
    /// has constraints on tensor shape.
    ImplicitGemm,
}

impl Default for ConvStrategy {
    fn default() -> Self {
        // if autotune is enabled, default to autotune
        #[cfg(feature = "autotune")]
        return ConvStrategy::Autotune;

        // oom-bisect patch: without autotune, implicit GEMM on tensor cores (falling back to the
        // direct kernel for shapes it cannot take), 10-20x faster training steps on an H200 than
        // upstream's default, the direct kernel, which `OOM_BISECT_CONV=direct` restores.
        #[cfg(not(feature = "autotune"))]
        if conv_direct_requested() {
            ConvStrategy::Direct
        } else {
            ConvStrategy::ImplicitGemm
        }
    }
}

/// oom-bisect patch: whether `OOM_BISECT_CONV=direct` is set (read once per process).
#[cfg(not(feature = "autotune"))]
fn conv_direct_requested() -> bool {
    static DIRECT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DIRECT.get_or_init(|| std::env::var("OOM_BISECT_CONV").is_ok_and(|v| v == "direct"))
}

/// Performs an N-dimensional convolution with the given strategy
///
/// * `input` - The input feature map
/// * `weight` - The weights (filter) applied to each kernel
/// * `bias` - The bias added to each channel
/// * `options` - The options to use for the convolution
/// * `strategy` - The convolution algorithm to use. Autotune will pick the fastest available option.
pub fn conv_forward<R: CubeRuntime, const N: usize>(
    input: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: Option<CubeTensor<R>>,
    options: ConvOptions<N>,
    strategy: ConvStrategy,
) -> Result<CubeTensor<R>, ConvSetupError> {
    let (x, w) = (input.shape(), weight.shape());
    let dtype = input.dtype;
    let input = permute_nchw_to_nhwc(input);
    let weight = permute_nchw_to_nhwc(weight);

    let out = conv_forward_nhwc(input, weight, bias, options.clone(), strategy)?;

    let out = permute_nhwc_to_nchw(out);
    note_workspace(&out.client, 0, [&x, &w, &out.shape()], &options, dtype);
    Ok(out)
}

/// oom-bisect patch: the workspace PyTorch's cuDNN path asks for at this convolution, once the
/// result exists: asked of the device and released at once, the pool serving it engine after
/// engine as PyTorch does (`cubecl_runtime::memory_management::oom_bisect::conv_workspace`).
/// `pass`: 0 forward, 1 data gradient, 2 weight gradient; `shapes`: x, w, y in NCHW.
fn note_workspace<R: CubeRuntime, const N: usize>(
    client: &cubecl::client::ComputeClient<R>,
    pass: u8,
    shapes: [&Shape; 3],
    options: &ConvOptions<N>,
    dtype: burn_std::DType,
) {
    use cubecl_runtime::memory_management::oom_bisect::{Conv, conv_workspace};
    let dims = |s: &Shape| -> Option<[usize; 4]> { s.as_slice().try_into().ok() };
    let two = |v: &[usize; N]| -> Option<[usize; 2]> { v.as_slice().try_into().ok() };
    let (Some(x), Some(w), Some(y)) = (dims(shapes[0]), dims(shapes[1]), dims(shapes[2])) else {
        return;
    };
    let (Some(stride), Some(padding), Some(dilation)) = (
        two(&options.stride),
        two(&options.padding),
        two(&options.dilation),
    ) else {
        return;
    };
    let asked = conv_workspace(&Conv {
        pass,
        x,
        w,
        y,
        stride,
        padding,
        dilation,
        groups: options.groups,
        dtype_bytes: dtype.size() as u8,
        bf16: dtype == burn_std::DType::BF16,
    });
    if let Some(request) = asked {
        drop(client.oom_bisect_workspace(request));
    }
}

/// Performs an N-dimensional convolution with the given strategy on NHWC inputs/outputs
///
/// * `input` - The input feature map
/// * `weight` - The weights (filter) applied to each kernel
/// * `bias` - The bias added to each channel
/// * `options` - The options to use for the convolution
/// * `strategy` - The convolution algorithm to use. Autotune will pick the fastest available option.
pub fn conv_forward_nhwc<R: CubeRuntime, const N: usize>(
    input: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: Option<CubeTensor<R>>,
    options: ConvOptions<N>,
    strategy: ConvStrategy,
) -> Result<CubeTensor<R>, ConvSetupError> {
    match strategy {
        ConvStrategy::Direct => conv_direct::<R, N>(input, weight, bias, options),
        #[cfg(feature = "autotune")]
        ConvStrategy::Autotune => Ok(conv_autotune::<R, N>(input, weight, bias, options)),
        ConvStrategy::ImplicitGemm => {
            if options.groups != 1 {
                conv_direct::<R, N>(input, weight, bias, options)
            } else {
                // oom-bisect patch: shapes the tiled kernel refuses go to the direct kernel.
                match conv_gemm_simple_sync::<R, N>(
                    input.clone(),
                    weight.clone(),
                    bias.clone(),
                    options.clone(),
                    AcceleratedTileKind::Cmma,
                ) {
                    Ok(out) => Ok(out),
                    Err(_) => conv_direct::<R, N>(input, weight, bias, options),
                }
            }
        }
    }
}

/// Performs an N-dimensional convolution backwards pass with regard to weight, with the given strategy
///
/// * `input` - The input feature map
/// * `out_grad` - The output gradients
/// * `weight_shape` - The shape of the weights/weight gradients
/// * `options` - The options used for the convolution
/// * `strategy` - The convolution algorithm to use. Autotune will pick the fastest available option.
pub fn conv_weight_backward<R: CubeRuntime, const N: usize>(
    input: CubeTensor<R>,
    out_grad: CubeTensor<R>,
    weight_shape: Shape,
    options: ConvOptions<N>,
    strategy: ConvStrategy,
) -> Result<CubeTensor<R>, ConvSetupError> {
    let (x, y) = (input.shape(), out_grad.shape());
    let (dw, dtype, noted) = (weight_shape.clone(), input.dtype, options.clone());
    let input = permute_nchw_to_nhwc(input);
    let out_grad = permute_nchw_to_nhwc(out_grad);
    let weight_shape = permute_nchw_to_nhwc_shape(weight_shape);

    let weight_grad = match strategy {
        ConvStrategy::Direct => {
            conv_weight_backward_fallback::<R, N>(input, out_grad, weight_shape, options)
        }
        #[cfg(feature = "autotune")]
        ConvStrategy::Autotune => Ok(wgrad_autotune::<R, N>(
            input,
            out_grad,
            weight_shape,
            options,
        )),
        ConvStrategy::ImplicitGemm => {
            if options.groups != 1 {
                conv_weight_backward_fallback::<R, N>(input, out_grad, weight_shape, options)
            } else {
                match wgrad_gemm_simple_sync::<R, N>(
                    input.clone(),
                    out_grad.clone(),
                    weight_shape.clone(),
                    options.clone(),
                    AcceleratedTileKind::Cmma,
                ) {
                    Ok(out) => Ok(out),
                    Err(_) => conv_weight_backward_fallback::<R, N>(
                        input,
                        out_grad,
                        weight_shape,
                        options,
                    ),
                }
            }
        }
    }?;

    let weight_grad = permute_nhwc_to_nchw(weight_grad);
    note_workspace(&weight_grad.client, 2, [&x, &dw, &y], &noted, dtype);
    Ok(weight_grad)
}

/// Performs an N-dimensional convolution backwards data pass with the given strategy
///
/// * `input` - The input feature map
/// * `weight` - The weights (filter) applied to each kernel
/// * `in_shape` - The shape of the input to the layer
/// * `options` - The options to use for the convolution
/// * `strategy` - The convolution algorithm to use. Autotune will pick the fastest available option.
pub fn conv_data_backward<R: CubeRuntime, const N: usize>(
    out_grad: CubeTensor<R>,
    weights: CubeTensor<R>,
    in_shape: Shape,
    options: ConvOptions<N>,
    strategy: ConvStrategy,
) -> Result<CubeTensor<R>, ConvSetupError> {
    let (dx, w) = (in_shape.clone(), weights.shape());
    let (y, dtype, noted) = (out_grad.shape(), out_grad.dtype, options.clone());
    let out_grad = permute_nchw_to_nhwc(out_grad);
    let weights = permute_nchw_to_nhwc(weights);
    let in_shape = permute_nchw_to_nhwc_shape(in_shape);

    let weight_grad = match strategy {
        ConvStrategy::Direct => {
            conv_data_backward_fallback::<R, N>(out_grad, weights, in_shape, options)?
        }
        #[cfg(feature = "autotune")]
        ConvStrategy::Autotune => dgrad_autotune::<R, N>(out_grad, weights, in_shape, options),
        ConvStrategy::ImplicitGemm => {
            if options.groups != 1 || options.stride.iter().any(|&s| s != 1) {
                conv_data_backward_fallback::<R, N>(out_grad, weights, in_shape, options)?
            } else {
                match dgrad_gemm_simple_sync::<R, N>(
                    out_grad.clone(),
                    weights.clone(),
                    in_shape.clone(),
                    options.clone(),
                    AcceleratedTileKind::Cmma,
                ) {
                    Ok(out) => out,
                    Err(_) => {
                        conv_data_backward_fallback::<R, N>(out_grad, weights, in_shape, options)?
                    }
                }
            }
        }
    };

    let input_grad = permute_nhwc_to_nchw(weight_grad);
    note_workspace(&input_grad.client, 1, [&dx, &w, &y], &noted, dtype);
    Ok(input_grad)
}
