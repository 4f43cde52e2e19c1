//! The numeric settings, all read by devices, the adapter and errors, so they sit in a leaf
//! (the casts themselves are `model/mixed_precision.rs`): [`Precision`], the dtype a step
//! computes in (fp32, or bf16 with fp32 master weights), and [`MatmulPrecision`], what an f32
//! matrix product computes in on a GPU.
//!
//! burn's CUDA kernels (cubek-matmul) compute an f32 matmul on TF32 tensor cores wherever the
//! device registers TF32 (sm_80 and later), without saying so. pipetrain's copy of cubecl-cuda
//! registers TF32 only on a device for which [`MatmulPrecision::Tf32`] was chosen before the
//! device's first use (`vendor/cubecl-cuda/PIPETRAIN.md`); on every other device f32 matmuls
//! multiply in IEEE fp32 on the FMA units. [`GemmLibrary`] says which library runs a GPU's dense
//! products (cuBLAS or burn's kernels). Like PyTorch's
//! `torch.backends.cuda.matmul.allow_tf32`, the choice holds per device for the whole process.
//! On a CPU there is no TF32: the setting is accepted and changes nothing.

use std::fmt;
use std::str::FromStr;

use burn::tensor::FloatDType;

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

/// Which library computes a GPU's dense products (the engine's GEMM seam: every `Linear`, the
/// split backward's dense layers and the GPT's projections).
///
/// On a CPU every product is burn's matmul whatever is chosen, and the choice is refused where it
/// would do nothing (the CLI's `--gemm` on a CPU device).
///
/// ```
/// use pipetrain_engine::GemmLibrary;
/// assert_eq!(GemmLibrary::default(), GemmLibrary::Cublas);
/// assert_eq!("burn".parse::<GemmLibrary>(), Ok(GemmLibrary::Burn));
/// assert_eq!(GemmLibrary::Cublas.to_string(), "cublas");
/// assert!("cutlass".parse::<GemmLibrary>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GemmLibrary {
    /// NVIDIA's cuBLAS (cuBLASLt for the products with a bias), loaded at run time: what
    /// PyTorch's dense products call. The default on CUDA.
    #[default]
    Cublas,
    /// burn's own kernels (cubecl's matmul, tuned by its autotune): the A/B baseline.
    Burn,
}

impl GemmLibrary {
    /// The environment variable that chooses the library when no flag does (what the device
    /// check sets for its A/B rows).
    pub const ENV: &'static str = "PIPETRAIN_GEMM";

    /// The library's name, as the CLI and `PIPETRAIN_GEMM` write it: `cublas`, `burn`.
    pub const fn name(self) -> &'static str {
        match self {
            GemmLibrary::Cublas => "cublas",
            GemmLibrary::Burn => "burn",
        }
    }

    /// The library a command uses: `flag` when given, else `PIPETRAIN_GEMM` when set, else
    /// `None` (the builder's default).
    ///
    /// # Errors
    /// When `PIPETRAIN_GEMM` is set to neither `cublas` nor `burn`: the message names the
    /// variable, its value and the remedy.
    pub fn chosen(flag: Option<Self>) -> Result<Option<Self>, String> {
        if flag.is_some() {
            return Ok(flag);
        }
        match std::env::var(Self::ENV) {
            Ok(value) => value.parse().map(Some).map_err(|e: String| {
                format!(
                    "{}={value}: {e}; set it to cublas or burn, or unset it",
                    Self::ENV
                )
            }),
            Err(_) => Ok(None),
        }
    }
}

impl fmt::Display for GemmLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GemmLibrary {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cublas" => Ok(GemmLibrary::Cublas),
            "burn" => Ok(GemmLibrary::Burn),
            other => Err(format!("GEMM library `{other}`: expected cublas or burn")),
        }
    }
}

/// The dtype a training or inference step computes in.
///
/// ```
/// use pipetrain_engine::Precision;
/// assert_eq!(Precision::default(), Precision::Fp32);
/// assert_eq!("bf16".parse::<Precision>(), Ok(Precision::Bf16));
/// assert_eq!(Precision::Bf16.to_string(), "bf16");
/// assert!("fp16".parse::<Precision>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Everything in fp32 (the default).
    #[default]
    Fp32,
    /// Forward and backward in bf16 — the layers' weights cast from fp32 masters for each
    /// forward, activations and input gradients in bf16, matmuls accumulating in fp32 where the
    /// backend does (flex: always; CUDA: tensor cores) — the loss in fp32, and fp32 master
    /// weights, gradient accumulation, all-reduce and optimizer.
    Bf16,
}

impl Precision {
    /// The name, as the CLI and a config file write it: `fp32`, `bf16`.
    pub const fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
        }
    }

    /// The dtype of the layers' compute: weights (as used), activations, input gradients.
    pub const fn compute_dtype(self) -> FloatDType {
        match self {
            Precision::Fp32 => FloatDType::F32,
            Precision::Bf16 => FloatDType::BF16,
        }
    }

    /// Whether the engine casts anything (not for fp32).
    pub const fn casts(self) -> bool {
        matches!(self, Precision::Bf16)
    }

    /// Bytes of one activation value in this precision (4 in fp32, 2 in bf16).
    pub const fn activation_bytes(self) -> usize {
        match self {
            Precision::Fp32 => 4,
            Precision::Bf16 => 2,
        }
    }

    /// Bytes per parameter of the cast copy a forward makes and the graph of a stashed
    /// micro-batch keeps until its backward (0 in fp32: the layers are used as they are).
    pub const fn compute_copy_bytes(self) -> usize {
        match self {
            Precision::Fp32 => 0,
            Precision::Bf16 => 2,
        }
    }

    /// Whether a split backward may run dense layers and split `Linear`s by hand. Under bf16
    /// they run on the autodiff path (their weight gradients come with the input gradient): a
    /// weight gradient computed once for a group of micro-batches would round to bf16 once
    /// where single-device training rounds once per micro-batch.
    pub const fn splits_by_hand(self) -> bool {
        matches!(self, Precision::Fp32)
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fp32" => Ok(Precision::Fp32),
            "bf16" => Ok(Precision::Bf16),
            other => Err(format!("precision `{other}`: expected fp32 or bf16")),
        }
    }
}
