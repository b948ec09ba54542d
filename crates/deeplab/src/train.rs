//! One real training step: forward, pixel-wise cross-entropy (plus the auxiliary loss), backward, and
//! an SGD-momentum or AdamW update (under mixed f16 with `GradScaler`'s loss scaling:
//! [`crate::scaler`]), cut short according to the phase. Each step reads back one value
//! that depends on all of it, so a step that silently did not happen cannot pass as one that did.

use crate::arch::Architecture;
use crate::checkpoint::Segments;
use crate::config::{Config, Optimizer, Phase, Precision};
use crate::model::{DeepLabV3Plus, Head, Output};
use crate::pytorch::PytorchOps;
use crate::scaler::LossScale;
use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamW, AdamWConfig, GradientsParams, Optimizer as _, Sgd, SgdConfig};
use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Distribution;

/// Weight of the auxiliary loss, as in torchvision's segmentation reference.
pub const AUX_WEIGHT: f32 = 0.5;

/// The loss's input in f32 under autocast (PyTorch's autocast runs losses and softmax in f32);
/// pure low precision stays as it is.
fn loss_input<B: Backend>(x: Tensor<B, 4>, autocast: bool) -> Tensor<B, 4> {
    match autocast {
        true => x.cast(burn::tensor::DType::F32),
        false => x,
    }
}

/// Mean pixel-wise cross-entropy of logits `[B, K, H, W]` against labels `[B, H, W]`.
pub fn cross_entropy<B: Backend>(logits: Tensor<B, 4>, labels: Tensor<B, 3, Int>) -> Tensor<B, 1> {
    let [b, _, h, w] = logits.dims();
    let logp = log_softmax(logits, 1);
    let picked = logp.gather(1, labels.reshape([b, 1, h, w]));
    picked.mean().neg()
}

/// Nearest-neighbour downsampling of labels to `[h, w]` (the quarter-resolution loss).
fn labels_at<B: Backend>(labels: Tensor<B, 3, Int>, size: [usize; 2]) -> Tensor<B, 3, Int> {
    let [b, h, w] = labels.dims();
    if [h, w] == size {
        return labels;
    }
    let (sh, sw) = (h / size[0], w / size[1]);
    // Take the top-left pixel of each sh×sw cell.
    labels
        .reshape([b, size[0], sh, size[1], sw])
        .slice([0..b, 0..size[0], 0..1, 0..size[1], 0..1])
        .reshape([b, size[0], size[1]])
}

enum Optim<B: AutodiffBackend + PytorchOps> {
    Sgd(OptimizerAdaptor<Sgd<B::InnerBackend>, DeepLabV3Plus<B>, B>),
    AdamW(OptimizerAdaptor<AdamW, DeepLabV3Plus<B>, B>),
}

impl<B: AutodiffBackend + PytorchOps> Optim<B> {
    fn step(
        &mut self,
        lr: f64,
        model: DeepLabV3Plus<B>,
        grads: GradientsParams,
    ) -> DeepLabV3Plus<B> {
        match self {
            Optim::Sgd(o) => o.step(lr, model, grads),
            Optim::AdamW(o) => o.step(lr, model, grads),
        }
    }

    /// See [`Trainer::make_optimizer_state`].
    fn make_state(&mut self, model: DeepLabV3Plus<B>) -> DeepLabV3Plus<B> {
        struct Zeros(GradientsParams);
        impl<B: AutodiffBackend> burn::module::ModuleVisitor<B> for Zeros {
            fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<B, D>>) {
                let value = param.val();
                // BatchNorm's running statistics are visited too; they are not trained.
                if value.is_require_grad() {
                    self.0.register(param.id, value.inner().zeros_like());
                }
            }
        }
        let mut zeros = Zeros(GradientsParams::new());
        // Only what a real step trains: past a truncation point no gradient, so no state.
        model.visit_trained(&mut zeros);
        self.step(0.0, model, zeros.0)
    }
}

/// The points of a step at which the caller may read memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point<'a> {
    /// A forward stage ended (its id).
    Stage(&'a str),
    /// The loss exists.
    Loss,
    /// Gradients exist.
    Backward,
    /// Parameters were updated.
    Optimizer,
}

/// What one step produced, read back from the device.
#[derive(Debug, Clone, Copy)]
pub struct StepResult {
    pub loss: f32,
    /// A value that depends on the whole step: loss, plus the sum of the first convolution's gradient
    /// (backward) or updated weights (step). Finite iff every part of the step produced numbers.
    pub check: f64,
}

