//! The architecture as data, before any tensor exists: stage ids, module ids and which of them can be
//! swapped for identity, channel counts after every swap, and the shape each stage produces. The model
//! is built from this, and `inspect` prints it.

use crate::blocks::BlockSpec;
use crate::config::{Backbone, Config, ConfigError, MemoryModel, ModelConfig};

/// One entry of the module tree, with the dotted id users type in `identity = [..]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    pub id: String,
    pub kind: &'static str,
    /// `None` when the module can be swapped for identity; otherwise why not.
    pub not_swappable: Option<String>,
}

/// One stage of the forward pass: a point `truncate_after` accepts and per-stage memory is read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageInfo {
    pub id: String,
    /// `[batch, channels, height, width]` of the stage's output.
    pub shape: [usize; 4],
}

/// The resolved architecture of one model config.
#[derive(Debug, Clone)]
pub struct Architecture {
    pub config: ModelConfig,
    pub batch: usize,
    pub input: [usize; 2],
    pub blocks: [Vec<BlockSpec>; 4],
    pub identity: Vec<String>,
    /// Index into `stages` after which the forward pass stops; `None` runs the whole model.
    pub truncate: Option<usize>,
    pub stages: Vec<StageInfo>,
    pub modules: Vec<ModuleInfo>,
    /// Channels into the ASPP projection, into the decoder fuse convolutions and into the classifier.
    pub aspp_out: usize,
    pub low_level: usize,
    pub decoder_out: usize,
    /// Stride of the logits before the final upsampling (4 with the decoder, the output stride without).
    pub logits_stride: usize,
    /// Channels of layer3's output (input of the auxiliary head).
    pub layer3_out: usize,
    /// Whose memory behaviour the model reproduces in training (`device.memory_model`).
    pub memory_model: MemoryModel,
    /// Every residual block is a checkpoint segment ([`crate::config::Recompute::Blocks`]).
    pub checkpoint_blocks: bool,
}

/// Every module and stage id users type, torchvision's dotted names: the one place they are spelled.
/// A stage id names the point after which `truncate_after` stops and per-stage memory is read.
pub mod ids {
    /// The stem (conv1, bn1, relu, maxpool) as one stage.
    pub const STEM: &str = "backbone.stem";
    pub const CONV1: &str = "backbone.conv1";
    pub const BN1: &str = "backbone.bn1";
    pub const MAXPOOL: &str = "backbone.maxpool";
    pub const LAYERS: [&str; 4] = ["layer1", "layer2", "layer3", "layer4"];
    pub const ASPP: &str = "aspp";
    /// The 1×1 branch and the three atrous branches.
    pub const ASPP_BRANCHES: [&str; 4] = [
        "aspp.branch0",
        "aspp.branch1",
        "aspp.branch2",
        "aspp.branch3",
    ];
    pub const ASPP_POOL: &str = "aspp.pool";
    pub const ASPP_PROJECT: &str = "aspp.project";
    pub const ATTENTION: &str = "attention";
    pub const AUX_HEAD: &str = "aux_head";
    pub const DECODER: &str = "decoder";
    pub const DECODER_PROJECT: &str = "decoder.project";
    pub const DECODER_FUSE: [&str; 2] = ["decoder.fuse.0", "decoder.fuse.1"];
    pub const CLASSIFIER: &str = "classifier";
    /// What can never be swapped, in words.
    pub const UNSWAPPABLE: &str =
        "the stem, the first block of each layer, the ASPP projection, the classifier and the loss";

    /// Block `k` of backbone layer `layer` (0-based): `backbone.layer3.5`.
    pub fn block(layer: usize, k: usize) -> String {
        format!("backbone.{}.{k}", LAYERS[layer])
    }

    /// Whether `id` is a backbone block, and of which layer.
    pub fn block_layer(id: &str) -> Option<usize> {
        let rest = id.strip_prefix("backbone.layer")?;
        let (layer, _) = rest.split_once('.')?;
        layer.parse::<usize>().ok()?.checked_sub(1)
    }

