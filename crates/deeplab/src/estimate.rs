//! The model's own estimate of what a training step holds, from its shapes and options alone: every
//! layer walked in forward order with what burn's autodiff keeps of it for backward, its output, and
//! its parameters; then a step simulated over that list (forward, loss, backward in reverse, optimizer).
//!
//! What each op keeps is burn 0.21's autodiff, measured op by op under the CPU counting allocator
//! (`cargo run -p oom-trial --example saved_bytes`): a convolution keeps its input; burn-nn's
//! BatchNorm keeps three tensors of its input's size, the lean one one; ReLU keeps its input; max
//! pooling its input and int32 indices; dropout a float mask; a matrix product its tracked operands'
//! partners (the resize, a product with constant matrices, keeps only the matrices); cat, add and
//! reshapes nothing. Under the pytorch memory model ([`crate::pytorch`]) BatchNorm keeps its input,
//! ReLU its output (the buffer the next convolution keeps anyway) and dropout a one-byte mask, and a
//! checkpointed block its input alone, rerun whole in backward. It is an estimate: `inspect` prints it, tests of the search
//! run on it; oom-bisect's answers come from measured trials.

use crate::arch::ids::{self, block};
use crate::arch::Architecture;
use crate::blocks::BlockSpec;
use crate::config::{BatchNormKind, Config, MemoryModel, Optimizer, Phase};

/// One layer: what it keeps for backward, what it outputs and what it learns, in elements.
#[derive(Debug, Clone, PartialEq)]
struct Layer {
    /// Index of the forward stage it belongs to.
    stage: usize,
    /// The innermost module id it belongs to.
    module: String,
    saved: u64,
    output: u64,
    params: u64,
    /// A checkpointed block ([`crate::checkpoint`]): what its rerun in backward holds beside what
    /// the step keeps (its activations and its output again); `saved` is then its input alone.
    recompute: u64,
}

/// Bytes a step holds, by part, at the moment of its peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Breakdown {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    /// The batch (images and labels).
    pub batch: u64,
    /// Activations kept for backward and the transient tensors of the moment.
    pub activations: u64,
}

impl Breakdown {
    pub fn total(&self) -> u64 {
        self.weights + self.gradients + self.optimizer_state + self.batch + self.activations
    }
}

/// One stage's share of what the forward pass keeps for backward.
#[derive(Debug, Clone, PartialEq)]
pub struct StageEstimate {
    pub id: String,
    pub shape: [usize; 4],
    pub saved_bytes: u64,
    /// Whether the stage runs under the configured truncation.
    pub runs: bool,
}

/// The estimate of one config.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryEstimate {
    pub stages: Vec<StageEstimate>,
    /// Trainable parameters (exact: the same count as the built model's).
    pub params: u64,
    /// The highest total during a steady-state step, and what it is made of.
    pub peak: Breakdown,
    /// What outlives a step: weights, optimizer state and the batch.
    pub between_steps: u64,
}

impl Architecture {
    /// Trainable parameters of the model as built from this architecture (exact).
    pub fn params(&self) -> u64 {
        layers(self).iter().map(|l| l.params).sum()
    }

    /// Trainable parameters of every module id (its own and everything inside it; 0 when swapped),
    /// from one walk of the layers.
    pub fn params_by_module(&self) -> Vec<(String, u64)> {
        let all = layers(self);
        let of = |id: &str| {
            let inside = all.iter().filter(|l| ids::within(&l.module, id));
            inside.map(|l| l.params).sum()
        };
        self.modules
            .iter()
            .map(|m| (m.id.clone(), of(&m.id)))
            .collect()
    }

    /// What one training step of `config` holds (see the module documentation).
    pub fn memory_estimate(&self, config: &Config) -> MemoryEstimate {
        let e = config.train.precision.activation_bytes();
        let all = layers(self);
        let run: Vec<Layer> = all.iter().filter(|l| self.runs(l.stage)).cloned().collect();
        let params: u64 = all.iter().map(|l| l.params).sum();
        let stages = self
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| StageEstimate {
                id: s.id.clone(),
                shape: s.shape,
                saved_bytes: e * run
                    .iter()
                    .filter(|l| l.stage == i)
                    .map(|l| l.saved)
                    .sum::<u64>(),
                runs: self.runs(i),
            })
            .collect();
        let fixed = Fixed::new(self, config, params);
        let peak = simulate_step(&run, &fixed, config, e);
        MemoryEstimate {
            stages,
            params,
            between_steps: fixed.weights + fixed.state + fixed.batch,
            peak,
        }
    }
}

