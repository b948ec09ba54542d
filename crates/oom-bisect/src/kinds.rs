//! What each axis and each fix is, in one place: its name, its words, the config key it moves and
//! how much it changes the training. The search knows axes and fixes by the names given here; every
//! part of the report matches on these kinds exhaustively, so that a new axis or fix is a new
//! variant, and the compiler lists every place that must say something about it.

use deeplab::{ids, Config, LossResolution, Optimizer, Precision};
use oom_search::{FixResult, Tag};

/// Where the fixes' tags start: below it, an axis's (its place in [`AxisKind::ALL`]).
const FIX_TAGS: u16 = 100;

/// The monotone axes the search bisects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AxisKind {
    Batch,
    Size,
    Stride,
    Depth,
    Phase,
}

/// How an axis is plotted in the HTML report: its caption, what its x axis shows, and the x of a
/// configuration.
pub struct AxisPlot {
    pub caption: &'static str,
    pub x_desc: &'static str,
    pub x_of: fn(&Config) -> f64,
}

impl AxisKind {
    pub const ALL: [AxisKind; 5] = [
        AxisKind::Batch,
        AxisKind::Size,
        AxisKind::Stride,
        AxisKind::Depth,
        AxisKind::Phase,
    ];

    /// The tag the search carries for this axis.
    pub fn tag(self) -> Tag {
        Tag(AxisKind::ALL
            .iter()
            .position(|k| *k == self)
            .unwrap_or_default() as u16)
    }

    /// The axis of a tag given by [`AxisKind::tag`].
    pub fn of(tag: Tag) -> Option<AxisKind> {
        AxisKind::ALL.get(usize::from(tag.0)).copied()
    }

    /// Its name in the report, the JSON and `--axes`.
    pub fn name(self) -> &'static str {
        match self {
            AxisKind::Batch => "batch",
            AxisKind::Size => "size",
            AxisKind::Stride => "stride",
            AxisKind::Depth => "depth",
            AxisKind::Phase => "phase",
        }
    }

    /// What it is, in "the … is not the cause".
    pub fn noun(self) -> &'static str {
        match self {
            AxisKind::Batch => "batch dimension",
            AxisKind::Size => "input size",
            AxisKind::Stride => "output stride",
            AxisKind::Depth => "depth of the model",
            AxisKind::Phase => "phase of the step",
        }
    }

    /// The suspect of the forum thread it tests, in its words.
    pub fn suspect(self) -> &'static str {
        match self {
            AxisKind::Batch => "the batch size",
            AxisKind::Size => "the input size",
            AxisKind::Stride => "the output stride",
            AxisKind::Depth => "a specific layer",
            AxisKind::Phase => "backward and the optimizer state",
        }
    }

    /// The config key it moves.
    pub fn key(self) -> &'static str {
        match self {
            AxisKind::Batch => "data.batch",
            AxisKind::Size => "data.size",
            AxisKind::Stride => "model.output_stride",
            AxisKind::Depth => "model.truncate_after",
            AxisKind::Phase => "train.phase",
        }
    }

    /// Whether its boundary is a cause a user can change ("what tips it over"); depth and phase
    /// say where the memory is, not what to change.
    pub fn is_cause(self) -> bool {
        match self {
            AxisKind::Batch | AxisKind::Size | AxisKind::Stride => true,
            AxisKind::Depth | AxisKind::Phase => false,
        }
    }

    /// How far the estimate's boundary on this axis was from the one measured on an H200 (the
    /// table of docs/estimate.md: the forum scenario and the capacity question): the measured
    /// boundary lies at or below the estimate's, by this much.
    pub fn estimate_error(self) -> Option<&'static str> {
        match self {
            AxisKind::Batch => Some("measured on an H200: 16-33% lower"),
            AxisKind::Size => Some("measured on an H200: about 4% lower"),
            AxisKind::Stride => Some("measured on an H200: the same"),
            AxisKind::Depth => Some("measured on an H200: one or two blocks earlier"),
            AxisKind::Phase => None,
        }
    }

    /// The fix its capacity search answers ("largest batch that fits"), where it has one.
    pub fn fix(self) -> Option<&'static str> {
        match self {
            AxisKind::Batch => Some("largest batch that fits"),
            AxisKind::Size => Some("largest input size that fits"),
            AxisKind::Stride | AxisKind::Depth | AxisKind::Phase => None,
        }
    }

    /// How much its capacity answer changes the training, on [`FixKind::disruption`]'s scale: the
    /// data itself, the batch before the images.
    fn disruption(self) -> u8 {
        match self {
            AxisKind::Batch => 6,
            AxisKind::Size => 7,
            AxisKind::Stride => 3,
            AxisKind::Depth | AxisKind::Phase => LAST,
        }
    }

    /// Its plot in the HTML report, where it has one.
    pub fn plot(self) -> Option<AxisPlot> {
        match self {
            AxisKind::Batch => Some(AxisPlot {
                caption: "peak against batch",
                x_desc: "batch",
                x_of: |c| c.data.batch as f64,
            }),
            AxisKind::Size => Some(AxisPlot {
                caption: "peak against input size",
                x_desc: "input height (px)",
                x_of: |c| c.data.size[0] as f64,
            }),
            AxisKind::Stride | AxisKind::Depth | AxisKind::Phase => None,
        }
    }
}