/// A model, its optimizer and a fixed random batch, ready to run steps.
pub struct Trainer<B: AutodiffBackend + PytorchOps> {
    model: Option<DeepLabV3Plus<B>>,
    optim: Optim<B>,
    images: Tensor<B, 4>,
    labels: Tensor<B, 3, Int>,
    phase: Phase,
    lr: f64,
    /// Mixed precision: f32 weights, activations in a lower precision, the loss in f32.
    autocast: bool,
    /// Dynamic loss scaling (mixed f16, as with PyTorch's `GradScaler`).
    scaler: Option<LossScale>,
    /// The optimizer's state exists (an update ran, or was made up front).
    updated: bool,
}

/// The random generator's seed for a trial's weights and batch.
const SEED: u64 = 0;

impl<B: AutodiffBackend + PytorchOps> Trainer<B> {
    /// Builds the model on `device` and a random batch of the configured size.
    pub fn new(
        config: &Config,
        device: &B::Device,
    ) -> Result<Self, crate::config::errors::ConfigError> {
        let arch = Architecture::new(config)?;
        let [h, w] = config.data.size;
        let b = config.data.batch;
        // The same weights and batch in every trial: under mixed f16 the loss scaler skips a step
        // whose gradients overflow, and which step does (with the memory its update makes)
        // depends on the values.
        B::seed(device, SEED);
        let model = DeepLabV3Plus::new(arch, device);
        // So that memory read before the first step includes the parameters.
        model.materialize();
        let t = &config.train;
        let optim = match t.optimizer {
            Optimizer::Sgd => Optim::Sgd(
                SgdConfig::new()
                    // Without momentum no buffer, as PyTorch's SGD (burn's momentum of 0 would
                    // still keep one per parameter).
                    .with_momentum((t.momentum > 0.0).then(|| {
                        MomentumConfig::new()
                            .with_momentum(t.momentum)
                            .with_dampening(0.0)
                    }))
                    .with_weight_decay(
                        (t.weight_decay > 0.0)
                            .then(|| WeightDecayConfig::new(t.weight_decay as f32)),
                    )
                    .init(),
            ),
            Optimizer::Adamw => Optim::AdamW(
                AdamWConfig::new()
                    .with_weight_decay(t.weight_decay as f32)
                    .init(),
            ),
        };
        let images: Tensor<B, 4> =
            Tensor::random([b, 3, h, w], Distribution::Normal(0.0, 1.0), device);
        // Under autocast the batch enters in the low precision, so that every layer computes in it.
        let images = match t.precision.autocast() {
            Some(low) => images.cast(low),
            None => images,
        };
        let labels = Tensor::<B, 3, Int>::random(
            [b, h, w],
            Distribution::Uniform(0.0, config.model.classes as f64),
            device,
        );
        Ok(Trainer {
            model: Some(model),
            optim,
            images,
            labels,
            phase: t.phase,
            lr: t.learning_rate,
            autocast: t.precision.autocast().is_some(),
            scaler: (t.precision == Precision::MixedF16).then(LossScale::new),
            updated: false,
        })
    }

    /// An optimizer update with a zero gradient for every trainable parameter and a zero learning
    /// rate: the parameters stay as they are (weight decay is scaled by the rate too), and the
    /// optimizer's state exists with its final shapes, as after a first real step.
    /// The trial makes it after reading what the build holds (`Config::premade_state`), so that an
    /// out-of-memory here is located after the build.
    pub fn make_optimizer_state(&mut self) {
        let model = self.model.take().expect("model present between steps");
        self.model = Some(self.optim.make_state(model));
        self.updated = true;
    }

    /// The optimizer's update, unless the loss scaler skips the step (gradients not finite). A
    /// skipped step before any update still makes the optimizer's state, so that the memory of a
    /// short trial is that of the run, whose later steps hold it.
    fn update(&mut self, model: DeepLabV3Plus<B>, grads: GradientsParams) -> DeepLabV3Plus<B> {
        let grads = match &mut self.scaler {
            Some(s) => s.unscale(&model, grads),
            None => Some(grads),
        };
        let model = match grads {
            Some(grads) => self.optim.step(self.lr, model, grads),
            None if self.updated => model,
            None => self.optim.make_state(model),
        };
        self.updated = true;
        model
    }

