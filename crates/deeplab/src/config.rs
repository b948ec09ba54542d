//! The one configuration type of a workload: what a TOML file says, what `--set key=value` changes, and
//! what a trial runs. Reading is strict: an unknown key names the closest valid one, and every value out
//! of range is refused with the key and what is allowed, never replaced by a silent default.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A workload: the model, the data it is fed, how it is trained, and optionally the device it targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    pub data: DataConfig,
    #[serde(default)]
    pub train: TrainConfig,
    /// Where the workload is meant to run; command-line flags override it.
    #[serde(default, skip_serializing_if = "DeviceConfig::is_empty")]
    pub device: DeviceConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backbone {
    Resnet18,
    Resnet34,
    Resnet50,
    Resnet101,
    Resnet152,
}

impl Backbone {
    /// Blocks per stage, as in torchvision's `resnet*` constructors.
    pub fn layers(self) -> [usize; 4] {
        match self {
            Backbone::Resnet18 => [2, 2, 2, 2],
            Backbone::Resnet34 | Backbone::Resnet50 => [3, 4, 6, 3],
            Backbone::Resnet101 => [3, 4, 23, 3],
            Backbone::Resnet152 => [3, 8, 36, 3],
        }
    }

    /// Bottleneck blocks (expansion 4) for ResNet-50 and deeper, basic blocks below.
    pub fn bottleneck(self) -> bool {
        matches!(
            self,
            Backbone::Resnet50 | Backbone::Resnet101 | Backbone::Resnet152
        )
    }

    pub fn expansion(self) -> usize {
        if self.bottleneck() {
            4
        } else {
            1
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backbone::Resnet18 => "resnet18",
            Backbone::Resnet34 => "resnet34",
            Backbone::Resnet50 => "resnet50",
            Backbone::Resnet101 => "resnet101",
            Backbone::Resnet152 => "resnet152",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub backbone: Backbone,
    /// 8, 16 or 32: torchvision's `replace_stride_with_dilation` on layer3/layer4.
    pub output_stride: usize,
    pub classes: usize,
    /// Atrous rates of the three 3×3 ASPP branches. Absent: the paper's rates for the output stride
    /// (6, 12, 18 at OS16; doubled at OS8; halved at OS32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aspp_rates: Option<[usize; 3]>,
    #[serde(default = "default_aspp_channels")]
    pub aspp_channels: usize,
    /// Depthwise-separable 3×3 convolutions in the ASPP and the decoder (the paper's variant).
    #[serde(default)]
    pub separable: bool,
    /// Heads of a multi-head self-attention block on the ASPP output; 0 means no attention block.
    #[serde(default)]
    pub attention_heads: usize,
    /// How the attention block computes softmax(QKᵀ/√d)·V. Left out of the canonical form while
    /// `math`, so that journals written before this key existed still resume.
    #[serde(default, skip_serializing_if = "AttentionKernel::is_math")]
    pub attention_kernel: AttentionKernel,
    /// An FCN auxiliary head on layer3 with its own loss (weight 0.5, as torchvision's reference).
    #[serde(default)]
    pub aux_head: bool,
    /// Module ids swapped for identity (see `oom-bisect inspect`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identity: Vec<String>,
    /// Stage id after which the forward pass stops and the loss is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_after: Option<String>,
    /// How BatchNorm is computed in training: burn-nn's (the default) or lean (same function and
    /// gradient, one input-sized tensor kept for backward instead of three, as in PyTorch).
    #[serde(default, skip_serializing_if = "BatchNormKind::is_burn")]
    pub batch_norm: BatchNormKind,
}

/// The attention block's kernel, as PyTorch's `nn.MultiheadAttention` picks one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKernel {
    /// The composition (PyTorch's default, `need_weights=True`): the N×N weights are kept for
    /// backward.
    #[default]
    Math,
    /// PyTorch's memory-efficient `scaled_dot_product_attention` (`need_weights=False`): inputs,
    /// output and one statistic per row kept, no N×N matrix ([`crate::attention`]).
    Efficient,
}

impl AttentionKernel {
    pub fn is_math(&self) -> bool {
        *self == AttentionKernel::Math
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchNormKind {
    /// burn-nn's `BatchNorm`: three input-sized tensors kept for backward.
    #[default]
    Burn,
    /// One input-sized tensor kept (`x − mean`), like PyTorch's.
    Lean,
}

impl BatchNormKind {
    pub fn is_burn(&self) -> bool {
        *self == BatchNormKind::Burn
    }
}

fn default_aspp_channels() -> usize {
    256
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    pub batch: usize,
    /// Input `[height, width]` in pixels.
    pub size: [usize; 2],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    Sgd,
    Adamw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossResolution {
    /// Logits upsampled to the input size, loss on every pixel (torchvision).
    Full,
    /// Loss on the decoder's 1/4-resolution logits against nearest-downsampled labels.
    Quarter,
}

/// The numbers a step computes with. `f16` and `bf16` are pure: weights, gradients, optimizer
/// state and activations all in the low precision. `mixed-*` is PyTorch's autocast: f32 master
/// weights, gradients and optimizer state, convolutions and matrix products in the low precision
/// (on low-precision copies of the weights), BatchNorm statistics and the loss in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    /// Everything in float64: what a model left in `.double()` (or a NumPy float64 array turned
    /// into tensors) trains in, one of the thread's suspects.
    F64,
    F16,
    Bf16,
    #[serde(rename = "mixed-f16")]
    MixedF16,
    #[serde(rename = "mixed-bf16")]
    MixedBf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
            Precision::MixedF16 => "mixed-f16",
            Precision::MixedBf16 => "mixed-bf16",
        }
    }

