//! The backend settings that change what a trial measures (its kernels or its memory): the config
//! keys `device.fusion` and `device.convolution`, and the build's autotune. The parent resolves
//! them once, refuses what the binary cannot run before any trial, and puts them in the journal key,
//! so that a run with another setting measures again instead of answering from trials made under
//! the old one; the child gets them in its request (`Request::switches`).

use deeplab::config::{Convolution, DeviceConfig};

/// The variable the vendored burn-cubecl reads for the convolution kernel (vendor/README.md): set by
/// the child from its request, never read from the user's environment.
pub const CONV_ENV: &str = "OOM_BISECT_CONV";
/// What fusion was once set by; refused when set, so that it cannot be believed to act.
const FUSION_ENV: &str = "OOM_BISECT_FUSION";

/// The switches in force.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Switches {
    pub fusion: bool,
    pub direct_conv: bool,
    /// burn-cuda's autotune, a build feature: other kernels.
    pub autotune: bool,
}

impl Switches {
    /// From the workload's `[device]` section; a setting this binary cannot run is refused here,
    /// naming the key, as is a variable that would look as if it set one.
    pub fn from_config(device: &DeviceConfig) -> Result<Switches, String> {
        for (var, key) in [
            (FUSION_ENV, "device.fusion"),
            (CONV_ENV, "device.convolution"),
        ] {
            if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
                return Err(format!(
                    "{var} is set, but this setting is the config key `{key}` (or --set \
                     {key}=...); unset {var}"
                ));
            }
        }
        let fusion = device.fusion.unwrap_or(true);
        if !fusion && !cfg!(feature = "unfused") {
            return Err(
                "device.fusion = false: this binary was built without the `unfused` \
                 feature (cargo build --release --features unfused), which compiles the model a \
                 second time for the backend without fusion"
                    .into(),
            );
        }
        Ok(Switches {
            fusion,
            direct_conv: device.convolution.unwrap_or_default() == Convolution::Direct,
            autotune: cfg!(feature = "autotune"),
        })
    }

    /// Sets the variable the vendored burn-cubecl reads for the convolution kernel, in the child,
    /// before the device is touched. Always set, so that an inherited value cannot leak in.
    pub fn apply_conv(&self) {
        std::env::set_var(CONV_ENV, if self.direct_conv { "direct" } else { "gemm" });
    }

    /// Everything here in one line, for the journal key and the report.
    pub fn key(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        format!(
            "fusion={} conv={} autotune={}",
            on(self.fusion),
            if self.direct_conv { "direct" } else { "gemm" },
            on(self.autotune)
        )
    }
}

impl Default for Switches {
    /// burn's defaults: fusion, implicit GEMM, autotune as built.
    fn default() -> Switches {
        Switches {
            fusion: true,
            direct_conv: false,
            autotune: cfg!(feature = "autotune"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fusion off needs the second instantiation of the model; a build without it says which
    /// feature, instead of failing in the trial.
    #[test]
    fn fusion_off_names_the_feature_it_needs() {
        let on = Switches::from_config(&DeviceConfig::default()).unwrap();
        assert!(on.fusion && !on.direct_conv);
        let off = DeviceConfig {
            fusion: Some(false),
            convolution: Some(Convolution::Direct),
            ..DeviceConfig::default()
        };
        match Switches::from_config(&off) {
            Ok(s) => assert!(cfg!(feature = "unfused") && !s.fusion && s.direct_conv),
            Err(e) => assert!(
                !cfg!(feature = "unfused") && e.contains("--features unfused"),
                "{e}"
            ),
        }
    }
}