    /// Whether `id` is `parent` or lies inside it (`aspp.pool` inside `aspp`).
    pub fn within(id: &str, parent: &str) -> bool {
        id == parent
            || id
                .strip_prefix(parent)
                .is_some_and(|rest| rest.starts_with('.'))
    }

    /// How a stage reads in a report: without the `backbone.` prefix.
    pub fn short(id: &str) -> &str {
        id.strip_prefix("backbone.").unwrap_or(id)
    }
}

use ids::*;

fn swappable(id: impl Into<String>, kind: &'static str) -> ModuleInfo {
    ModuleInfo {
        id: id.into(),
        kind,
        not_swappable: None,
    }
}

fn unswappable(id: impl Into<String>, kind: &'static str, why: &str) -> ModuleInfo {
    ModuleInfo {
        id: id.into(),
        kind,
        not_swappable: Some(why.to_string()),
    }
}

/// torchvision's `_make_layer` with `replace_stride_with_dilation`: a dilated layer keeps stride 1 and
/// multiplies the dilation; its first block still uses the previous dilation.
fn block_specs(backbone: Backbone, output_stride: usize) -> [Vec<BlockSpec>; 4] {
    let replace = match output_stride {
        8 => [false, true, true],
        16 => [false, false, true],
        _ => [false, false, false],
    };
    let expansion = backbone.expansion();
    let mut inplanes = 64;
    let mut dilation = 1;
    let mut out: [Vec<BlockSpec>; 4] = Default::default();
    for (i, blocks) in backbone.layers().into_iter().enumerate() {
        let planes = 64 << i;
        let mut stride = if i == 0 { 1 } else { 2 };
        let previous = dilation;
        if i > 0 && replace[i - 1] {
            dilation *= stride;
            stride = 1;
        }
        let downsample = stride != 1 || inplanes != planes * expansion;
        out[i].push(BlockSpec {
            inplanes,
            planes,
            stride,
            dilation: previous,
            downsample,
        });
        inplanes = planes * expansion;
        for _ in 1..blocks {
            out[i].push(BlockSpec {
                inplanes,
                planes,
                stride: 1,
                dilation,
                downsample: false,
            });
        }
    }
    out
}

/// The modules and stages of the backbone: the stem, then every block of every layer.
fn backbone(
    m: &ModelConfig,
    blocks: &[Vec<BlockSpec>; 4],
    batch: usize,
    [h, w]: [usize; 2],
) -> (Vec<ModuleInfo>, Vec<StageInfo>) {
    let stem = "part of the stem";
    let mut modules = vec![
        unswappable(
            CONV1,
            "Conv2d 7×7/2",
            "the stem sets the channels every later stage expects",
        ),
        unswappable(BN1, "BatchNorm", stem),
        unswappable(MAXPOOL, "MaxPool 3×3/2", stem),
    ];
    let mut stages = vec![StageInfo {
        id: STEM.into(),
        shape: [batch, 64, h / 4, w / 4],
    }];
    let kind = if m.backbone.bottleneck() {
        "Bottleneck"
    } else {
        "BasicBlock"
    };
    let mut stride = 4;
    for (i, layer) in blocks.iter().enumerate() {
        stride *= layer[0].stride;
        for (k, spec) in layer.iter().enumerate() {
            let id = block(i, k);
            modules.push(if k == 0 {
                let why =
                    "the first block of a layer changes channels or stride; swap a later block";
                unswappable(id.clone(), kind, why)
            } else {
                swappable(id.clone(), kind)
            });
            let channels = spec.planes * m.backbone.expansion();
            stages.push(StageInfo {
                id,
                shape: [batch, channels, h / stride, w / stride],
            });
        }
    }
    (modules, stages)
}

/// The ASPP's modules: the whole, its five branches and its projection.
fn aspp_modules() -> Vec<ModuleInfo> {
    let mut modules = vec![swappable(ASPP, "ASPP")];
    for (i, id) in ASPP_BRANCHES.iter().enumerate() {
        let kind = if i == 0 {
            "Conv 1×1 + BN + ReLU"
        } else {
            "atrous Conv 3×3 + BN + ReLU"
        };
        modules.push(swappable(*id, kind));
    }
    modules.push(swappable(ASPP_POOL, "image pooling + Conv 1×1 + BN + ReLU"));
    modules.push(unswappable(
        ASPP_PROJECT,
        "Conv 1×1 + BN + ReLU + Dropout",
        "it sets the channels the decoder expects; swap `aspp` as a whole instead",
    ));
    modules
}

