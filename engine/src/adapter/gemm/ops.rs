//! The extension trait and its operands: `y = x·w (+ b)` for row-major `x: [rows, k]` and `w:
//! [k, n]` (either may be a transposed view: burn keeps a transpose as strides, and cuBLAS takes
//! it as a flag), with autocast's one rounding for narrow dtypes.

// burn-ndarray is deprecated upstream; tests still place a second CPU device on it, and the
// extension's generated dispatch names it beside the trait (an item-level allow misses it).
#![allow(deprecated)]

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, ExtensionType, TensorMetadata, backend_extension};
use burn::prelude::*;
use burn::tensor::{DType, FloatDType, Shape};

/// The bias of a product: added in fp32 before the one rounding, or none.
#[derive(ExtensionType)]
pub(crate) enum Bias<B: Backend> {
    /// A bias of shape `[n]`, broadcast over the rows.
    Add(FloatTensor<B>),
    /// No bias: `y = x·w`.
    Zero,
}

/// The dense product of every backend: `y = x·w (+ b)`.
///
/// fp32 operands multiply and sum in fp32. Narrower operands (bf16) are widened exactly to
/// fp32, multiplied and summed in fp32 with the widened bias, and the sum is rounded once to the
/// operands' dtype: PyTorch autocast's `addmm` (bf16 operands, fp32 accumulation, one rounding).
/// burn's own bf16 `Linear` rounds twice (its product, then the sum with the bias).
#[backend_extension(Autodiff, Flex, NdArray: cfg(feature = "ndarray"), Cube: cfg(feature = "cuda"))]
pub(crate) trait GemmOps: Backend {
    /// `x·w (+ b)`; see the trait's docs. Backends without a library of their own run
    /// [`burn_linear`]: burn's matmul.
    fn gemm_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        #[extension_type] bias: Bias<Self>,
    ) -> FloatTensor<Self> {
        burn_linear::<Self>(x, weight, bias)
    }

    /// `a·b` of two batches of matrices, rank 3 or 4 (`[.., m, k]·[.., k, n]`, the same leading
    /// dimensions): attention's products. Backends without a library of their own run burn's
    /// matmul, as before the seam (a narrow dtype's product is then burn's, which on flex and
    /// cubecl accumulates in fp32 and rounds once).
    fn gemm_batched(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_matmul(a, b)
    }
}

impl GemmOps for burn::backend::Flex {}

#[cfg(feature = "ndarray")]
impl GemmOps for burn::backend::NdArray {}

/// `x·w (+ b)` through burn's own matmul on `B`, with the semantics of [`GemmOps`]: in fp32 the
/// same operations as burn's `Linear` (`matmul`, then the bias broadcast from `[1, n]`), so CPU
/// runs keep their bits; in a narrow dtype, widened to fp32 and rounded once.
pub(crate) fn burn_linear<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Bias<B>,
) -> FloatTensor<B> {
    let dtype = x.dtype();
    let n = weight.shape()[1];
    if dtype == DType::F32 {
        let y = B::float_matmul(x, weight);
        return match bias {
            Bias::Add(b) => B::float_add(y, B::float_reshape(b, Shape::new([1, n]))),
            Bias::Zero => y,
        };
    }
    let wide = |t: FloatTensor<B>| B::float_cast(t, FloatDType::F32);
    let y = B::float_matmul(wide(x), wide(weight));
    let y = match bias {
        Bias::Add(b) => B::float_add(y, B::float_reshape(wide(b), Shape::new([1, n]))),
        Bias::Zero => y,
    };
    B::float_cast(y, FloatDType::from(dtype))
}

/// `x·w + b` of rank-2 tensors through the seam, on or off the graph (a tracked operand records
/// the custom backward of [`super::backward`]).
pub(crate) fn linear_rows(x: Tensor<2>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<2> {
    let bias = match bias {
        Some(b) => Bias::Add(b.into_dispatch()),
        None => Bias::Zero,
    };
    let y = <burn::backend::Dispatch as GemmOps>::gemm_linear(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias,
    );
    Tensor::from_dispatch(y)
}

/// `a·b` of two batches of matrices of rank `D` (3 or 4, the same leading dimensions) through
/// the seam, on or off the graph.
pub(crate) fn batched_product<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
    let c =
        <burn::backend::Dispatch as GemmOps>::gemm_batched(a.into_dispatch(), b.into_dispatch());
    Tensor::from_dispatch(c)
}

/// `a·b` of rank-2 tensors through the seam (either may be a transposed view).
pub(crate) fn product_rows(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    linear_rows(a, b, None)
}
