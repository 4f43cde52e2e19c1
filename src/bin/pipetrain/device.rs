//! `--device cpu|cuda|cuda:N`: where every stage of every replica computes.
//!
//! CPU (burn's `flex` backend) is the default and the reference. CUDA needs a build with
//! `--features cuda` (burn's CUDA backend; it builds only where a CUDA toolkit is installed).

use std::str::FromStr;

use burn::prelude::*;

/// A device named on the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceSpec {
    /// burn's `flex` CPU backend.
    #[default]
    Cpu,
    /// CUDA GPU number `n`.
    Cuda(usize),
}

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| format!("--device {s}: expected cpu, cuda or cuda:N (N = 0, 1, …)")),
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => write!(f, "cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// The burn device.
    ///
    /// # Errors
    /// CUDA in a build without the `cuda` feature.
    pub fn device(self) -> Result<Device, String> {
        match self {
            DeviceSpec::Cpu => Ok(Device::flex()),
            #[cfg(feature = "cuda")]
            DeviceSpec::Cuda(n) => Ok(Device::cuda(n)),
            #[cfg(not(feature = "cuda"))]
            DeviceSpec::Cuda(_) => Err(format!(
                "--device {self}: this pipetrain was built without CUDA; rebuild with \
                 `cargo build --release --features cuda` (needs a CUDA toolkit), or use \
                 --device cpu"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceSpec;

    #[test]
    fn parses_and_prints() {
        for (text, spec) in [
            ("cpu", DeviceSpec::Cpu),
            ("cuda", DeviceSpec::Cuda(0)),
            ("cuda:3", DeviceSpec::Cuda(3)),
        ] {
            assert_eq!(text.parse::<DeviceSpec>().unwrap(), spec);
        }
        assert_eq!(DeviceSpec::Cuda(3).to_string(), "cuda:3");
        let err = "gpu".parse::<DeviceSpec>().unwrap_err();
        assert!(
            err.contains("--device gpu") && err.contains("cuda:N"),
            "{err}"
        );
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_says_how_to_get_it() {
        let err = DeviceSpec::Cuda(0).device().unwrap_err();
        assert!(err.contains("--features cuda"), "{err}");
    }
}