/// The decoder's modules and the classifier.
fn decoder_modules() -> Vec<ModuleInfo> {
    vec![
        swappable(DECODER, "DeepLabV3+ decoder"),
        swappable(DECODER_PROJECT, "Conv 1×1 → 48 + BN + ReLU on layer1"),
        swappable(DECODER_FUSE[0], "Conv 3×3 + BN + ReLU"),
        swappable(DECODER_FUSE[1], "Conv 3×3 + BN + ReLU"),
        unswappable(CLASSIFIER, "Conv 1×1 → classes", "it produces the logits"),
    ]
}

/// Channels after the swaps: what enters the decoder, what the decoder's low-level path carries,
/// what enters the classifier and at which stride.
struct Widths {
    aspp_out: usize,
    low_level: usize,
    decoder_out: usize,
    logits_stride: usize,
}

/// Whether the ASPP passes its input through: swapped as a whole, or every branch swapped (then
/// nothing feeds the projection).
fn aspp_passes(swapped: &dyn Fn(&str) -> bool) -> bool {
    swapped(ASPP)
        || ASPP_BRANCHES
            .iter()
            .chain(std::iter::once(&ASPP_POOL))
            .all(|id| swapped(id))
}

fn widths(m: &ModelConfig, swapped: &dyn Fn(&str) -> bool) -> Widths {
    let expansion = m.backbone.expansion();
    // With every branch swapped nothing feeds the projection: the ASPP as a whole is identity.
    let aspp_out = if aspp_passes(swapped) {
        512 * expansion
    } else {
        m.aspp_channels
    };
    let low_level = if swapped(DECODER_PROJECT) {
        64 * expansion
    } else {
        48
    };
    let (decoder_out, logits_stride) = if swapped(DECODER) {
        (aspp_out, m.output_stride)
    } else if DECODER_FUSE.iter().all(|id| swapped(id)) {
        (aspp_out + low_level, 4)
    } else {
        (256, 4)
    };
    Widths {
        aspp_out,
        low_level,
        decoder_out,
        logits_stride,
    }
}

impl Architecture {
    /// Resolves a config, refusing identity ids and truncation points the model does not have.
    pub fn new(config: &Config) -> Result<Architecture, ConfigError> {
        config.validate()?;
        check_representable(config)?;
        let m = &config.model;
        let blocks = block_specs(m.backbone, m.output_stride);
        let [h, w] = config.data.size;
        let b = config.data.batch;
        let os = m.output_stride;
        let mut identity = m.identity.clone();
        identity.sort();
        identity.dedup();
        let swapped = |id: &str| identity.iter().any(|x| x == id);
        let wd = widths(m, &swapped);

        let (mut modules, mut stages) = backbone(m, &blocks, b, [h, w]);
        modules.extend(aspp_modules());
        stages.push(StageInfo {
            id: ASPP.into(),
            shape: [b, wd.aspp_out, h / os, w / os],
        });
        if m.attention_heads > 0 {
            modules.push(swappable(ATTENTION, "multi-head self-attention"));
            check_heads(m.attention_heads, wd.aspp_out, swapped(ATTENTION))?;
            stages.push(StageInfo {
                id: ATTENTION.into(),
                shape: [b, wd.aspp_out, h / os, w / os],
            });
        }
        if m.aux_head {
            modules.push(swappable(AUX_HEAD, "FCN auxiliary head on layer3"));
        }
        modules.extend(decoder_modules());
        let ls = wd.logits_stride;
        stages.push(StageInfo {
            id: DECODER.into(),
            shape: [b, wd.decoder_out, h / ls, w / ls],
        });
        let (lh, lw) = match config.train.loss_resolution {
            crate::config::LossResolution::Full => (h, w),
            crate::config::LossResolution::Quarter => (h / ls, w / ls),
        };
        stages.push(StageInfo {
            id: CLASSIFIER.into(),
            shape: [b, m.classes, lh, lw],
        });
        check_identity(&identity, &modules)?;
        let truncate = truncation(m.truncate_after.as_deref(), &stages)?;
        Ok(Architecture {
            config: m.clone(),
            batch: b,
            input: [h, w],
            layer3_out: 256 * m.backbone.expansion(),
            blocks,
            identity,
            truncate,
            stages,
            modules,
            aspp_out: wd.aspp_out,
            low_level: wd.low_level,
            decoder_out: wd.decoder_out,
            logits_stride: wd.logits_stride,
            memory_model: config.device.memory_model(),
            checkpoint_blocks: config.recompute() == crate::config::Recompute::Blocks,
        })
    }

