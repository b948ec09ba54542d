//! Memory-efficient attention (`model.attention_kernel = "efficient"`): softmax(Q·Kᵀ·s)·V as
//! PyTorch's memory-efficient `scaled_dot_product_attention` keeps it for backward, the inputs, the
//! output and one log-sum-exp per query row, never the N×N weights. Forward and backward walk the
//! queries in chunks, each chunk's scores recomputed from Q and K in backward.
//!
//! PyTorch's kernel computes a chunk in on-chip tiles; here a chunk's scores are a device tensor
//! (at most [`CHUNK_BYTES`]), a transient PyTorch does not have.

use crate::primitive::{float, prim};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;

/// The largest score tensor of one chunk of queries.
pub const CHUNK_BYTES: usize = 64 << 20;

/// Query rows per chunk for `[b, h, n, _]` inputs: a chunk's `[b, h, rows, n]` scores within
/// [`CHUNK_BYTES`] in f32.
fn rows_per_chunk(b: usize, h: usize, n: usize) -> usize {
    (CHUNK_BYTES / (4 * b * h * n).max(1)).clamp(1, n.max(1))
}

fn step_for<B: Backend>(q: &Tensor<B, 4>, k: &Tensor<B, 4>) -> usize {
    let [b, h, _, _] = q.dims();
    rows_per_chunk(b, h, k.dims()[2])
}

/// The rows `start..end` of `[b, h, n, d]`.
fn rows<B: Backend>(t: &Tensor<B, 4>, start: usize, end: usize) -> Tensor<B, 4> {
    let [b, h, _, d] = t.dims();
    t.clone().slice([0..b, 0..h, start..end, 0..d])
}

/// The output `[b, h, n, d]` and the log-sum-exp of each query row `[b, h, n, 1]`.
/// `step` query rows at a time.
pub fn forward<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    scale: f64,
    step: usize,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let n = q.dims()[2];
    let kt = k.transpose();
    let (mut outs, mut lses) = (vec![], vec![]);
    for start in (0..n).step_by(step) {
        let s = rows(&q, start, (start + step).min(n))
            .matmul(kt.clone())
            .mul_scalar(scale);
        let m = s.clone().max_dim(3);
        let p = (s - m.clone()).exp();
        let l = p.clone().sum_dim(3);
        outs.push(p.matmul(v.clone()).div(l.clone()));
        lses.push(m + l.log());
    }
    (Tensor::cat(outs, 2), Tensor::cat(lses, 2))
}

/// What backward keeps: the inputs, the output and the rows' log-sum-exp.
#[derive(Debug, Clone)]
pub struct Saved<B: Backend> {
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    out: Tensor<B, 4>,
    lse: Tensor<B, 4>,
    scale: f64,
    step: usize,
}

/// The gradients of q, k and v from the output's `dout`, chunk by chunk: with P = exp(S − lse),
/// dV = Σ Pᵀ·dO, dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O)), dQ = dS·K·s, dK = Σ dSᵀ·Q·s.
pub fn backward<B: Backend>(saved: Saved<B>, dout: Tensor<B, 4>) -> [Tensor<B, 4>; 3] {
    let Saved {
        q,
        k,
        v,
        out,
        lse,
        scale,
        step,
    } = saved;
    let n = q.dims()[2];
    let delta = (dout.clone() * out).sum_dim(3);
    let (kt, vt) = (k.clone().transpose(), v.clone().transpose());
    let (mut dk, mut dv) = (k.zeros_like(), v.zeros_like());
    let mut dqs = vec![];
    for start in (0..n).step_by(step) {
        let end = (start + step).min(n);
        let (qc, doc) = (rows(&q, start, end), rows(&dout, start, end));
        let s = qc.clone().matmul(kt.clone()).mul_scalar(scale);
        let p = (s - rows(&lse, start, end)).exp();
        dv = dv + p.clone().transpose().matmul(doc.clone());
        let ds = p * (doc.matmul(vt.clone()) - rows(&delta, start, end));
        dqs.push(ds.clone().matmul(k.clone()).mul_scalar(scale));
        dk = dk + ds.transpose().matmul(qc).mul_scalar(scale);
    }
    [Tensor::cat(dqs, 2), dk, dv]
}

/// The op on every backend: plain on inner backends (nothing is kept without autodiff), a backward
/// node of its own on burn's autodiff.
pub trait EfficientAttention: Backend {
    fn efficient_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        let (q, k, v) = (float::<Self, 4>(q), float(k), float(v));
        let step = step_for(&q, &k);
        prim(forward(q, k, v, scale, step).0)
    }
}

