//! [`MatmulPrecision`]: what an f32 matrix product computes in on a GPU.
//!
//! burn's CUDA kernels (cubek-matmul) compute an f32 matmul on TF32 tensor cores wherever the
//! device registers TF32 (sm_80 and later), without saying so. pipetrain's copy of cubecl-cuda
//! registers TF32 only on a device for which [`MatmulPrecision::Tf32`] was chosen before the
//! device's first use (`vendor/cubecl-cuda/PIPETRAIN.md`); on every other device f32 matmuls
//! multiply in IEEE fp32 on the FMA units. Like PyTorch's
//! `torch.backends.cuda.matmul.allow_tf32`, the choice holds per device for the whole process.
//! On a CPU there is no TF32: the setting is accepted and changes nothing.

use std::fmt;
use std::str::FromStr;

/// What an f32 matrix product computes in on a GPU (dense layers, attention, convolutions).
///
/// ```
/// use pipetrain_engine::MatmulPrecision;
/// assert_eq!(MatmulPrecision::default(), MatmulPrecision::Fp32);
/// assert_eq!("tf32".parse::<MatmulPrecision>(), Ok(MatmulPrecision::Tf32));
/// assert_eq!(MatmulPrecision::Tf32.to_string(), "tf32");
/// assert!("bf16".parse::<MatmulPrecision>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatmulPrecision {
    /// IEEE fp32 products and sums: the same arithmetic as the CPU and as PyTorch's default
    /// (`allow_tf32 = False`). The default: pipelined training must equal single-device
    /// training, and a GPU run should agree with a CPU run to fp32 rounding.
    #[default]
    Fp32,
    /// Tensor cores: inputs rounded to TF32 (10 mantissa bits), products summed in fp32, as
    /// PyTorch's `allow_tf32 = True` (`torch.set_float32_matmul_precision("high")`). Faster on
    /// sm_80+, about 1e-3 relative error per product.
    Tf32,
}

impl MatmulPrecision {
    /// The mode's name, as a config file or a plan writes it: `fp32`, `tf32`.
    pub const fn name(self) -> &'static str {
        match self {
            MatmulPrecision::Fp32 => "fp32",
            MatmulPrecision::Tf32 => "tf32",
        }
    }

    /// Whether f32 matmuls may use TF32 tensor cores.
    pub const fn allows_tf32(self) -> bool {
        matches!(self, MatmulPrecision::Tf32)
    }

    /// The precision a device runs with, from whether it registered TF32.
    pub const fn of_tf32(tf32: bool) -> Self {
        if tf32 {
            MatmulPrecision::Tf32
        } else {
            MatmulPrecision::Fp32
        }
    }
}

impl fmt::Display for MatmulPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MatmulPrecision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fp32" => Ok(MatmulPrecision::Fp32),
            "tf32" => Ok(MatmulPrecision::Tf32),
            other => Err(format!("matmul precision `{other}`: expected fp32 or tf32")),
        }
    }
}
