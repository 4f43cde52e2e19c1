//! [`Precision`]: the dtype a step computes in — fp32, or bf16 with fp32 master weights.
//!
//! Under [`Precision::Bf16`] the engine casts at four places, and nowhere else:
//!
//! 1. **Weights, per forward.** Before a micro-batch's forward, every float parameter of the
//!    stage's layers is cast to bf16 *on the graph* (a cast of the fp32 master, as
//!    `torch.autocast` casts a weight for each op). The layers then compute in bf16 throughout;
//!    the cast's backward turns each micro-batch's bf16 weight gradient into fp32 before it is
//!    accumulated. Masters, accumulated gradients, the all-reduce, the optimizer and its state
//!    and checkpoints stay fp32.
//! 2. **Inputs, per stage.** A stage's float input is cast to bf16 where it enters (stage 0's
//!    data, and whatever a transport delivers), so activations and input gradients cross stages
//!    in bf16: half the bytes.
//! 3. **The loss in fp32.** The last stage's output is cast to fp32 before the loss, whose
//!    reduction (softmax, log, mean) runs in fp32.
//! 4. **Seeds.** The gradient that seeds a stage's backward is cast to its output's dtype.
//!
//! A layer may compute a part in fp32 itself (the built-in GPT runs layer norm and softmax in
//! fp32, as autocast does): [`upcast`] and [`downcast_like`] are the two casts it needs. The
//! single-device reference ([`SingleDevice`](crate::SingleDevice)) casts at the same places, so
//! a bf16 pipeline equals it as an fp32 one does. `docs/guide.md` ("Mixed precision") has the
//! table of which op runs in which dtype, beside PyTorch autocast's.

use std::fmt;
use std::str::FromStr;

use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::{DType, FloatDType};

use crate::activation::Activation;
use crate::adapter;

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

    /// `layers` with every float parameter cast to the compute dtype, on the graph: the copy a
    /// forward runs (fp32: the layers as they are).
    pub fn layers<L: Module>(self, layers: &[L]) -> Vec<L> {
        layers
            .iter()
            .map(|l| match self {
                Precision::Fp32 => l.clone(),
                Precision::Bf16 => adapter::cast_parameters(l.clone(), self.compute_dtype()),
            })
            .collect()
    }

    /// `x`'s float tensors in the compute dtype (int tensors as they are): a stage's input.
    pub fn input(self, x: Activation) -> Activation {
        if !self.casts() {
            return x;
        }
        x.cast_floats(self.compute_dtype())
    }

    /// `x`'s float tensors in fp32: what the loss takes.
    pub fn output(self, x: Activation) -> Activation {
        if !self.casts() {
            return x;
        }
        x.cast_floats(FloatDType::F32)
    }
}

/// `x` in fp32, on the graph (a no-op when it is): the start of a part of a layer that computes
/// in fp32 under bf16 — a layer norm, a softmax. End it with [`downcast_like`].
///
/// ```
/// use burn::prelude::*;
/// use burn::tensor::{DType, FloatDType};
/// use pipetrain_engine::{downcast_like, upcast};
/// let x = Tensor::<2>::ones([2, 3], &Device::flex()).cast(FloatDType::BF16);
/// let wide = upcast(x.clone());
/// assert_eq!(wide.dtype(), DType::F32);
/// assert_eq!(downcast_like(wide, &x).dtype(), DType::BF16);
/// ```
pub fn upcast<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if x.dtype() == DType::F32 {
        x
    } else {
        x.cast(FloatDType::F32)
    }
}

/// `linear` applied to `x` (`[…, d_input]`, any rank from 2) exactly as `torch.autocast` runs
/// it: in fp32, burn's own `Linear::forward`; in bf16, the bf16 values of `x` and of the weight
/// multiplied exactly and summed in fp32 with the bias, and the result rounded to bf16 once —
/// a bf16 GEMM with f32 accumulation and output, as PyTorch's `addmm`. burn's `Linear` in bf16
/// (what the built-in models run) rounds twice: its product to bf16, then the sum with the
/// bias.
///
/// The price: the product runs as an fp32 GEMM over the bf16 values, and the graph keeps
/// the fp32 copies of `x` and of the weight for the backward — more memory than burn's bf16
/// `Linear` (which keeps bf16 ones), and on a GPU no bf16 tensor cores. Use it where matching
/// an autocast run bit for bit matters more than memory and speed (`tests/torch_bf16.rs`:
/// an MLP through it equals autocast's losses to 2.4e-7).
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::prelude::*;
/// use burn::tensor::{DType, FloatDType};
/// let device = Device::flex();
/// let layer = LinearConfig::new(3, 2).init(&device);
/// let x = Tensor::<2>::ones([4, 3], &device);
/// // fp32: exactly burn's forward.
/// let y = pipetrain_engine::linear(&layer, x.clone());
/// assert_eq!(y.into_data(), layer.forward(x.clone()).into_data());
/// // bf16 in, bf16 out.
/// let y = pipetrain_engine::linear(&layer, x.cast(FloatDType::BF16));
/// assert_eq!(y.dtype(), DType::BF16);
/// ```
pub fn linear<const D: usize>(linear: &Linear, x: Tensor<D>) -> Tensor<D> {
    if x.dtype() == DType::F32 {
        return linear.forward(x);
    }
    let dims = x.dims();
    let [fan_in, fan_out] = linear.weight.dims();
    let rows: usize = dims[..D - 1].iter().product();
    let y = narrow_product(
        x.reshape([rows, fan_in]),
        linear.weight.val(),
        linear.bias.as_ref().map(|b| b.val()),
    );
    let mut out = dims;
    out[D - 1] = fan_out;
    y.reshape(out)
}

/// `x·W + b` for narrow (bf16) `x` and weights: exact products summed in fp32 with the bias,
/// rounded once to `x`'s dtype (see [`linear`]). Its backward rounds `dX` and `dW` once too.
fn narrow_product(x: Tensor<2>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<2> {
    let y = upcast(x.clone()).matmul(upcast(weight));
    let y = match bias {
        Some(b) => y + upcast(b).unsqueeze(),
        None => y,
    };
    downcast_like(y, &x)
}

/// `module` with its float parameters in fp32, on the graph (a no-op for those that are): a
/// module that computes in fp32 inside a bf16 layer — a layer norm, given an [`upcast`] input.
/// Its parameters keep their ids, so their gradients reach the fp32 masters.
pub fn upcast_module<M: Module>(module: &M) -> M {
    adapter::cast_parameters(module.clone(), FloatDType::F32)
}

/// `x` in the dtype of `like` (a no-op when it is already): the end of an fp32 part begun with
/// [`upcast`].
pub fn downcast_like<const D: usize, const E: usize>(x: Tensor<D>, like: &Tensor<E>) -> Tensor<D> {
    let dtype = like.dtype();
    if x.dtype() == dtype {
        return x;
    }
    x.cast(dtype)
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
