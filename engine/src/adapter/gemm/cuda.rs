//! [`GemmOps`] on burn's CUDA backend: cuBLAS (through pipetrain's copy of cubecl-cuda,
//! `cubecl_cuda::blas`, the one place with the FFI) when it is chosen for the device, else
//! burn's own kernels ([`burn_linear`]).
//!
//! A product goes to cuBLAS when its operands are fp32 or bf16 of one dtype, rank 2, each
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
    if !blas::uses_cublas(index) {
        return None;
    }
    let dtype = match x.dtype() {
        DType::F32 => BlasType::F32,
        DType::BF16 => BlasType::Bf16,
        _ => return None,
    };
    if weight.dtype() != x.dtype() || x.shape().num_dims() != 2 || weight.shape().num_dims() != 2 {
        return None;
    }
    let (m, k, n) = (x.shape()[0], x.shape()[1], weight.shape()[1]);
    if weight.shape()[0] != k {
        return None;
    }
    let compute = match crate::adapter::cuda::running_tf32(index) {
        true => BlasCompute::Tf32,
        false => BlasCompute::Fp32,
    };
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
        })
    };
    let (a, b, c) = (matrix(x)?, matrix(weight)?, matrix(&out)?);
    let keep = Box::new((x.handle.clone(), weight.handle.clone(), out.handle.clone()));
    blas::gemm(a, b, c, dtype, compute, accumulate, keep)
        .ok()
        .map(|()| out)
}