    /// The device computes nothing that is read back (a stream-only trial): where a value read
    /// back decides what a step does (the loss scaler's overflow check), the step takes the
    /// normal path. Steps still read every value back, so that they ask for the same buffers.
    pub fn reads_not_computed(&mut self) {
        if let Some(s) = &mut self.scaler {
            s.reads_not_computed();
        }
    }

    pub fn model(&self) -> &DeepLabV3Plus<B> {
        self.model.as_ref().expect("model present between steps")
    }

    /// The training loss of one forward pass: cross-entropy of the logits (plus the weighted
    /// auxiliary loss), or for a truncated model the mean square of the stage's output, which
    /// makes backward run through exactly the stages that ran.
    fn loss(&self, out: Output<B>) -> Tensor<B, 1> {
        let ce = |logits: Tensor<B, 4>| {
            let [_, _, h, w] = logits.dims();
            let labels = labels_at(self.labels.clone(), [h, w]);
            cross_entropy(loss_input(logits, self.autocast), labels)
        };
        let loss = match out.head {
            Head::Logits(logits) => ce(logits),
            Head::Truncated(x) => loss_input(x, self.autocast).powi_scalar(2).mean(),
        };
        match out.aux {
            Some(aux) => loss + ce(aux).mul_scalar(AUX_WEIGHT),
            None => loss,
        }
    }

    /// One training step, cut short by the phase. `at` is called at every measuring point.
    pub fn step(&mut self, at: &mut dyn FnMut(Point<'_>)) -> StepResult {
        let model = self.model.take().expect("model present between steps");
        let mut out = model.forward(self.images.clone(), &mut |id| at(Point::Stage(id)));
        let segments = out.segments.take();
        let loss = self.loss(out);
        at(Point::Loss);
        match self.phase {
            Phase::Forward => {
                let loss = read_scalar(loss);
                // A forward-only step never runs backward, so its autodiff graph (every activation
                // saved for backward) would outlive the step and pile up, step after step: the
                // parameters' leaf nodes, held by the model, keep the graph "maybe useful", and
                // burn-autodiff frees graphs nobody holds only at the end of a backward pass. So:
                // the same parameters as new leaves (no copy), then a backward through a
                // one-element tensor of its own, which frees the old graph.
                let fresh = DeepLabV3Plus::<B>::from_inner(model.valid());
                drop(model);
                let device = self.images.device();
                let _ = Tensor::<B, 1>::zeros([1], &device)
                    .require_grad()
                    .sum()
                    .backward();
                self.model = Some(fresh);
                StepResult {
                    loss: loss as f32,
                    check: loss,
                }
            }
            Phase::Backward | Phase::Step => {
                let loss_value = loss.clone().detach();
                let scaled = match &self.scaler {
                    Some(s) => loss.mul_scalar(s.scale()),
                    None => loss,
                };
                let grads = gradients(&model, scaled, segments);
                at(Point::Backward);
                if self.phase == Phase::Backward {
                    let g = grads
                        .get::<B::InnerBackend, 4>(model.backbone.conv1.weight.id)
                        .map(|g| read_scalar(g.sum()))
                        .unwrap_or(f64::NAN);
                    let loss = read_scalar(loss_value.inner());
                    self.model = Some(model);
                    StepResult {
                        loss: loss as f32,
                        check: loss + g,
                    }
                } else {
                    let model = self.update(model, grads);
                    at(Point::Optimizer);
                    let w = read_scalar(model.backbone.conv1.weight.val().inner().sum());
                    let loss = read_scalar(loss_value.inner());
                    self.model = Some(model);
                    StepResult {
                        loss: loss as f32,
                        check: loss + w,
                    }
                }
            }
        }
    }
}

/// The parameters' gradients of `loss`: one backward pass, or with checkpointed blocks the pass
/// through the rest of the model and then each block recomputed ([`Segments::backward`]).
fn gradients<B: AutodiffBackend + PytorchOps>(
    model: &DeepLabV3Plus<B>,
    loss: Tensor<B, 1>,
    segments: Option<Segments<B>>,
) -> GradientsParams {
    let grads = loss.backward();
    match segments {
        Some(segments) => segments.backward(model, &model.backbone.layers, grads),
        None => GradientsParams::from_grads(grads, model),
    }
}

fn read_scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().elem::<f64>()
}
