//! `torch.amp.GradScaler`'s dynamic loss scaling, as PyTorch users run autocast in f16
//! (`train.precision = "mixed-f16"`): the loss is multiplied by the scale before backward, so that
//! small f16 gradients do not flush to zero; the gradients are divided by it before the update; a
//! step whose gradients are not all finite is skipped and the scale halved; after 2000 good steps
//! in a row it doubles. Defaults are PyTorch's (`init_scale = 2**16`, `growth_factor = 2`,
//! `backoff_factor = 0.5`, `growth_interval = 2000`).
//!
//! Pure f16 gets no scaler: PyTorch's refuses f16 gradients ("Attempting to unscale FP16
//! gradients"), so a pure-f16 PyTorch run has none either.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

#[derive(Debug, Clone)]
pub struct LossScale {
    scale: f64,
    good_steps: usize,
    /// Whether values read back were computed; a stream-only trial computes none
    /// ([`LossScale::reads_not_computed`]).
    computed: bool,
}

impl LossScale {
    const INITIAL: f64 = 65536.0;
    const GROWTH: f64 = 2.0;
    const BACKOFF: f64 = 0.5;
    const INTERVAL: usize = 2000;

    pub fn new() -> Self {
        LossScale {
            scale: Self::INITIAL,
            good_steps: 0,
            computed: true,
        }
    }

    /// What is read back was not computed (a stream-only trial, whose reads are zeros): the
    /// overflow check is still read, as on a device, and the step takes the path of finite
    /// gradients, as a training run's steps do but for the rare overflow.
    pub fn reads_not_computed(&mut self) {
        self.computed = false;
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// The gradients divided by the scale, or `None` when one of them is not finite: the step is
    /// skipped and the scale backs off. In one read-back for all parameters, as PyTorch's
    /// `_amp_foreach_non_finite_check_and_unscale_`.
    pub fn unscale<B: AutodiffBackend, M: AutodiffModule<B>>(
        &mut self,
        model: &M,
        grads: GradientsParams,
    ) -> Option<GradientsParams> {
        let mut u = Unscale::<B> {
            grads,
            by: 1.0 / self.scale,
            finite: None,
        };
        model.visit(&mut u);
        let finite = u
            .finite
            .is_none_or(|f| f.into_scalar().to_bool() || !self.computed);
        if !finite {
            self.scale *= Self::BACKOFF;
            self.good_steps = 0;
            return None;
        }
        self.good_steps += 1;
        if self.good_steps == Self::INTERVAL {
            self.scale *= Self::GROWTH;
            self.good_steps = 0;
        }
        Some(u.grads)
    }
}

impl Default for LossScale {
    fn default() -> Self {
        Self::new()
    }
}

struct Unscale<B: AutodiffBackend> {
    grads: GradientsParams,
    by: f64,
    /// Whether every gradient so far is finite (a one-element bool on the device).
    finite: Option<Tensor<B::InnerBackend, 1, Bool>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Unscale<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let here = g.clone().is_finite().all();
        self.finite = Some(match self.finite.take() {
            Some(f) => f.bool_and(here),
            None => here,
        });
        self.grads.register(param.id, g.mul_scalar(self.by));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};

    type A = Autodiff<Flex>;

    fn grads(model: &Linear<A>, scale: f32, x: f32) -> GradientsParams {
        let device = Default::default();
        let input = Tensor::<A, 2>::from_floats([[x, 1.0]], &device);
        let loss = model.forward(input).sum().mul_scalar(scale);
        GradientsParams::from_grads(loss.backward(), model)
    }

    #[test]
    fn unscales_skips_on_overflow_and_backs_off() {
        let device = Default::default();
        let model: Linear<A> = LinearConfig::new(2, 1).init(&device);
        let mut s = LossScale::new();
        let plain = grads(&model, 1.0, 3.0);
        let scaled = s
            .unscale(&model, grads(&model, s.scale() as f32, 3.0))
            .expect("finite gradients pass");
        let id = model.weight.id;
        let (a, b) = (
            plain.get::<Flex, 2>(id).unwrap(),
            scaled.get::<Flex, 2>(id).unwrap(),
        );
        let diff: f32 = (a - b).abs().max().into_scalar();
        assert!(diff < 1e-6, "{diff}");
        assert_eq!(s.scale(), 65536.0);
        // An infinite gradient: skipped, and the scale halves.
        assert!(s
            .unscale(&model, grads(&model, 1.0, f32::INFINITY))
            .is_none());
        assert_eq!(s.scale(), 32768.0);
    }
}