    /// Why PyTorch would refuse to train this configuration where burn trains it, under the pytorch
    /// memory model: at batch 1 the BatchNorm of the ASPP's image pooling sees one value per channel.
    pub fn pytorch_refusal(&self) -> Option<String> {
        let pooled = !self.aspp_is_identity() && self.present(ASPP_POOL);
        (self.memory_model == MemoryModel::Pytorch && self.batch == 1 && pooled).then(|| {
            format!(
                "PyTorch refuses to train this: at batch 1 the BatchNorm of {ASPP_POOL} sees one value \
                 per channel (\"Expected more than 1 value per channel when training\"); burn trains it"
            )
        })
    }

    pub fn is_identity(&self, id: &str) -> bool {
        self.identity.iter().any(|x| x == id)
    }

    /// Whether the ASPP passes its input through: swapped as a whole, or every branch swapped.
    pub fn aspp_is_identity(&self) -> bool {
        aspp_passes(&|id| self.is_identity(id))
    }

    /// Whether module `id` is built: it is not swapped, and nothing that contains it is.
    pub fn present(&self, id: &str) -> bool {
        !self.identity.iter().any(|x| within(id, x))
    }

    /// Ids of every module that can be swapped for identity, in forward order.
    pub fn swappable_ids(&self) -> Vec<String> {
        self.modules
            .iter()
            .filter(|m| m.not_swappable.is_none())
            .map(|m| m.id.clone())
            .collect()
    }

    /// What a search swaps, as groups of ids: the later blocks of each backbone layer together
    /// (`backbone.layer3.1-22`), and every other swappable module that contains no other one (the
    /// ASPP's branches, not the ASPP). Modules the config already swaps are left out.
    pub fn swap_groups(&self) -> Vec<(String, Vec<String>)> {
        let ids = self.swappable_ids();
        let mut groups = vec![];
        for i in 0..self.blocks.len() {
            let layer: Vec<String> = ids
                .iter()
                .filter(|id| block_layer(id) == Some(i) && self.present(id))
                .cloned()
                .collect();
            let n = self.blocks[i].len();
            let label = match n {
                2 => block(i, 1),
                _ => format!("{}-{}", block(i, 1), n - 1),
            };
            if !layer.is_empty() {
                groups.push((label, layer));
            }
        }
        let leaf = |id: &String| !ids.iter().any(|o| o != id && within(o, id));
        for id in ids.iter().filter(|id| block_layer(id).is_none()) {
            if leaf(id) && self.present(id) {
                groups.push((id.clone(), vec![id.clone()]));
            }
        }
        groups
    }

    /// Whether the stage at `index` runs under the configured truncation.
    pub fn runs(&self, index: usize) -> bool {
        self.truncate.is_none_or(|t| index <= t)
    }

    /// The stage after which the auxiliary head branches off: the last block of layer3.
    pub fn aux_stage(&self) -> String {
        block(2, self.blocks[2].len() - 1)
    }

    /// Whether the auxiliary head runs: it is enabled, not swapped, and layer3 is reached.
    pub fn aux_runs(&self) -> bool {
        let idx = self.stage_index(&self.aux_stage());
        self.config.aux_head && !self.is_identity(AUX_HEAD) && self.runs(idx)
    }

