//! Validation: every value in range, with the key and what is allowed; never a silent default.

use super::*;

/// Upper bounds: far above any real training run, low enough that no axis of the search grows past
/// a few thousand values. Their products can still pass 2⁶⁴ bytes: `Architecture::new` refuses a
/// configuration that large as a whole.
pub const MAX_CLASSES: usize = 100_000;
pub const MAX_CHANNELS: usize = 65_536;
pub const MAX_RATE: usize = 1_024;
pub const MAX_BATCH: usize = 65_536;
pub const MAX_SIDE: usize = 65_536;
pub const MAX_STEPS: usize = 1_000;

/// `value` at most `max`, or an error naming the key and what is allowed.
pub(crate) fn at_most(key: &str, value: usize, max: usize) -> Result<(), ConfigError> {
    if value > max {
        return Err(ConfigError::new(
            key,
            format!("{value} is too large (allowed: at most {max})"),
        ));
    }
    Ok(())
}

impl ModelConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        at_most("model.classes", self.classes, MAX_CLASSES)?;
        at_most("model.aspp_channels", self.aspp_channels, MAX_CHANNELS)?;
        at_most("model.attention_heads", self.attention_heads, MAX_CHANNELS)?;
        for r in self.aspp_rates.unwrap_or([1; 3]) {
            at_most("model.aspp_rates", r, MAX_RATE)?;
        }
        if ![8, 16, 32].contains(&self.output_stride) {
            return Err(ConfigError::new(
                "model.output_stride",
                format!("{} is not allowed (allowed: 8, 16, 32)", self.output_stride),
            ));
        }
        if self.classes == 0 {
            return Err(ConfigError::new("model.classes", "must be at least 1"));
        }
        if self.aspp_rates.is_some_and(|r| r.contains(&0)) {
            return Err(ConfigError::new(
                "model.aspp_rates",
                "rates must be at least 1",
            ));
        }
        if self.aspp_channels == 0 {
            return Err(ConfigError::new(
                "model.aspp_channels",
                "must be at least 1",
            ));
        }
        let heads = self.attention_heads;
        if heads > 0 && !self.aspp_channels.is_multiple_of(heads) {
            return Err(ConfigError::new(
                "model.attention_heads",
                format!(
                    "{heads} does not divide model.aspp_channels ({}); heads must divide the channels",
                    self.aspp_channels
                ),
            ));
        }
        Ok(())
    }
}

impl DataConfig {
    pub(crate) fn validate(&self, output_stride: usize) -> Result<(), ConfigError> {
        at_most("data.batch", self.batch, MAX_BATCH)?;
        at_most("data.size", self.size[0].max(self.size[1]), MAX_SIDE)?;
        if self.batch == 0 {
            return Err(ConfigError::new("data.batch", "must be at least 1"));
        }
        // The stem and layer1 always downsample by 4; deeper stages by the output stride.
        let multiple = output_stride.max(4);
        for (i, side) in self.size.iter().enumerate() {
            if *side == 0 || !side.is_multiple_of(multiple) {
                return Err(ConfigError::new(
                    "data.size",
                    format!(
                        "{} {side} is not a positive multiple of the output stride {output_stride} (try {})",
                        ["height", "width"][i],
                        ((side / multiple).max(1)) * multiple
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl TrainConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let steps = self.steps.unwrap_or(1);
        at_most("train.steps", steps, MAX_STEPS)?;
        if steps == 0 {
            return Err(ConfigError::new("train.steps", "must be at least 1"));
        }
        if let Some(share) = self.one_step_below {
            if !(0.0..1.0).contains(&share) {
                return Err(ConfigError::new(
                    "train.one_step_below",
                    "must be a share of the ceiling in [0, 1): 0 runs every step",
                ));
            }
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(ConfigError::new(
                "train.learning_rate",
                "must be a positive number",
            ));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(ConfigError::new("train.momentum", "must be in [0, 1)"));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(ConfigError::new(
                "train.weight_decay",
                "must be zero or positive",
            ));
        }
        Ok(())
    }
}

impl DeviceConfig {
    /// The memory model in force (PyTorch's unless the config says otherwise).
    pub fn memory_model(&self) -> MemoryModel {
        self.memory_model.unwrap_or_default()
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(f) = self.memory_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(ConfigError::new(
                    "device.memory_fraction",
                    format!("{f} is not in (0, 1]"),
                ));
            }
        }
        if let Some(b) = &self.backend {
            if b != "cuda" && b != "cpu" {
                return Err(ConfigError::new(
                    "device.backend",
                    format!("`{b}` is not allowed (allowed: cuda, cpu)"),
                ));
            }
        }
        Ok(())
    }
}
