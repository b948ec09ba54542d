//! Bilinear resize with `align_corners = False`, as torchvision's DeepLab calls `F.interpolate`.

use burn::prelude::*;

/// The `[out, in]` matrix of 1-D linear interpolation with `align_corners = False` (PyTorch's
/// `area_pixel_compute_source_index`: source = (dst + 0.5) · in/out − 0.5, clamped at 0).
fn interpolation_matrix(out: usize, inp: usize) -> Vec<f32> {
    let mut m = vec![0.0f32; out * inp];
    let scale = inp as f32 / out as f32;
    for o in 0..out {
        let src = ((o as f32 + 0.5) * scale - 0.5).max(0.0);
        let i0 = (src.floor() as usize).min(inp - 1);
        let i1 = (i0 + 1).min(inp - 1);
        let l1 = src - i0 as f32;
        m[o * inp + i0] += 1.0 - l1;
        m[o * inp + i1] += l1;
    }
    m
}

/// Bilinear resize with `align_corners = False`, as torchvision's `F.interpolate` calls in DeepLab.
///
/// Written as two matrix products (rows, then columns) rather than burn's `interpolate`: burn-cubecl
/// 0.21 has no backward for bilinear interpolation (a panic on the device thread, seen on the H200),
/// and the same code must train on every backend. The result is the same bilinear map; backward keeps
/// only the constant matrices (the products' other operands), as PyTorch's kernel keeps only sizes.
pub fn resize<B: Backend>(x: Tensor<B, 4>, size: [usize; 2]) -> Tensor<B, 4> {
    let [_, _, h, w] = x.dims();
    if [h, w] == size {
        return x;
    }
    let device = x.device();
    let dtype = x.dtype();
    let matrix = |out: usize, inp: usize| interpolation::<B>(out, inp, &device).cast(dtype);
    // From 1×1 (the ASPP's image pooling) bilinear is a broadcast.
    if h == 1 && w == 1 {
        let [b, c, _, _] = x.dims();
        return x.expand([b, c, size[0], size[1]]);
    }
    let x = if w == size[1] {
        x
    } else {
        // [B, C, H, W] · [W, W'] -> [B, C, H, W']
        x.matmul(matrix(size[1], w).transpose().unsqueeze::<4>())
    };
    if h == size[0] {
        x
    } else {
        // [H', H] · [B, C, H, W'] -> [B, C, H', W']
        matrix(size[0], h).unsqueeze::<4>().matmul(x)
    }
}

/// The `[out, in]` linear interpolation matrix on `device`, in f32.
///
/// The device first finishes what was queued before. burn-fusion sends a tensor made from host data
/// to the device from the calling thread, while its own thread still sends the queued operations:
/// without the wait, where the matrix's request falls among theirs depends on timing, and so does
/// the stream of requests a trial replays (it differed run to run by the matrices' place).
fn interpolation<B: Backend>(out: usize, inp: usize, device: &B::Device) -> Tensor<B, 2> {
    // A failed sync is the device's failure, which the next operation reports.
    let _ = B::sync(device);
    Tensor::from_data(
        TensorData::new(interpolation_matrix(out, inp), [out, inp]),
        device,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::module::interpolate;
    use burn::tensor::ops::{InterpolateMode, InterpolateOptions};

    /// The matrix form gives burn's own bilinear interpolation (align_corners = false).
    #[test]
    fn resize_matches_bilinear() {
        let device = Default::default();
        let x =
            Tensor::<Flex, 4>::random([2, 3, 5, 7], burn::tensor::Distribution::Default, &device);
        for size in [[10, 14], [20, 28], [5, 14], [3, 4]] {
            let ours = resize(x.clone(), size);
            let theirs = interpolate(
                x.clone(),
                size,
                InterpolateOptions::new(InterpolateMode::Bilinear).with_align_corners(false),
            );
            let diff: f32 = (ours - theirs).abs().max().into_scalar();
            assert!(diff < 1e-5, "{size:?}: {diff}");
        }
    }
}