    /// Bytes of a weight, its gradient and an optimizer state value.
    pub fn weight_bytes(self) -> u64 {
        match self {
            Precision::F64 => 8,
            Precision::F16 | Precision::Bf16 => 2,
            _ => 4,
        }
    }

    /// Bytes of an activation.
    pub fn activation_bytes(self) -> u64 {
        match self {
            Precision::F64 => 8,
            Precision::F32 => 4,
            _ => 2,
        }
    }

    /// Autocast: the low precision activations are computed in, with f32 weights.
    pub fn autocast(self) -> Option<burn::tensor::DType> {
        match self {
            Precision::MixedF16 => Some(burn::tensor::DType::F16),
            Precision::MixedBf16 => Some(burn::tensor::DType::BF16),
            _ => None,
        }
    }
}

/// How much of a training step runs. Ordered: each phase includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Forward pass and loss, graph kept as for training, no backward.
    Forward,
    /// Forward and backward: gradients computed, no optimizer step.
    Backward,
    /// The whole training step, optimizer state included.
    Step,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Forward, Phase::Backward, Phase::Step];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Step => "step",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    #[serde(default = "default_optimizer")]
    pub optimizer: Optimizer,
    #[serde(default = "default_lr")]
    pub learning_rate: f64,
    /// SGD momentum (ignored by AdamW, whose betas are burn's defaults 0.9/0.999).
    #[serde(default = "default_momentum")]
    pub momentum: f64,
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f64,
    #[serde(default = "default_loss_resolution")]
    pub loss_resolution: LossResolution,
    #[serde(default = "default_precision")]
    pub precision: Precision,
    /// Recompute activations in backward: see [`Recompute`] for how each memory model does it.
    #[serde(default)]
    pub checkpointing: bool,
    #[serde(default = "default_phase")]
    pub phase: Phase,
    /// Training steps per trial; absent, [`Config::steps`] chooses. Optimizer state appears in the
    /// first step's optimizer update, so the peak needs at least two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    /// Make the optimizer's state (momentum, Adam's moments) before the first step, by an update
    /// with zero gradients and a zero learning rate, so that the first step already holds what
    /// every later one holds. Left out of the canonical form while false, so that journals written
    /// before this key existed still resume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub premade_state: bool,
    /// A trial stops after a step whose device peak stayed at or below this share of its ceiling,
    /// instead of running all of `train.steps`; 0 runs them all. Absent,
    /// [`Config::one_step_below`] chooses. Where it is above 0 the optimizer's state is made before
    /// the first step (as `premade_state`), so that the first step holds what later ones hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_step_below: Option<f64>,
}

fn default_optimizer() -> Optimizer {
    Optimizer::Sgd
}
fn default_lr() -> f64 {
    0.01
}
fn default_momentum() -> f64 {
    0.9
}
fn default_weight_decay() -> f64 {
    1e-4
}
fn default_loss_resolution() -> LossResolution {
    LossResolution::Full
}
fn default_precision() -> Precision {
    Precision::F32
}
fn default_phase() -> Phase {
    Phase::Step
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            optimizer: default_optimizer(),
            learning_rate: default_lr(),
            momentum: default_momentum(),
            weight_decay: default_weight_decay(),
            loss_resolution: default_loss_resolution(),
            precision: default_precision(),
            checkpointing: false,
            phase: default_phase(),
            steps: None,
            premade_state: false,
            one_step_below: None,
        }
    }
}