/// What exists outside the autodiff graph: weights, optimizer state, the batch.
struct Fixed {
    weights: u64,
    state: u64,
    batch: u64,
    /// Bytes of one weight (and of its gradient).
    weight_bytes: u64,
}

impl Fixed {
    fn new(arch: &Architecture, config: &Config, params: u64) -> Fixed {
        let r = arch.resident(config, params);
        Fixed {
            weights: r.weights,
            // Optimizer state exists from the first update on, which only a full step makes.
            state: match config.train.phase {
                Phase::Step => r.optimizer_state,
                _ => 0,
            },
            batch: r.batch,
            weight_bytes: config.train.precision.weight_bytes(),
        }
    }
}

/// What a training step of a config holds outside the autodiff graph, exactly: the sizes of its
/// weights, of its optimizer's state once the first update has made it, and of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resident {
    pub weights: u64,
    pub optimizer_state: u64,
    pub batch: u64,
    /// What the optimizer state is, in words.
    pub optimizer_state_is: &'static str,
}

impl Architecture {
    /// [`Resident`] of `config` built with `params` trainable parameters.
    pub fn resident(&self, config: &Config, params: u64) -> Resident {
        let e = config.train.precision.weight_bytes();
        let a = config.train.precision.activation_bytes();
        let [h, w] = self.input;
        let pixels = (self.batch * h * w) as u64;
        let (states, optimizer_state_is) = match config.train.optimizer {
            // PyTorch's SGD keeps a momentum buffer only with momentum; so does the trainer.
            Optimizer::Sgd if config.train.momentum == 0.0 => (0, "plain SGD keeps no state"),
            Optimizer::Sgd => (1, "SGD momentum, one value per parameter"),
            Optimizer::Adamw => (2, "AdamW moments, two values per parameter"),
        };
        Resident {
            weights: params * e,
            optimizer_state: states * params * e,
            // Images, and int32 labels.
            batch: 3 * pixels * a + 4 * pixels,
            optimizer_state_is,
        }
    }
}

/// The highest total of a steady-state step: after the forward pass (every saved tensor alive);
/// during backward, walked in reverse (layers after `i` have given back what they kept and left
/// their parameters' gradients; the gradients of layer `i`'s output and input are alive); and at
/// the optimizer step (every gradient, one parameter's new values at a time).
fn simulate_step(run: &[Layer], fixed: &Fixed, config: &Config, e: u64) -> Breakdown {
    let base = Breakdown {
        weights: fixed.weights,
        optimizer_state: fixed.state,
        batch: fixed.batch,
        ..Default::default()
    };
    let saved: u64 = run.iter().map(|l| l.saved).sum();
    let last_out = run.last().map_or(0, |l| l.output);
    let mut peak = Breakdown {
        activations: e * (saved + last_out),
        ..base
    };
    if config.train.phase == Phase::Forward {
        return peak;
    }
    let mut kept = saved;
    let mut grads = 0;
    for (i, l) in run.iter().enumerate().rev() {
        let input = if i == 0 { 0 } else { run[i - 1].output };
        let now = Breakdown {
            gradients: fixed.weight_bytes * grads,
            activations: e * (kept + l.recompute + l.output + input),
            ..base
        };
        if now.total() > peak.total() {
            peak = now;
        }
        kept -= l.saved;
        grads += l.params;
    }
    let update = Breakdown {
        gradients: fixed.weight_bytes * grads,
        activations: e * run.iter().map(|l| l.params).max().unwrap_or(0),
        ..base
    };
    if config.train.phase == Phase::Step && update.total() > peak.total() {
        peak = update;
    }
    peak
}

/// Builds the layer list in forward order, stage by stage.
struct Walk<'a> {
    arch: &'a Architecture,
    /// Tensors of the input's size BatchNorm keeps for backward.
    bn: u64,
    /// PyTorch's ops: ReLU keeps its output, resize keeps nothing, dropout a bool mask.
    pytorch: bool,
    out: Vec<Layer>,
}

