//! The `[device]` section: the device a workload targets and how its trials run there. Every
//! field is optional; the command line overrides each.

use serde::{Deserialize, Serialize};

/// The device a workload targets. Every field is optional; the command line overrides each.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// `cuda` or `cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// A size such as `24GiB`, or bytes (a string or an integer).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "size_or_bytes"
    )]
    pub memory_limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_fraction: Option<f64>,
    /// A card name from `--gpu help`, e.g. `rtx3090`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Whose memory behaviour the trials reproduce (absent: PyTorch's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_model: Option<MemoryModel>,
    /// Whether CUDA trials run through burn's fusion layer (absent: yes, burn's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<bool>,
    /// The convolution kernel of CUDA trials (absent: implicit GEMM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convolution: Option<Convolution>,
}

/// How CUDA trials compute a convolution: other kernels, other scratch memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Convolution {
    /// Implicit GEMM, as PyTorch's cuDNN mostly does (the vendored burn-cubecl's default).
    #[default]
    Gemm,
    /// burn's direct convolution kernel.
    Direct,
}

/// Whose memory behaviour a trial reproduces: the same network, function and gradients either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryModel {
    /// What PyTorch keeps for backward (BatchNorm its input, ReLU its output, resize and dropout
    /// what PyTorch's kernels keep) and, on CUDA, an allocator that rounds, splits and releases
    /// cached blocks before giving up, as PyTorch's caching allocator does.
    #[default]
    Pytorch,
    /// What a burn 0.21 training run does: burn-nn's layers and cubecl's stock memory pools.
    Burn,
}

impl MemoryModel {
    pub fn name(self) -> &'static str {
        match self {
            MemoryModel::Pytorch => "pytorch",
            MemoryModel::Burn => "burn",
        }
    }
}

/// `memory_limit = "24GiB"` or `memory_limit = 25769803776` (bytes): the text either way, the
/// whole number with its unit.
fn size_or_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Text(String),
        Bytes(u64),
    }
    match Size::deserialize(d) {
        Ok(Size::Text(t)) => Ok(Some(t)),
        Ok(Size::Bytes(b)) => Ok(Some(format!("{b}B"))),
        Err(_) => Err(serde::de::Error::custom(
            "expected a size such as \"24GiB\" or a whole number of bytes",
        )),
    }
}

impl DeviceConfig {
    pub fn is_empty(&self) -> bool {
        *self == DeviceConfig::default()
    }
}