/// How `train.checkpointing` recomputes activations, by memory model: what a user of each framework
/// gets when they turn checkpointing on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recompute {
    /// Checkpointing is off: everything backward needs is kept from the forward pass.
    Nothing,
    /// burn's `BalancedCheckpointing` (`burn` model): per operation, memory-bound ops are recomputed.
    BurnBalanced,
    /// `torch.utils.checkpoint` around every residual block (`pytorch` model, non-reentrant, as the
    /// reference script calls it): a block keeps only its input, and backward reruns it.
    Blocks,
}

impl Config {
    pub fn recompute(&self) -> Recompute {
        match (self.train.checkpointing, self.device.memory_model()) {
            (false, _) => Recompute::Nothing,
            (true, MemoryModel::Burn) => Recompute::BurnBalanced,
            (true, MemoryModel::Pytorch) => Recompute::Blocks,
        }
    }
}

impl ModelConfig {
    /// The paper's rates: (6, 12, 18) at output stride 16, doubled at 8, halved at 32.
    pub fn effective_aspp_rates(&self) -> [usize; 3] {
        self.aspp_rates.unwrap_or(match self.output_stride {
            8 => [12, 24, 36],
            32 => [3, 6, 9],
            _ => [6, 12, 18],
        })
    }
}

mod device;
pub use device::{Convolution, DeviceConfig, MemoryModel};
pub(crate) mod errors;
mod validate;

pub(crate) use errors::distance;
pub use errors::{apply_set, closest_key, cut, cut_line, ConfigError, KEYS};
use errors::{check_keys, key_at, line_column, type_error};
pub use validate::{MAX_BATCH, MAX_CHANNELS, MAX_CLASSES, MAX_RATE, MAX_SIDE, MAX_STEPS};

