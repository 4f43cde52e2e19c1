//! Mixed precision's casts: what [`Precision`] (the setting, in `precision.rs`) does to a step
//! — fp32, or bf16 with fp32 master weights.
//!
//! Under [`Precision::Bf16`] the engine casts at four places, and nowhere else:
//!
//! 1. **Weights, per forward.** Before a micro-batch's forward, every float parameter of the
//!    stage's layers is cast to bf16 *on the graph* (a cast of the fp32 master, as
//!    `torch.autocast` casts a weight for each op). The layers then compute in bf16 throughout;
//!    the cast's backward turns each micro-batch's bf16 weight gradient into fp32 before it is
//!    accumulated. Masters, accumulated gradients, the all-reduce, the optimizer and its state
//!    and checkpoints stay fp32. A layer may cast fewer ([`Layer::compute_copy`]): the built-in
//!    Llama casts its `Linear`s only, as autocast does.
//! 2. **Inputs, per stage.** A stage's float input is cast to bf16 where it enters (stage 0's
//!    data, and whatever a transport delivers), so activations and input gradients cross stages
//!    in bf16: half the bytes. Not where the stage's first layer [keeps its input's
//!    dtype](Layer::keeps_input_dtype) (the Llama's fp32 residual stream).
//! 3. **The loss in fp32.** The last stage's output is cast to fp32 before the loss, whose
//!    reduction (softmax, log, mean) runs in fp32.
//! 4. **Seeds.** The gradient that seeds a stage's backward is cast to its output's dtype.
//!
//! A layer may compute a part in fp32 itself (the built-in GPT runs layer norm and softmax in
//! fp32, as autocast does): [`upcast`] and [`downcast_like`] are the two casts it needs. The
//! single-device reference ([`SingleDevice`](crate::SingleDevice)) casts at the same places, so
//! a bf16 pipeline equals it as an fp32 one does. `docs/guide.md` ("Mixed precision") has the
//! table of which op runs in which dtype, beside PyTorch autocast's.

use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::{DType, FloatDType};

use crate::adapter;
use crate::model::activation::Activation;
use crate::model::layer::Layer;
use crate::precision::Precision;

impl Precision {
    /// The copies of `layers` a forward runs: each layer's [`Layer::compute_copy`] in the
    /// compute dtype, cast on the graph (by default every float parameter); fp32: the layers
    /// as they are.
    pub fn layers<L: Layer>(self, layers: &[L]) -> Vec<L> {
        layers
            .iter()
            .map(|l| match self {
                Precision::Fp32 => l.clone(),
                Precision::Bf16 => l.compute_copy(self.compute_dtype()),
            })
            .collect()
    }