    /// Index of the stage with this id.
    pub fn stage_index(&self, id: &str) -> usize {
        self.stages
            .iter()
            .position(|s| s.id == id)
            .unwrap_or_else(|| panic!("stage {id} exists"))
    }
}

/// The most bytes a configuration may describe: far beyond any machine, and far enough below
/// 2⁶⁴ that the estimate's sums and products (in `u64`) cannot overflow.
const REPRESENTABLE_BYTES: f64 = (1u64 << 56) as f64;

/// Refuses a configuration whose tensors could not be counted in 64 bits: every key may be at its
/// maximum, but not all at once. The bound is generous on purpose (every tensor as wide as the
/// widest layer, 64 of them per pixel, the attention matrix at a quarter of the input's side),
/// so that the estimate below it never overflows.
fn check_representable(config: &Config) -> Result<(), ConfigError> {
    let (m, d) = (&config.model, &config.data);
    let widest = [
        m.classes,
        m.aspp_channels,
        512 * m.backbone.expansion(),
        256,
    ]
    .into_iter()
    .max()
    .unwrap_or(256) as f64;
    let (b, px) = (d.batch as f64, d.size[0] as f64 * d.size[1] as f64);
    let heads = m.attention_heads as f64;
    let n = px / 16.0;
    let bytes = 8.0 * (b * px * widest * 64.0 + b * heads * n * n + 64.0 * widest * widest);
    if bytes <= REPRESENTABLE_BYTES {
        return Ok(());
    }
    Err(ConfigError::new(
        "data.size",
        format!(
            "batch {} × {}×{} pixels{} describes more than 2^56 bytes of tensors ({bytes:.1e}); \
             no device holds that: lower data.batch, data.size, model.classes, \
             model.aspp_channels or model.attention_heads",
            d.batch,
            d.size[0],
            d.size[1],
            match m.attention_heads {
                0 => String::new(),
                h => format!(" with {h} attention heads"),
            }
        ),
    ))
}

fn check_heads(heads: usize, channels: usize, swapped: bool) -> Result<(), ConfigError> {
    if swapped || channels.is_multiple_of(heads) {
        return Ok(());
    }
    Err(ConfigError::new(
        "model.attention_heads",
        format!("{heads} heads do not divide the {channels} channels entering the attention block"),
    ))
}

/// Every id in `identity` must name a module that can be swapped.
fn check_identity(identity: &[String], modules: &[ModuleInfo]) -> Result<(), ConfigError> {
    for id in identity {
        match modules.iter().find(|x| &x.id == id) {
            None => {
                let hint = closest(id, modules.iter().map(|m| m.id.as_str()))
                    .map(|c| format!("; did you mean `{c}`?"))
                    .unwrap_or_default();
                return Err(ConfigError::new(
                    "model.identity",
                    format!("`{}` is not a module of this model (see `oom-bisect inspect` for the ids{hint})", crate::config::cut_line(id, 80)),
                ));
            }
            Some(ModuleInfo {
                not_swappable: Some(why),
                ..
            }) => {
                return Err(ConfigError::new(
                    "model.identity",
                    format!("`{id}` cannot be swapped for identity: {why}"),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The index of the truncation stage, refusing a stage the model does not have.
fn truncation(after: Option<&str>, stages: &[StageInfo]) -> Result<Option<usize>, ConfigError> {
    let Some(t) = after else { return Ok(None) };
    if let Some(i) = stages.iter().position(|s| s.id == t) {
        return Ok(Some(i));
    }
    let hint = if t == AUX_HEAD {
        "; the auxiliary head is a side branch: truncate after a layer3 block or later to include it"
            .to_string()
    } else {
        closest(t, stages.iter().map(|s| s.id.as_str()))
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default()
    };
    Err(ConfigError::new(
        "model.truncate_after",
        format!("`{}` is not a stage of this model (stages: {STEM}, {} … {CLASSIFIER}, see `oom-bisect inspect`){hint}", crate::config::cut_line(t, 80), block(0, 0)),
    ))
}

fn closest<'a>(id: &str, ids: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    ids.map(|c| (crate::config::distance(id, c), c))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}