/// Ranks after every known change.
const LAST: u8 = 8;

/// The single changes a user of the thread would try, each measured on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixKind {
    /// float32 where the run is float64.
    F32,
    MixedBf16,
    MixedF16,
    PureBf16,
    PureF16,
    Checkpointing,
    OutputStride16,
    QuarterLoss,
    Sgd,
    /// Plain SGD: no momentum buffer, the optimizer state's whole share gone.
    NoMomentum,
    NoAttention,
    NoAuxHead,
}

impl FixKind {
    /// In order of how little each changes the training (see [`FixKind::disruption`]).
    pub const ALL: [FixKind; 12] = [
        FixKind::F32,
        FixKind::MixedBf16,
        FixKind::MixedF16,
        FixKind::PureBf16,
        FixKind::PureF16,
        FixKind::Checkpointing,
        FixKind::OutputStride16,
        FixKind::QuarterLoss,
        FixKind::Sgd,
        FixKind::NoMomentum,
        FixKind::NoAttention,
        FixKind::NoAuxHead,
    ];

    /// The tag the search carries for this fix.
    pub fn tag(self) -> Tag {
        Tag(FIX_TAGS
            + FixKind::ALL
                .iter()
                .position(|k| *k == self)
                .unwrap_or_default() as u16)
    }

    /// The fix of a tag given by [`FixKind::tag`].
    pub fn of(tag: Tag) -> Option<FixKind> {
        let i = tag.0.checked_sub(FIX_TAGS)?;
        FixKind::ALL.get(usize::from(i)).copied()
    }

