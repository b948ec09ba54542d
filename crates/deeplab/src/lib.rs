//! DeepLabV3+ (Chen et al., 2018) in burn, generic over the backend, with every knob the search turns:
//! identity swaps by stable module id, truncation after any stage, input size, output stride, batch,
//! precision, optimizer and phase. One [`Config`] reads and writes TOML.

pub mod arch;
pub mod attention;
pub mod blocks;
pub mod checkpoint;
pub mod config;
pub mod estimate;
pub mod model;
mod primitive;
pub mod pytorch;
pub mod resize;
pub mod scaler;
pub mod train;

pub use arch::{ids, Architecture, ModuleInfo, StageInfo};
pub use config::{
    AttentionKernel, Backbone, Config, ConfigError, DataConfig, DeviceConfig, LossResolution,
    MemoryModel, ModelConfig, Optimizer, Phase, Precision, Recompute, TrainConfig,
};
pub use estimate::{Breakdown, MemoryEstimate, Resident, StageEstimate};
pub use model::DeepLabV3Plus;
pub use train::{Point, StepResult, Trainer};
