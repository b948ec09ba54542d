//! Environment switches that change what a trial measures (its kernels or its memory), read in one
//! place. The parent reads them once, refuses bad values before any trial, and puts them in the
//! journal key, so that a re-run with another switch measures again instead of answering from
//! trials made under the old one; the child gets them in its request (`Request::switches`), never
//! from its environment.

/// `off` runs CUDA trials on burn-cubecl without burn's fusion layer: other kernels, other memory.
pub const FUSION_ENV: &str = "OOM_BISECT_FUSION";
/// `direct` makes the patched burn-cubecl use upstream's direct convolution instead of implicit
/// GEMM (see vendor/README.md): other kernels, other scratch memory.
pub const CONV_ENV: &str = "OOM_BISECT_CONV";

/// The switches in force.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Switches {
    pub fusion: bool,
    pub direct_conv: bool,
    /// burn-cuda's autotune, a build feature: other kernels.
    pub autotune: bool,
}

impl Switches {
    /// Reads the environment; a value the trial would refuse is refused here, naming the variable.
    pub fn from_env() -> Result<Switches, String> {
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        Ok(Switches {
            fusion: fusion(&var(FUSION_ENV))?,
            direct_conv: conv(&var(CONV_ENV))?,
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

/// The value of `OOM_BISECT_FUSION`: unset, empty, `on` or `1` keep fusion (burn's default).
fn fusion(value: &str) -> Result<bool, String> {
    match value {
        "" | "on" | "1" => Ok(true),
        "off" | "0" if cfg!(feature = "unfused") => Ok(false),
        "off" | "0" => Err(format!(
            "{FUSION_ENV}={value}: this binary was built without the `unfused` feature (cargo build \
             --release --features unfused), which compiles the model a second time for the backend \
             without fusion"
        )),
        other => Err(format!("{FUSION_ENV}={other:?}: expected `on` or `off`")),
    }
}

/// The value of `OOM_BISECT_CONV`: unset or `gemm` for implicit GEMM, `direct` for upstream's kernel.
fn conv(value: &str) -> Result<bool, String> {
    match value {
        "" | "gemm" => Ok(false),
        "direct" => Ok(true),
        other => Err(format!("{CONV_ENV}={other:?}: expected `gemm` or `direct`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fusion off needs the second instantiation of the model; a build without it says which
    /// feature, instead of failing in the trial.
    #[test]
    fn fusion_off_names_the_feature_it_needs() {
        assert_eq!(fusion("on"), Ok(true));
        match fusion("off") {
            Ok(off) => assert!(cfg!(feature = "unfused") && !off),
            Err(e) => assert!(
                !cfg!(feature = "unfused") && e.contains("--features unfused"),
                "{e}"
            ),
        }
        assert!(fusion("sideways")
            .unwrap_err()
            .contains("expected `on` or `off`"));
    }
}