impl<B: Backend, C: CheckpointStrategy> EfficientAttention for Autodiff<B, C> {
    fn efficient_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Sdpa;
        impl<B: Backend> Backward<B, 3> for Sdpa {
            type State = Saved<B>;
            fn backward(
                self,
                ops: Ops<Self::State, 3>,
                grads: &mut Gradients,
                _: &mut Checkpointer,
            ) {
                let dout = float::<B, 4>(grads.consume::<B>(&ops.node));
                let [dq, dk, dv] = backward(ops.state, dout);
                for (node, grad) in ops.parents.into_iter().zip([dq, dk, dv]) {
                    if let Some(node) = node {
                        grads.register::<B>(node.id, prim(grad));
                    }
                }
            }
        }
        let nodes = [q.node.clone(), k.node.clone(), v.node.clone()];
        let inner = |t: &FloatTensor<Self>| float::<B, 4>(t.primitive.clone());
        let (q, k, v) = (inner(&q), inner(&k), inner(&v));
        let step = step_for(&q, &k);
        let (out, lse) = forward(q.clone(), k.clone(), v.clone(), scale, step);
        match Sdpa.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let saved = Saved {
                    q,
                    k,
                    v,
                    out: out.clone(),
                    lse,
                    scale,
                    step,
                };
                prep.finish(saved, prim(out))
            }
            OpsKind::UnTracked(prep) => prep.finish(prim(out)),
        }
    }
}

/// softmax(Q·Kᵀ·s)·V of `[b, h, n, d]` heads, with the memory-efficient kernel.
pub fn efficient<B: EfficientAttention>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    scale: f64,
) -> Tensor<B, 4> {
    float(B::efficient_attention(prim(q), prim(k), prim(v), scale))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::activation::softmax;
    use burn::tensor::Distribution;

    type A = Autodiff<Flex>;

    fn random(shape: [usize; 4]) -> Tensor<A, 4> {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), &Default::default()).require_grad()
    }

    fn max<const D: usize>(t: Tensor<Flex, D>) -> f32 {
        t.abs().max().into_scalar()
    }

    /// The same output and gradients as the composition: through the autodiff op (one chunk
    /// here), and through the forward and backward functions in chunks of 7 rows.
    #[test]
    fn efficient_attention_is_the_composition() {
        let (q, k, v) = (
            random([2, 2, 30, 8]),
            random([2, 2, 30, 8]),
            random([2, 2, 30, 8]),
        );
        let r = random([2, 2, 30, 8]).detach();
        let scale = 1.0 / 8f64.sqrt();
        let math =
            softmax(q.clone().matmul(k.clone().transpose()).mul_scalar(scale), 3).matmul(v.clone());
        let g1 = (math.clone() * r.clone()).sum().backward();
        let fresh = |t: &Tensor<A, 4>| t.clone().detach().require_grad();
        let (q2, k2, v2) = (fresh(&q), fresh(&k), fresh(&v));
        let eff = efficient(q2.clone(), k2.clone(), v2.clone(), scale);
        assert!(max(math.clone().inner() - eff.clone().inner()) < 1e-5);
        let g2 = (eff * r.clone()).sum().backward();
        let (qi, ki, vi) = (q.clone().inner(), k.clone().inner(), v.clone().inner());
        let (out, lse) = forward(qi.clone(), ki.clone(), vi.clone(), scale, 7);
        assert!(max(math.inner() - out.clone()) < 1e-5);
        let saved = Saved {
            q: qi,
            k: ki,
            v: vi,
            out,
            lse,
            scale,
            step: 7,
        };
        let chunked = backward(saved, r.inner());
        for ((a, b), c) in [(&q, &q2), (&k, &k2), (&v, &v2)].into_iter().zip(chunked) {
            let want = a.grad(&g1).unwrap();
            let d = max(want.clone() - b.grad(&g2).unwrap()).max(max(want - c));
            assert!(d < 1e-4, "gradient differs by {d}");
        }
    }

    #[test]
    fn a_chunk_stays_within_its_bound() {
        assert_eq!(rows_per_chunk(1, 1, 1), 1);
        let step = rows_per_chunk(4, 8, 16384);
        assert!(
            step >= 1 && 4 * 8 * step * 16384 * 4 <= CHUNK_BYTES,
            "{step}"
        );
    }
}