    /// What a user reads.
    pub fn label(self) -> &'static str {
        match self {
            FixKind::F32 => "float32 instead of float64",
            FixKind::MixedBf16 => "mixed precision bf16",
            FixKind::MixedF16 => "mixed precision f16",
            FixKind::PureBf16 => "pure bf16",
            FixKind::PureF16 => "pure f16",
            FixKind::Checkpointing => "gradient checkpointing",
            FixKind::OutputStride16 => "output stride 16",
            FixKind::QuarterLoss => "quarter-resolution loss",
            FixKind::Sgd => "SGD instead of AdamW",
            FixKind::NoMomentum => "SGD without momentum",
            FixKind::NoAttention => "no attention",
            FixKind::NoAuxHead => "no aux head",
        }
    }

    /// The fix that holds at least as much memory as this one: mixed f16 is mixed bf16 with a loss
    /// scaler (its scale and the checks of every gradient), pure f16 and pure bf16 hold elements
    /// of the same size. f16 runs first: every CUDA card has it, bf16 needs Ampere.
    pub fn covered_by(self) -> Option<FixKind> {
        match self {
            FixKind::MixedBf16 => Some(FixKind::MixedF16),
            FixKind::PureBf16 => Some(FixKind::PureF16),
            _ => None,
        }
    }

    /// Whether its first trial compiles kernels no other step's trials do: a precision's (40-80 s
    /// on a cold kernel cache, the longest wait of a cold run).
    pub fn compiles_its_own(self) -> bool {
        matches!(
            self,
            FixKind::F32
                | FixKind::MixedBf16
                | FixKind::MixedF16
                | FixKind::PureBf16
                | FixKind::PureF16
        )
    }

    /// Whether it computes in bf16 (which a card before Ampere lacks).
    pub fn is_bf16(self) -> bool {
        matches!(self, FixKind::MixedBf16 | FixKind::PureBf16)
    }

    /// Whether it is a change of `config` at all (f16 is no fix of an f16 run).
    pub fn applies(self, c: &Config) -> bool {
        let swapped = |id: &str| c.model.identity.iter().any(|i| i == id);
        match self {
            // From float64, float32 and the lower precisions are all fixes.
            FixKind::F32 => c.train.precision == Precision::F64,
            FixKind::MixedBf16 | FixKind::MixedF16 | FixKind::PureBf16 | FixKind::PureF16 => {
                matches!(c.train.precision, Precision::F32 | Precision::F64)
            }
            FixKind::Checkpointing => !c.train.checkpointing,
            FixKind::OutputStride16 => c.model.output_stride == 8,
            FixKind::QuarterLoss => c.train.loss_resolution == LossResolution::Full,
            FixKind::Sgd => c.train.optimizer == Optimizer::Adamw,
            FixKind::NoMomentum => c.train.optimizer == Optimizer::Sgd && c.train.momentum > 0.0,
            FixKind::NoAttention => c.model.attention_heads > 0 && !swapped(ids::ATTENTION),
            FixKind::NoAuxHead => c.model.aux_head && !swapped(ids::AUX_HEAD),
        }
    }

    /// The overrides that make it, from `config`.
    pub fn sets(self, c: &Config) -> Vec<(String, String)> {
        let one = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        let identity_plus = |id: &str| {
            let mut list = c.model.identity.clone();
            list.push(id.to_string());
            one("model.identity", &crate::toml_value::strings(&list))
        };
        match self {
            FixKind::F32 => one("train.precision", "\"f32\""),
            FixKind::MixedBf16 => one("train.precision", "\"mixed-bf16\""),
            FixKind::MixedF16 => one("train.precision", "\"mixed-f16\""),
            FixKind::PureBf16 => one("train.precision", "\"bf16\""),
            FixKind::PureF16 => one("train.precision", "\"f16\""),
            FixKind::Checkpointing => one("train.checkpointing", "true"),
            FixKind::OutputStride16 => one("model.output_stride", "16"),
            FixKind::QuarterLoss => one("train.loss_resolution", "\"quarter\""),
            FixKind::Sgd => one("train.optimizer", "\"sgd\""),
            FixKind::NoMomentum => one("train.momentum", "0.0"),
            FixKind::NoAttention => identity_plus(ids::ATTENTION),
            FixKind::NoAuxHead => identity_plus(ids::AUX_HEAD),
        }
    }

    /// How much it changes the training a user meant: precision and recomputation leave the model
    /// and data as they are; the optimizer, resolution, loss and modules change what is learned.
    fn disruption(self) -> u8 {
        match self {
            FixKind::F32
            | FixKind::MixedBf16
            | FixKind::MixedF16
            | FixKind::PureBf16
            | FixKind::PureF16 => 0,
            FixKind::Checkpointing => 1,
            FixKind::Sgd | FixKind::NoMomentum => 2,
            FixKind::OutputStride16 => 3,
            FixKind::QuarterLoss => 4,
            FixKind::NoAttention | FixKind::NoAuxHead => 5,
        }
    }
}

/// How much a measured fix changes the training, for ranking the fixes that fit: a fix by its
/// kind, a capacity answer ("largest batch that fits: 2") by its axis.
pub fn disruption(f: &FixResult) -> u8 {
    match (FixKind::of(f.tag), AxisKind::of(f.tag)) {
        (Some(k), _) => k.disruption(),
        (None, Some(a)) => a.disruption(),
        (None, None) => LAST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// float64 is a suspect of its own: from it, float32 is the first fix, and the lower
    /// precisions are fixes too; from float32, float32 is no change.
    #[test]
    fn float32_is_a_fix_of_a_float64_run_only() {
        let mut c = Config::example();
        c.train.precision = Precision::F64;
        let fixes: Vec<FixKind> = FixKind::ALL.into_iter().filter(|f| f.applies(&c)).collect();
        assert_eq!(fixes[0], FixKind::F32);
        assert!(fixes.contains(&FixKind::MixedBf16) && fixes.contains(&FixKind::PureF16));
        assert_eq!(
            FixKind::F32.sets(&c),
            vec![("train.precision".to_string(), "\"f32\"".to_string())]
        );
        c.train.precision = Precision::F32;
        assert!(!FixKind::F32.applies(&c));
        assert_eq!(Precision::F64.weight_bytes(), 8);
    }
}
