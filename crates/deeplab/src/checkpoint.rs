//! `torch.utils.checkpoint` around every residual block (`train.checkpointing` under the `pytorch`
//! memory model, [`crate::config::Recompute::Blocks`]), with PyTorch's non-reentrant semantics: the
//! forward pass runs each block without recording anything for backward and keeps only the block's
//! input; backward reruns one block at a time, from its kept input, and runs backward through it
//! with the gradient its output received.
//!
//! burn's autodiff cannot rerun a segment inside its own backward pass (a nested backward would lock
//! the graph being walked), so the step's backward is split where PyTorch's recomputation happens:
//! first backward through everything after the chain of blocks (from leaves where the chain's
//! outputs enter it), then each block in reverse order (recomputed, then backward from
//! [`PytorchOps::backward_seed`]), then the stem from the chain's input gradient. What lives at
//! each moment is what lives in PyTorch's single pass: the kept inputs not yet consumed, the
//! gradients so far, and one block's recomputed activations.

use crate::blocks::Block;
use crate::primitive::{float, prim};
use crate::pytorch::PytorchOps;
use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

/// What the forward pass kept of the chain of checkpointed blocks.
#[derive(Debug)]
pub struct Segments<B: Backend> {
    /// Each checkpointed block's place `[layer, index]` and its input, in forward order.
    inputs: Vec<([usize; 2], Tensor<B, 4>)>,
    /// The leaves through which the chain's output entered the rest of the model: how many blocks
    /// had run, and the leaf.
    taps: Vec<(usize, Tensor<B, 4>)>,
}

impl<B: PytorchOps> Segments<B> {
    pub fn new() -> Self {
        Segments {
            inputs: Vec::new(),
            taps: Vec::new(),
        }
    }

    /// Runs the block at `at` on `x` recording nothing for backward (its parameters and input
    /// detached), and keeps `x`. The block's parameters must exist
    /// (`DeepLabV3Plus::materialize`): a copy of a lazy parameter would draw values of its own.
    pub fn run(&mut self, at: [usize; 2], block: &Block<B>, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let out = block.clone().no_grad().forward(x.clone().detach());
        self.inputs.push((at, x));
        out
    }

    /// `x`, a value of the chain, as it enters the rest of the model: a leaf whose gradient the
    /// backward pass collects. Before any block ran, `x` is still recorded and passes as it is.
    pub fn tap(&mut self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        if self.inputs.is_empty() {
            return x;
        }
        let leaf = x.detach().require_grad();
        self.taps.push((self.inputs.len(), leaf.clone()));
        leaf
    }
}

impl<B: PytorchOps> Default for Segments<B> {
    fn default() -> Self {
        Self::new()
    }
}

type Grad<B> = Tensor<<B as AutodiffBackend>::InnerBackend, 4>;

impl<B: AutodiffBackend + PytorchOps> Segments<B> {
    /// The parameters' gradients of a step of `model`, from the gradients of its backward pass
    /// through everything after the chain (`head`): the blocks (`layers`, the model's backbone's)
    /// are recomputed and run backward in reverse order, each input freed once its block is done,
    /// then the stem.
    pub fn backward<M: AutodiffModule<B>>(
        self,
        model: &M,
        layers: &[Vec<Option<Block<B>>>],
        mut head: B::Gradients,
    ) -> GradientsParams {
        let Segments { mut inputs, taps } = self;
        let mut taps: Vec<(usize, Option<Grad<B>>)> = taps
            .into_iter()
            .map(|(at, leaf)| (at, leaf.grad_remove(&mut head)))
            .collect();
        let mut params = GradientsParams::from_grads(head, model);
        let mut dy: Option<Grad<B>> = None;
        let mut chain_input = None;
        while let Some(([i, k], x)) = inputs.pop() {
            // The block's output received the next block's input gradient and those of its taps.
            dy = plus(dy, take_at(&mut taps, inputs.len() + 1));
            let Some(g) = dy.take() else { continue };
            let block = layers[i][k].as_ref().expect("a checkpointed block exists");
            let leaf = x.clone().detach().require_grad();
            let mut grads = seed(block.forward(leaf.clone()), g).backward();
            collect(block, &mut grads, &mut params);
            dy = leaf.grad_remove(&mut grads);
            // Every other input is freed here, as its block is done.
            if inputs.is_empty() {
                chain_input = Some(x);
            }
        }
        // The chain's input is the stem's recorded output.
        if let (Some(x), Some(g)) = (chain_input, dy) {
            let mut grads = seed(x, g).backward();
            collect(model, &mut grads, &mut params);
        }
        params
    }
}

/// The gradients taken at `at` blocks, summed.
fn take_at<B: Backend>(
    taps: &mut Vec<(usize, Option<Tensor<B, 4>>)>,
    at: usize,
) -> Option<Tensor<B, 4>> {
    let mut sum = None;
    taps.retain_mut(|(pos, g)| {
        if *pos != at {
            return true;
        }
        sum = plus(sum.take(), g.take());
        false
    });
    sum
}

fn plus<B: Backend>(a: Option<Tensor<B, 4>>, b: Option<Tensor<B, 4>>) -> Option<Tensor<B, 4>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

/// A root whose backward gives `y` the gradient `g`.
fn seed<B: AutodiffBackend + PytorchOps>(y: Tensor<B, 4>, g: Grad<B>) -> Tensor<B, 1> {
    float(B::backward_seed(
        prim(y),
        prim(Tensor::<B, 4>::from_inner(g)),
    ))
}

/// Moves the gradients of `module`'s parameters from `grads` into `params`.
fn collect<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut B::Gradients,
    params: &mut GradientsParams,
) {
    struct Collect<'a, B: AutodiffBackend> {
        grads: &'a mut B::Gradients,
        params: &'a mut GradientsParams,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = param.val().grad_remove(self.grads) {
                self.params.register::<B::InnerBackend, D>(param.id, g);
            }
        }
    }
    module.visit(&mut Collect::<B> { grads, params });
}
