//! [`GemmOps`] on burn's CUDA backend: cuBLAS (through pipetrain's copy of cubecl-cuda,
//! `cubecl_cuda::blas`, the one place with the FFI) when it is chosen for the device, else
//! burn's own kernels ([`burn_linear`]).
//!
//! A product goes to cuBLAS when its operands are fp32 or bf16 of one dtype, rank 2 (or, for
//! [`GemmOps::gemm_batched`], batches of rank 3 or 4 with a uniform batch stride), each
//! row-major or a transposed view (burn keeps a transpose as strides: it becomes cuBLAS's
//! transpose flag, never a copy), with padded rows allowed (the leading dimension is the row
//! stride). The bias, when there is one, is written into the output first and cuBLAS adds the
//! product to it (`beta = 1`): summed in fp32 with the product and rounded once. Anything else
//! (another dtype, a layout cuBLAS cannot take, a missing libcublas) runs burn's kernels.
//!
//! **Ordering.** `get_resource` orders this thread's stream after each operand's producer (an
//! operand produced on another worker's stream included), and `cubecl_cuda::blas::gemm` keeps
//! the operands' allocations (their `ManagedResource`s and burn handles) alive until an event
//! recorded after the product has completed, so no operand is freed or reused under a queued
//! product. This is the rule `device/handoff.rs` relies on for tensors that cross threads.

use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Cube, TensorMetadata};
use burn::tensor::{DType, Shape};
use cubecl_cuda::blas::{self, BlasCompute, BlasType, Matrix};

use super::ops::{Bias, GemmOps, burn_linear};

impl GemmOps for Cube {
    fn gemm_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Bias<Self>,
    ) -> FloatTensor<Self> {
        match cublas_linear(&x, &weight, &bias) {
            Some(y) => y,
            None => burn_linear::<Self>(x, weight, bias),
        }
    }

    fn gemm_batched(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        match cublas_batched(&a, &b) {
            Some(c) => c,
            None => Cube::float_matmul(a, b),
        }
    }
}

/// The cuBLAS element type and compute of a product on CUDA device `index` with operands of
/// `dtype`, if cuBLAS is chosen there and takes that dtype.
fn blas_setting(index: usize, dtype: DType) -> Option<(BlasType, BlasCompute)> {
    if !blas::uses_cublas(index) {
        return None;
    }
    let blas_type = match dtype {
        DType::F32 => BlasType::F32,
        DType::BF16 => BlasType::Bf16,
        _ => return None,
    };
    let compute = match crate::adapter::cuda::running_tf32(index) {
        true => BlasCompute::Tf32,
        false => BlasCompute::Fp32,
    };
    Some((blas_type, compute))
}

/// Matrix `outer` of `t`'s first dimension (rank 4; `None`: the whole of a rank-3 `t`) as a
/// batch over the next dimension of uniform stride, as cuBLAS's strided batched product takes
/// it: a rank-4 attention operand (`[n, h, t, d]`, heads split by a view) is one such batch per
/// sequence.
fn batch_matrix(t: &FloatTensor<Cube>, outer: Option<usize>) -> Option<Matrix> {
    let (shape, strides) = (t.shape(), t.meta.strides());
    let rank = shape.num_dims();
    Some(Matrix {
        resource: blas::resource(&t.client, t.handle.clone()).ok()?,
        rows: shape[rank - 2],
        cols: shape[rank - 1],
        row_stride: strides[rank - 2],
        col_stride: strides[rank - 1],
        batches: shape[rank - 3],
        batch_stride: strides[rank - 3],
        offset: outer.map_or(0, |i| i * strides[0]),
    })
}