/// Every layer of the model in forward order (also the ones past the truncation point, which are
/// built and carry parameters; [`Architecture::runs`] says which run).
fn layers(arch: &Architecture) -> Vec<Layer> {
    let pytorch = arch.memory_model == MemoryModel::Pytorch;
    let bn = match arch.config.batch_norm {
        _ if pytorch => 1,
        BatchNormKind::Burn => 3,
        BatchNormKind::Lean => 1,
    };
    let mut w = Walk {
        arch,
        bn,
        pytorch,
        out: vec![],
    };
    w.stem();
    w.backbone();
    w.aspp();
    w.attention();
    w.decoder();
    w.classifier();
    w.out
}

/// `[batch·h·w]` of a stage's output (pixels over the batch).
fn pixels(shape: [usize; 4]) -> u64 {
    (shape[0] * shape[2] * shape[3]) as u64
}

impl Walk<'_> {
    fn stage(&self, id: &str) -> usize {
        self.arch.stage_index(id)
    }

    fn push(&mut self, stage: usize, module: &str, saved: u64, output: u64, params: u64) {
        self.out.push(Layer {
            stage,
            module: module.to_string(),
            saved,
            output,
            params,
            recompute: 0,
        });
    }

    /// What a ReLU keeps beyond what its consumer keeps, per element of its output: burn keeps its
    /// input, a buffer of its own; PyTorch its output, which a convolution after it keeps anyway
    /// (`to_conv`) and which is otherwise its own (before a cat or dropout).
    fn relu(&self, to_conv: bool) -> u64 {
        u64::from(!(self.pytorch && to_conv))
    }

    /// conv (keeps `input`) → BatchNorm → ReLU, `cout` channels at `px` pixels; `to_conv` when a
    /// convolution keeps the ReLU's output next.
    fn conv_bn_relu(
        &mut self,
        at: (usize, &str),
        conv: (u64, u64),
        out: (u64, u64),
        to_conv: bool,
    ) {
        let ((conv_params, input), (cout, px)) = (conv, out);
        let out = cout * px;
        let saved = input + (self.bn + self.relu(to_conv)) * out;
        self.push(at.0, at.1, saved, out, conv_params + 2 * cout);
    }

    /// Dropout on `n` elements: burn keeps a float mask, PyTorch a one-byte mask (counted in f32
    /// elements).
    fn dropout(&self, n: u64) -> u64 {
        if self.pytorch {
            n.div_ceil(4)
        } else {
            n
        }
    }

    /// conv 7×7/2 → BN → ReLU → max pool 3×3/2. The conv's input is the batch (held anyway).
    fn stem(&mut self) {
        let s = self.stage(ids::STEM);
        let px4 = pixels(self.arch.stages[s].shape);
        let px2 = 4 * px4;
        self.conv_bn_relu((s, ids::CONV1), (3 * 64 * 49, 0), (64, px2), true);
        // `conv_bn_relu` counts the BatchNorm's γ and β with its convolution; the stem names its
        // BatchNorm on its own (`backbone.bn1`), as torchvision does.
        let conv1 = self.out.last_mut().expect("just pushed");
        conv1.params -= 2 * 64;
        self.push(s, ids::BN1, 0, 0, 2 * 64);
        // Max pooling keeps its input (the ReLU's output) and int32 indices.
        self.push(s, ids::MAXPOOL, 64 * px2 + 64 * px4, 64 * px4, 0);
    }

    fn backbone(&mut self) {
        let expansion = self.arch.config.backbone.expansion() as u64;
        let mut px_in = pixels(self.arch.stages[0].shape);
        for (i, layer) in self.arch.blocks.iter().enumerate() {
            for (k, spec) in layer.iter().enumerate() {
                let id = block(i, k);
                let s = self.stage(&id);
                let px_out = pixels(self.arch.stages[s].shape);
                if self.arch.present(&id) {
                    let l = self.block(s, &id, spec, expansion, [px_in, px_out]);
                    self.out.push(l);
                }
                px_in = px_out;
            }
        }
        if self.arch.config.aux_head && self.arch.present(ids::AUX_HEAD) {
            self.aux_head();
        }
    }

    /// One residual block (torchvision's Bottleneck or BasicBlock).
    fn block(&self, s: usize, id: &str, spec: &BlockSpec, e: u64, px: [u64; 2]) -> Layer {
        let [px_in, px_out] = px;
        let (cin, p) = (spec.inplanes as u64, spec.planes as u64);
        let cout = p * e;
        // Every ReLU in a block feeds a convolution (the next one, or the next block's).
        let norm_relu = self.bn + self.relu(true);
        let conv_bn_relu =
            |cin: u64, c: u64, px_i: u64, px_o: u64| cin * px_i + norm_relu * c * px_o;
        let (mut saved, mut params) = if e == 4 {
            let a = conv_bn_relu(cin, p, px_in, px_in);
            let b = conv_bn_relu(0, p, 0, px_out) + p * px_in;
            // conv3 keeps the second ReLU's output; BN; the ReLU after the sum.
            let c = p * px_out + norm_relu * cout * px_out;
            (
                a + b + c,
                cin * p + 9 * p * p + p * cout + 2 * (2 * p + cout),
            )
        } else {
            let a = conv_bn_relu(cin, p, px_in, px_out);
            let b = p * px_out + norm_relu * p * px_out;
            (a + b, 9 * cin * p + 9 * p * p + 2 * (2 * p))
        };
        if spec.downsample {
            // Its conv keeps the block's input, already kept by conv1.
            saved += self.bn * cout * px_out;
            params += cin * cout + 2 * cout;
        }
        let output = cout * px_out;
        // Checkpointed, a block keeps only its input; backward reruns it whole.
        let (saved, recompute) = match self.arch.checkpoint_blocks {
            true => (cin * px_in, saved + output),
            false => (saved, 0),
        };
        Layer {
            stage: s,
            module: id.to_string(),
            saved,
            output,
            params,
            recompute,
        }
    }

    /// torchvision's FCNHead on layer3 (3×3 conv, BN, ReLU, dropout, 1×1 conv) and its loss input.
    fn aux_head(&mut self) {
        let s = self.stage(&self.arch.aux_stage());
        let px = pixels(self.arch.stages[s].shape);
        let cin = self.arch.layer3_out as u64;
        let inter = cin / 4;
        let k = self.arch.config.classes as u64;
        // The 3×3 conv's input (layer3's output) is kept by layer4 already.
        self.conv_bn_relu((s, ids::AUX_HEAD), (9 * cin * inter, 0), (inter, px), false);
        // Dropout; the 1×1 conv (with bias) keeps the dropout's output.
        let kept = self.dropout(inter * px) + inter * px;
        self.push(s, ids::AUX_HEAD, kept, k * px, inter * k + k);
        self.push_loss(s, ids::AUX_HEAD, k, self.loss_size());
    }

    /// The loss resolution `[h, w]`.
    fn loss_size(&self) -> [usize; 2] {
        let last = self.arch.stages.last().expect("classifier stage").shape;
        [last[2], last[3]]
    }

    /// Resize of `k`-channel logits to `to` (keeps nothing large), then log-softmax (keeps its
    /// output) and the pixel-wise loss.
    fn push_loss(&mut self, s: usize, module: &str, k: u64, to: [usize; 2]) {
        let full = self.arch.batch as u64 * k * (to[0] * to[1]) as u64;
        self.push(s, module, full, full, 0);
    }

    fn aspp(&mut self) {
        let s = self.stage(ids::ASPP);
        if self.arch.aspp_is_identity() {
            return;
        }
        let m = &self.arch.config;
        let px = pixels(self.arch.stages[s].shape);
        let high = 512 * m.backbone.expansion() as u64;
        let c = m.aspp_channels as u64;
        // Every branch's first conv keeps layer4's output: once.
        self.push(s, ids::ASPP, high * px, 0, 0);
        let [branch0, atrous @ ..] = ids::ASPP_BRANCHES;
        if self.arch.present(branch0) {
            self.conv_bn_relu((s, branch0), (high * c, 0), (c, px), false);
        }
        for id in atrous {
            if self.arch.present(id) {
                self.conv3x3((s, id), [high, c, px], false);
            }
        }
        if self.arch.present(ids::ASPP_POOL) {
            let b = self.arch.batch as u64;
            self.conv_bn_relu((s, ids::ASPP_POOL), (high * c, 0), (c, b), false);
        }
        let kept = ids::ASPP_BRANCHES
            .iter()
            .chain([&ids::ASPP_POOL])
            .filter(|id| self.arch.present(id))
            .count() as u64;
        // The projection keeps the concatenation; its dropout keeps its input and a mask.
        let project = (kept * c * c, kept * c * px);
        self.conv_bn_relu((s, ids::ASPP_PROJECT), project, (c, px), false);
        self.push(s, ids::ASPP_PROJECT, self.dropout(c * px), c * px, 0);
    }

    /// A 3×3 conv block of the ASPP or the decoder: plain, or depthwise then pointwise; `to_conv`
    /// when a convolution keeps its output next.
    fn conv3x3(&mut self, at: (usize, &str), [cin, cout, px]: [u64; 3], to_conv: bool) {
        if self.arch.config.separable {
            // The depthwise conv's input is kept by the caller; the pointwise keeps its ReLU output.
            self.conv_bn_relu(at, (9 * cin, 0), (cin, px), true);
            self.conv_bn_relu(at, (cin * cout, cin * px), (cout, px), to_conv);
        } else {
            self.conv_bn_relu(at, (9 * cin * cout, 0), (cout, px), to_conv);
        }
    }

    /// Multi-head self-attention over the pixels: q, k, v and the context kept by the products and
    /// projections, the tokens by the three input projections, the softmax's exp and output.
    fn attention(&mut self) {
        let m = &self.arch.config;
        if m.attention_heads == 0 || !self.arch.present(ids::ATTENTION) {
            return;
        }
        let s = self.stage(ids::ATTENTION);
        let [b, d, h, w] = self.arch.stages[s].shape;
        let (b, d, n, heads) = (b as u64, d as u64, (h * w) as u64, m.attention_heads as u64);
        // The weights (softmax output, and its input kept by the product) are N×N per head; the
        // memory-efficient kernel keeps one log-sum-exp per row instead.
        let per_head = match m.attention_kernel {
            crate::config::AttentionKernel::Math => 2 * n * n,
            crate::config::AttentionKernel::Efficient => n,
        };
        let saved = 5 * b * n * d + b * heads * per_head;
        self.push(s, ids::ATTENTION, saved, b * n * d, 4 * (d * d + d));
    }

    fn decoder(&mut self) {
        let s = self.stage(ids::DECODER);
        if !self.arch.present(ids::DECODER) {
            return;
        }
        let a = self.arch;
        let px = pixels(a.stages[s].shape);
        let low_in = 64 * a.config.backbone.expansion() as u64;
        if a.present(ids::DECODER_PROJECT) {
            // Its input (layer1's output) is kept by layer2 already.
            self.conv_bn_relu((s, ids::DECODER_PROJECT), (low_in * 48, 0), (48, px), false);
        }
        // The ASPP output resized to H/4 (keeps nothing large).
        let c = a.aspp_out as u64;
        self.push(s, ids::DECODER, 0, c * px, 0);
        let mut ch = c + a.low_level as u64;
        let mut input = ch * px;
        for id in ids::DECODER_FUSE {
            if a.present(id) {
                self.push(s, id, input, 0, 0);
                self.conv3x3((s, id), [ch, 256, px], true);
                ch = 256;
                input = 256 * px;
            }
        }
    }

    /// The 1×1 classifier (keeps its input), resize to the loss resolution, log-softmax.
    fn classifier(&mut self) {
        let s = self.stage(ids::CLASSIFIER);
        let a = self.arch;
        let k = a.config.classes as u64;
        let before = a.stages[s - 1].shape;
        let cin = a.decoder_out as u64;
        let px = pixels(before);
        let [_, _, lh, lw] = a.stages[s].shape;
        let to = [lh, lw];
        self.push(s, ids::CLASSIFIER, cin * px, k * px, cin * k + k);
        self.push_loss(s, ids::CLASSIFIER, k, to);
    }
}
