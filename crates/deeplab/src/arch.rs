//! The architecture as data, before any tensor exists: stage ids, module ids and which of them can be
//! swapped for identity, channel counts after every swap, and the shape each stage produces. The model
//! is built from this, and `inspect` prints it.

use crate::blocks::BlockSpec;
use crate::config::{Backbone, Config, ConfigError, ModelConfig};

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
}

pub const LAYERS: [&str; 4] = ["layer1", "layer2", "layer3", "layer4"];
pub const ASPP_BRANCHES: [&str; 4] = [
    "aspp.branch0",
    "aspp.branch1",
    "aspp.branch2",
    "aspp.branch3",
];

fn swappable(id: impl Into<String>, kind: &'static str) -> ModuleInfo {
    ModuleInfo {
        id: id.into(),
        kind,
        not_swappable: None,
    }
}

fn fixed(id: impl Into<String>, kind: &'static str, why: &str) -> ModuleInfo {
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

impl Architecture {
    /// Resolves a config, refusing identity ids and truncation points the model does not have.
    pub fn new(config: &Config) -> Result<Architecture, ConfigError> {
        config.validate()?;
        let m = &config.model;
        let expansion = m.backbone.expansion();
        let blocks = block_specs(m.backbone, m.output_stride);
        let [h, w] = config.data.size;
        let b = config.data.batch;
        let c = m.aspp_channels;

        let mut modules = vec![
            fixed(
                "backbone.conv1",
                "Conv2d 7×7/2",
                "the stem sets the channels every later stage expects",
            ),
            fixed("backbone.bn1", "BatchNorm", "part of the stem"),
            fixed("backbone.maxpool", "MaxPool 3×3/2", "part of the stem"),
        ];
        let mut stages = vec![StageInfo {
            id: "backbone.stem".into(),
            shape: [b, 64, h / 4, w / 4],
        }];
        let mut stride = 4;
        for (i, layer) in blocks.iter().enumerate() {
            stride *= layer[0].stride;
            for (k, spec) in layer.iter().enumerate() {
                let id = format!("backbone.{}.{k}", LAYERS[i]);
                let kind = if m.backbone.bottleneck() {
                    "Bottleneck"
                } else {
                    "BasicBlock"
                };
                modules.push(if k == 0 {
                    fixed(
                        id.clone(),
                        kind,
                        "the first block of a layer changes channels or stride; swap a later block",
                    )
                } else {
                    swappable(id.clone(), kind)
                });
                stages.push(StageInfo {
                    id,
                    shape: [b, spec.planes * expansion, h / stride, w / stride],
                });
            }
        }
        let high = 512 * expansion;
        let layer3_out = 256 * expansion;
        let os = m.output_stride;

        let identity: Vec<String> = {
            let mut v = m.identity.clone();
            v.sort();
            v.dedup();
            v
        };
        let swapped = |id: &str| identity.iter().any(|x| x == id);

        modules.push(swappable("aspp", "ASPP"));
        for (i, id) in ASPP_BRANCHES.iter().enumerate() {
            modules.push(swappable(
                *id,
                if i == 0 {
                    "Conv 1×1 + BN + ReLU"
                } else {
                    "atrous Conv 3×3 + BN + ReLU"
                },
            ));
        }
        modules.push(swappable(
            "aspp.pool",
            "image pooling + Conv 1×1 + BN + ReLU",
        ));
        modules.push(fixed(
            "aspp.project",
            "Conv 1×1 + BN + ReLU + Dropout",
            "it sets the channels the decoder expects; swap `aspp` as a whole instead",
        ));
        // With every branch swapped nothing feeds the projection: the ASPP as a whole is identity.
        let kept_branches = ASPP_BRANCHES
            .iter()
            .chain(std::iter::once(&"aspp.pool"))
            .filter(|id| !swapped(id))
            .count();
        let aspp_passes = swapped("aspp") || kept_branches == 0;
        let aspp_out = if aspp_passes { high } else { c };
        stages.push(StageInfo {
            id: "aspp".into(),
            shape: [b, aspp_out, h / os, w / os],
        });
        if m.attention_heads > 0 {
            modules.push(swappable("attention", "multi-head self-attention"));
            if !swapped("attention") && aspp_out % m.attention_heads != 0 {
                return Err(ConfigError::new(
                    "model.attention_heads",
                    format!("{} heads do not divide the {aspp_out} channels entering the attention block", m.attention_heads),
                ));
            }
            stages.push(StageInfo {
                id: "attention".into(),
                shape: [b, aspp_out, h / os, w / os],
            });
        }
        if m.aux_head {
            modules.push(swappable("aux_head", "FCN auxiliary head on layer3"));
        }

        modules.push(swappable("decoder", "DeepLabV3+ decoder"));
        modules.push(swappable(
            "decoder.project",
            "Conv 1×1 → 48 + BN + ReLU on layer1",
        ));
        modules.push(swappable("decoder.fuse.0", "Conv 3×3 + BN + ReLU"));
        modules.push(swappable("decoder.fuse.1", "Conv 3×3 + BN + ReLU"));
        modules.push(fixed(
            "classifier",
            "Conv 1×1 → classes",
            "it produces the logits",
        ));

        let low_level = if swapped("decoder.project") {
            64 * expansion
        } else {
            48
        };
        let (decoder_out, logits_stride) = if swapped("decoder") {
            (aspp_out, os)
        } else {
            let mut ch = aspp_out + low_level;
            for k in 0..2 {
                if !swapped(&format!("decoder.fuse.{k}")) {
                    ch = 256;
                }
            }
            (ch, 4)
        };
        stages.push(StageInfo {
            id: "decoder".into(),
            shape: [b, decoder_out, h / logits_stride, w / logits_stride],
        });
        let (lh, lw) = match config.train.loss_resolution {
            crate::LossResolution::Full => (h, w),
            crate::LossResolution::Quarter => (h / logits_stride, w / logits_stride),
        };
        stages.push(StageInfo {
            id: "classifier".into(),
            shape: [b, m.classes, lh, lw],
        });

        for id in &identity {
            match modules.iter().find(|x| &x.id == id) {
                None => {
                    return Err(ConfigError::new(
                        "model.identity",
                        format!(
                            "`{id}` is not a module of this model (see `oom-bisect inspect` for the ids{})",
                            closest(id, modules.iter().map(|m| m.id.as_str()))
                                .map(|c| format!("; did you mean `{c}`?"))
                                .unwrap_or_default()
                        ),
                    ))
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

        let truncate = match &m.truncate_after {
            None => None,
            Some(t) => match stages.iter().position(|s| &s.id == t) {
                Some(i) => Some(i),
                None => {
                    let hint = if t == "aux_head" {
                        "; the auxiliary head is a side branch: truncate after a layer3 block or later to include it".to_string()
                    } else {
                        closest(t, stages.iter().map(|s| s.id.as_str()))
                            .map(|c| format!("; did you mean `{c}`?"))
                            .unwrap_or_default()
                    };
                    return Err(ConfigError::new(
                        "model.truncate_after",
                        format!("`{t}` is not a stage of this model (stages: backbone.stem, backbone.layer1.0 … classifier, see `oom-bisect inspect`){hint}"),
                    ));
                }
            },
        };

        Ok(Architecture {
            config: m.clone(),
            batch: b,
            input: [h, w],
            blocks,
            identity,
            truncate,
            stages,
            modules,
            aspp_out,
            low_level,
            decoder_out,
            logits_stride,
            layer3_out,
        })
    }

    pub fn is_identity(&self, id: &str) -> bool {
        self.identity.iter().any(|x| x == id)
    }

    /// Whether the ASPP passes its input through: swapped as a whole, or every branch swapped.
    pub fn aspp_is_identity(&self) -> bool {
        self.is_identity("aspp")
            || ASPP_BRANCHES
                .iter()
                .chain(std::iter::once(&"aspp.pool"))
                .all(|id| self.is_identity(id))
    }

    /// Ids of every module that can be swapped for identity, in forward order.
    pub fn swappable_ids(&self) -> Vec<String> {
        self.modules
            .iter()
            .filter(|m| m.not_swappable.is_none())
            .map(|m| m.id.clone())
            .collect()
    }

    /// Whether the stage at `index` runs under the configured truncation.
    pub fn runs(&self, index: usize) -> bool {
        self.truncate.is_none_or(|t| index <= t)
    }

    /// Whether the auxiliary head runs: it is enabled, not swapped, and layer3 is reached.
    pub fn aux_runs(&self) -> bool {
        let last_layer3 = format!("backbone.layer3.{}", self.blocks[2].len() - 1);
        let idx = self
            .stages
            .iter()
            .position(|s| s.id == last_layer3)
            .expect("layer3 exists");
        self.config.aux_head && !self.is_identity("aux_head") && self.runs(idx)
    }

    /// Index of the stage with this id.
    pub fn stage_index(&self, id: &str) -> usize {
        self.stages
            .iter()
            .position(|s| s.id == id)
            .unwrap_or_else(|| panic!("stage {id} exists"))
    }
}

fn closest<'a>(id: &str, ids: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    ids.map(|c| (crate::config::distance(id, c), c))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}