impl Config {
    /// Parses and validates TOML text.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let start = e.span().map(|s| s.start);
            let at = start.map(|s| line_column(text, s)).unwrap_or_default();
            let key = start
                .and_then(|s| key_at(text, s))
                .unwrap_or("config".into());
            ConfigError::new(key, format!("not valid TOML{at}: {}", e.message().trim()))
        })?;
        Config::from_table(table)
    }

    /// Validates an already parsed TOML table.
    pub fn from_table(table: toml::Table) -> Result<Config, ConfigError> {
        check_keys(&table)?;
        let config: Config = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e| type_error(&table, e))?;
        config.validate()?;
        Ok(config)
    }

    pub fn to_table(&self) -> toml::Table {
        toml::Table::try_from(self).expect("a config always serialises")
    }

    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).expect("a config always serialises")
    }

    /// The same config with the defaults that depend on other keys spelled out: `train.steps`,
    /// `train.one_step_below`, `model.aspp_rates`, `device.memory_model`. One home for both forms below.
    fn with_defaults_spelled_out(&self) -> Config {
        let mut c = self.clone();
        c.train.steps = Some(self.steps());
        c.train.one_step_below = Some(self.one_step_below());
        c.model.aspp_rates = Some(self.model.effective_aspp_rates());
        c.device.memory_model = Some(self.device.memory_model());
        c
    }

    /// Every key written out, defaults included (also `model.identity` and `model.batch_norm`):
    /// what a `--exec` command and a saved minimal config are given, so that nothing is left to a
    /// default of ours. Reads back as the same config.
    pub fn to_full_toml_string(&self) -> String {
        let mut t = self.with_defaults_spelled_out().to_table();
        if let Some(toml::Value::Table(m)) = t.get_mut("model") {
            m.entry("identity").or_insert(toml::Value::Array(vec![]));
            let norm = toml::Value::try_from(self.model.batch_norm).expect("serialises");
            m.entry("batch_norm").or_insert(norm);
        }
        toml::to_string(&t).expect("a config always serialises")
    }

    /// Training steps per trial: the config's, else two under the `pytorch` memory model and three
    /// under `burn`'s. On the H200, five steps on nine configurations near the ceiling beside PyTorch:
    /// with PyTorch's allocator every out-of-memory came in the first or second step, in PyTorch
    /// too; burn's sliced pools grew by up to 6% in a third step, so it keeps three.
    pub fn steps(&self) -> usize {
        self.train
            .steps
            .unwrap_or(match self.device.memory_model() {
                MemoryModel::Pytorch => 2,
                MemoryModel::Burn => 3,
            })
    }

    /// The share of the ceiling under which one measured step is enough (`train.one_step_below`):
    /// the config's, else 0.9 under the `pytorch` memory model and 0 (every step) under `burn`'s.
    /// With the state made first, the first step holds the tensors later ones hold, and a verdict
    /// that far below the ceiling stands. Its need is a lower bound: PyTorch's allocator, starting
    /// the second step from the first one's split segments, can need more there
    /// (docs/fidelity.md). Under `burn` the sliced pools grow by up to 6% in a third step, so
    /// every step runs.
    pub fn one_step_below(&self) -> f64 {
        self.train
            .one_step_below
            .unwrap_or(match self.device.memory_model() {
                MemoryModel::Pytorch => 0.9,
                MemoryModel::Burn => 0.0,
            })
    }

    /// Whether the optimizer's state is made before the first step: asked for, or needed for one
    /// step to measure what later steps hold. Only a full step has an optimizer.
    pub fn premade_state(&self) -> bool {
        self.train.phase == Phase::Step && (self.train.premade_state || self.one_step_below() > 0.0)
    }

    /// The same workload, measured for its need rather than for a verdict: every step of
    /// `train.steps` runs, the optimizer's state made first where a verdict's trial makes it, so
    /// that both trials ask for the same stream. One step far below the ceiling decides a verdict,
    /// but PyTorch's allocator can need a few percent more in the second step than in the first
    /// (docs/fidelity.md): a need from one step is only a lower bound.
    pub fn measuring_need(&self) -> Config {
        let mut c = self.clone();
        c.train.premade_state = self.premade_state();
        c.train.one_step_below = Some(0.0);
        c
    }

    /// Whether a trial has measured enough after `done` steps, its device peak so far `peak` bytes
    /// under a ceiling of `ceiling` bytes: all of `train.steps`, or a step far enough below.
    pub fn enough_steps(&self, done: usize, peak: u64, ceiling: u64) -> bool {
        done >= self.steps() || (done >= 1 && peak as f64 <= self.one_step_below() * ceiling as f64)
    }

    /// A canonical one-line form: two configs are the same workload iff their keys are equal.
    /// The device section is not part of the workload, except the memory model (always spelled out,
    /// so that an absent one and an explicit default are the same).
    pub fn canonical_key(&self) -> String {
        let mut c = self.with_defaults_spelled_out();
        c.device = DeviceConfig {
            memory_model: c.device.memory_model,
            ..DeviceConfig::default()
        };
        c.model.identity.sort();
        c.model.identity.dedup();
        serde_json::to_string(&c).expect("a config always serialises")
    }

    /// Applies `key=value` overrides (`model.output_stride=16`), then validates.
    pub fn with_overrides<S: AsRef<str>>(&self, sets: &[S]) -> Result<Config, ConfigError> {
        let mut table = self.to_table();
        for set in sets {
            apply_set(&mut table, set.as_ref())?;
        }
        Config::from_table(table)
    }

    /// A small valid config, used as a template.
    pub fn example() -> Config {
        Config {
            model: ModelConfig {
                backbone: Backbone::Resnet50,
                output_stride: 16,
                classes: 21,
                aspp_rates: None,
                aspp_channels: 256,
                separable: false,
                attention_heads: 0,
                attention_kernel: AttentionKernel::Math,
                aux_head: false,
                identity: vec![],
                truncate_after: None,
                batch_norm: BatchNormKind::Burn,
            },
            data: DataConfig {
                batch: 4,
                size: [512, 512],
            },
            train: TrainConfig::default(),
            device: DeviceConfig::default(),
        }
    }

    /// Range checks with the key and what is allowed. Module ids and stage ids are checked by the model
    /// (they depend on the architecture); see [`crate::Architecture::new`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.model.validate()?;
        self.data.validate(self.model.output_stride)?;
        self.train.validate()?;
        self.device.validate()?;
        if self.model.batch_norm != BatchNormKind::Burn
            && self.device.memory_model() != MemoryModel::Burn
        {
            return Err(ConfigError::new(
                "model.batch_norm",
                "applies only with device.memory_model = \"burn\" (the pytorch memory model's \
                 BatchNorm already keeps what PyTorch's keeps)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