/// A batched `a·b` through cuBLAS (strided batched, one call per outer index of a rank-4
/// product), or `None` where it does not apply.
fn cublas_batched(a: &FloatTensor<Cube>, b: &FloatTensor<Cube>) -> Option<FloatTensor<Cube>> {
    let index = cuda_index(a)?;
    let (dtype, compute) = blas_setting(index, a.dtype())?;
    let (sa, sb) = (a.shape(), b.shape());
    let rank = sa.num_dims();
    if b.dtype() != a.dtype() || !(3..=4).contains(&rank) || sb.num_dims() != rank {
        return None;
    }
    if (0..rank - 2).any(|i| sa[i] != sb[i]) || sa[rank - 1] != sb[rank - 2] {
        return None;
    }
    let mut out_shape = sa.clone();
    out_shape[rank - 1] = sb[rank - 1];
    let out = Cube::float_empty(out_shape, &a.device, a.dtype().into());
    let outers: Vec<Option<usize>> = match rank {
        4 => (0..sa[0]).map(Some).collect(),
        _ => vec![None],
    };
    for outer in outers {
        let (ma, mb, mc) = (
            batch_matrix(a, outer)?,
            batch_matrix(b, outer)?,
            batch_matrix(&out, outer)?,
        );
        let keep = Box::new((a.handle.clone(), b.handle.clone(), out.handle.clone()));
        // A failure after the first call leaves `out` partly written: burn's kernels then
        // compute all of it afresh.
        blas::gemm(ma, mb, mc, dtype, compute, false, keep).ok()?;
    }
    Some(out)
}

/// The CUDA index of a tensor's device, if it is a CUDA device.
fn cuda_index(t: &FloatTensor<Cube>) -> Option<usize> {
    match &t.device {
        cubecl::Device::Cuda(device) => Some(device.index),
        _ => None,
    }
}

/// `x·w (+ b)` through cuBLAS, or `None` where it does not apply (see the module docs).
fn cublas_linear(
    x: &FloatTensor<Cube>,
    weight: &FloatTensor<Cube>,
    bias: &Bias<Cube>,
) -> Option<FloatTensor<Cube>> {
    let index = cuda_index(x)?;
    let (dtype, compute) = blas_setting(index, x.dtype())?;
    if weight.dtype() != x.dtype() || x.shape().num_dims() != 2 || weight.shape().num_dims() != 2 {
        return None;
    }
    let (m, k, n) = (x.shape()[0], x.shape()[1], weight.shape()[1]);
    if weight.shape()[0] != k {
        return None;
    }
    // The output: the bias rows (cuBLAS adds the product to them), or a fresh buffer.
    let (out, accumulate) = match bias {
        Bias::Add(b) if b.dtype() == x.dtype() => {
            let rows = Cube::float_reshape(b.clone(), Shape::new([1, n]));
            let rows = Cube::float_expand(rows, Shape::new([m, n]));
            // A copy into a fresh contiguous buffer this product owns alone.
            let rows = Cube::float_add_scalar(rows, 0.0.into());
            (rows, true)
        }
        Bias::Add(_) => return None,
        Bias::Zero => (
            Cube::float_empty(Shape::new([m, n]), &x.device, x.dtype().into()),
            false,
        ),
    };
    let strides = |t: &FloatTensor<Cube>| {
        let s = t.meta.strides();
        (s[0], s[1])
    };
    let (out_rows, out_cols) = strides(&out);
    if out_cols != 1 || (m > 1 && out_rows != n) {
        return None;
    }
    let matrix = |t: &FloatTensor<Cube>| {
        let (row_stride, col_stride) = strides(t);
        Some(Matrix {
            resource: blas::resource(&t.client, t.handle.clone()).ok()?,
            rows: t.shape()[0],
            cols: t.shape()[1],
            row_stride,
            col_stride,
            batches: 1,
            batch_stride: 0,
            offset: 0,
        })
    };
    let (a, b, c) = (matrix(x)?, matrix(weight)?, matrix(&out)?);
    let keep = Box::new((x.handle.clone(), weight.handle.clone(), out.handle.clone()));
    blas::gemm(a, b, c, dtype, compute, accumulate, keep)
        .ok()
        .map(|()| out)
}
