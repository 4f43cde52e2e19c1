//! `--device cpu|cuda|cuda:N[,…]`: where the stages of every replica compute.
//!
//! CPU (burn's `flex` backend) is the default. CUDA needs a build with `--features cuda`
//! (burn's CUDA backend; it builds offline with no CUDA toolkit and loads libcuda and libnvrtc
//! at run time); each CUDA device is probed before anything starts
//! ([`pipetrain::engine::device::cuda`]).
//! A comma list places workers: one device for all, one per stage, or one per worker
//! (replica-major), as [`pipetrain::PipelineBuilder::devices`] takes them.

use std::str::FromStr;

use burn::prelude::*;
use pipetrain::MatmulPrecision;
use pipetrain::engine::EngineError;

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
    /// The burn device of `--device`; a GPU's f32 matmuls at `precision` (`--matmul-precision`;
    /// a CPU has no TF32 and ignores it).
    ///
    /// # Errors
    /// As [`device_of`](Self::device_of).
    pub fn device(self, precision: MatmulPrecision) -> Result<Device, String> {
        self.device_of("--device", precision)
    }

    /// The burn device, given as `flag` (`--device`, `--verify-device`), which its errors name;
    /// a GPU's f32 matmuls at `precision`.
    ///
    /// # Errors
    /// CUDA in a build without the `cuda` feature, or a CUDA device that cannot run a first
    /// operation (no driver, no such GPU): the message carries the driver's words.
    pub fn device_of(self, flag: &str, precision: MatmulPrecision) -> Result<Device, String> {
        match self {
            DeviceSpec::Cpu => Ok(Device::flex()),
            DeviceSpec::Cuda(n) => {
                pipetrain::engine::device::cuda_with(n, precision).map_err(|e| match e {
                    EngineError::NotBuilt { .. } => format!(
                        "{flag} {self}: this pipetrain was built without CUDA; rebuild with \
                         `cargo build --release --features cuda` (builds offline, no CUDA \
                         toolkit needed), or use {flag} cpu"
                    ),
                    other => format!(
                        "{flag} {self}: CUDA is not usable here: {other}; or use {flag} cpu"
                    ),
                })
            }
        }
    }
}

/// `--device a,b,…`: one device for every worker, one per stage, or one per worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Devices(Vec<DeviceSpec>);

impl Default for Devices {
    fn default() -> Self {
        Devices(vec![DeviceSpec::Cpu])
    }
}

impl FromStr for Devices {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split(',')
            .map(|d| d.trim().parse())
            .collect::<Result<Vec<_>, _>>()
            .map(Devices)
    }
}

impl std::fmt::Display for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "{}", names.join(","))
    }
}

impl Devices {
    /// The first device: where the model is initialised, the data is made and the `--verify`
    /// reference trains.
    pub fn first(&self) -> DeviceSpec {
        self.0[0]
    }

    /// Whether every device given is a CPU.
    pub fn all_cpu(&self) -> bool {
        self.0.iter().all(|d| *d == DeviceSpec::Cpu)
    }

    /// The burn devices, in the order given, GPUs at `precision`.
    ///
    /// # Errors
    /// As [`DeviceSpec::device`], for the first device that fails.
    pub fn devices(&self, precision: MatmulPrecision) -> Result<Vec<Device>, String> {
        self.0.iter().map(|d| d.device(precision)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{DeviceSpec, Devices};

    #[test]
    fn lists_parse_and_print() {
        let list: Devices = "cpu, cuda:1,cuda".parse().unwrap();
        assert_eq!(list.to_string(), "cpu,cuda:1,cuda:0");
        assert_eq!(list.first(), DeviceSpec::Cpu);
        let err = "cpu,gpu".parse::<Devices>().unwrap_err();
        assert!(err.contains("--device gpu"), "{err}");
    }

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
        let err = DeviceSpec::Cuda(0)
            .device(pipetrain::MatmulPrecision::Fp32)
            .unwrap_err();
        assert!(err.contains("--features cuda"), "{err}");
        // Issue 38: --verify-device cuda:0 was reported as --device.
        let err = DeviceSpec::Cuda(0)
            .device_of("--verify-device", pipetrain::MatmulPrecision::Fp32)
            .unwrap_err();
        assert!(
            err.starts_with("--verify-device cuda:0: ") && err.ends_with("use --verify-device cpu"),
            "{err}"
        );
    }
}