    /// A stage's input, given the stage's first layer: its float tensors in the compute dtype
    /// (int tensors as they are), unless that layer [keeps its input's
    /// dtype](Layer::keeps_input_dtype).
    pub fn input<L: Layer>(self, first: Option<&L>, x: Activation) -> Activation {
        if !self.casts() || first.is_some_and(Layer::keeps_input_dtype) {
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

/// `linear` applied to `x` (`[…, d_input]`, any rank from 2) as `torch.autocast` runs it,
/// through the engine's GEMM seam (one product for every row, `x` reshaped to `[rows,
/// d_input]`):
///
/// - in fp32, `x·W + b` in fp32 — on a CPU the same operations, and so the same bits, as burn's
///   `Linear::forward` on a rank-2 input; on CUDA cuBLAS where it is chosen
///   ([`GemmLibrary`](crate::GemmLibrary));
/// - in bf16, the bf16 values of `x` and of the weight multiplied exactly and summed in fp32
///   with the bias, and the result rounded to bf16 **once**, as PyTorch's `addmm` under
///   autocast. burn's own bf16 `Linear` rounds twice (its product, then the sum with the bias).
///
/// Its backward is a custom op: the graph keeps `x` and the weight as they came (bf16 under
/// bf16, no fp32 copies), and `dX = dY·Wᵀ`, `dW = Xᵀ·dY` are one product each through the same
/// seam, rounded once; the bias gradient is summed in fp32 and rounded once. The built-in models
/// run every `Linear` through it, so a bf16 run equals an autocast run to fp32 rounding
/// (`tests/torch/bf16.rs`).
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
///
/// # Panics
///
/// If `x`'s last dimension is not the layer's input width, as burn's `Linear` does.
pub fn linear<const D: usize>(linear: &Linear, x: Tensor<D>) -> Tensor<D> {
    let dims = x.dims();
    let [fan_in, fan_out] = linear.weight.dims();
    assert_eq!(
        dims[D - 1],
        fan_in,
        "this Linear takes {fan_in} input features, got {dims:?}"
    );
    let rows: usize = dims[..D - 1].iter().product();
    let y = adapter::linear_rows(
        x.reshape([rows, fan_in]),
        linear.weight.val(),
        linear.bias.as_ref().map(|b| b.val()),
    );
    let mut out = dims;
    out[D - 1] = fan_out;
    y.reshape(out)
}

/// `a·b` for two batches of matrices (rank 3 or 4, the same leading dimensions, `[.., m, k]·[..,
/// k, n]`) through the engine's GEMM seam: attention's `q·kᵀ` and `weights·v`. On a CPU burn's
/// matmul, the same bits as `a.matmul(b)`; on CUDA cuBLAS's strided batched product where it is
/// chosen ([`GemmLibrary`](crate::GemmLibrary)), with a transposed operand (`k.swap_dims(2, 3)`)
/// as a transpose flag. In bf16 the products accumulate in fp32 and round once.
///
/// ```
/// use burn::prelude::*;
/// let device = Device::flex();
/// let a = Tensor::<3>::ones([2, 3, 4], &device);
/// let b = Tensor::<3>::ones([2, 4, 5], &device);
/// let c = pipetrain_engine::matmul(a.clone(), b.clone());
/// assert_eq!(c.into_data(), a.matmul(b).into_data());
/// ```
///
/// # Panics
///
/// If the ranks are not 3 or 4, or the shapes do not multiply (as burn's `matmul`).
pub fn matmul<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
    assert!(
        (3..=4).contains(&D),
        "pipetrain_engine::matmul takes batches of rank 3 or 4, got rank {D}"
    );
    let (sa, sb) = (a.dims(), b.dims());
    assert!(
        sa[..D - 2] == sb[..D - 2] && sa[D - 1] == sb[D - 2],
        "pipetrain_engine::matmul: {sa:?}·{sb:?} do not multiply (the same batch, [.., m, k]·[.., k, n])"
    );
    adapter::batched_product(a, b)
}

/// `module` with its float parameters in fp32, on the graph (a no-op for those that are): a
/// module that computes in fp32 inside a bf16 layer — a layer norm, given an [`upcast`] input.
/// Its parameters keep their ids, so their gradients reach the fp32 masters.
pub fn upcast_module<M: Module>(module: &M) -> M {
    adapter::cast_parameters(module.clone(), FloatDType::F32)
}

/// Bytes of the cast copy `layer`'s compute copy (`layer` as [`Precision::layers`] made it)
/// holds: its float parameters in a dtype other than fp32 (0 in fp32; under bf16 every
/// parameter's 2 bytes by default, the `Linear`s' only for a layer that casts as autocast does).
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::prelude::*;
/// use burn::tensor::FloatDType;
/// let layer = LinearConfig::new(3, 2).init(&Device::flex()); // 6 weights and 2 biases
/// assert_eq!(pipetrain_engine::cast_copy_bytes(&layer), 0);
/// let copy = pipetrain_engine::cast_module(&layer, FloatDType::BF16);
/// assert_eq!(pipetrain_engine::cast_copy_bytes(&copy), 16);
/// ```
pub fn cast_copy_bytes<M: Module>(layer: &M) -> u64 {
    adapter::cast_copy_bytes(layer)
}

/// `module` with its float parameters in `dtype`, on the graph (a no-op for those that are):
/// what a [`Layer::compute_copy`] casts, one sub-module at a time — a `Linear` cast to bf16
/// while the layer's norms stay fp32, as `torch.autocast` runs them. Its parameters keep their
/// ids, so their gradients reach the fp32 masters.
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::prelude::*;
/// use burn::tensor::{DType, FloatDType};
/// let layer = LinearConfig::new(3, 2).init(&Device::flex());
/// let copy = pipetrain_engine::cast_module(&layer, FloatDType::BF16);
/// assert_eq!(copy.weight.val().dtype(), DType::BF16);
/// assert_eq!(layer.weight.val().dtype(), DType::F32);
/// ```
pub fn cast_module<M: Module>(module: &M, dtype: FloatDType) -> M {
    adapter::cast_parameters(module.clone(), dtype)
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
