//! The GEMM seam: every dense product of the engine and of the built-in models, `C = op(A)·op(B)
//! (+ bias)` on row-major tensors, through one burn backend extension ([`GemmOps`]).
//!
//! - [`ops`]: the extension trait, its operands, and what each backend runs: on a CPU burn's
//!   own matmul (fp32 bit for bit as before); on CUDA cuBLAS when
//!   [`GemmLibrary::Cublas`](crate::GemmLibrary) is chosen for the device, else burn's kernels;
//! - [`backward`]: the autodiff implementation, a custom backward op that keeps the operands as
//!   they came (bf16 stays bf16 in the graph) and runs its two products through the seam too;
//! - `cuda` (feature `cuda`): the CUDA backend's implementation over cuBLAS.
//!
//! The arithmetic is autocast's (`docs/mixed-precision.md`): fp32 operands multiply in fp32;
//! narrower ones (bf16) multiply exactly, sum in fp32 with the bias, and round once to the
//! output's dtype.

mod backward;
#[cfg(feature = "cuda")]
mod cuda;
mod ops;

pub(crate) use ops::{batched_product, linear_rows, product_rows};

#[cfg(test)]
mod tests {
    use burn::prelude::*;
    use burn::tensor::{FloatDType, TensorData};

    use super::linear_rows;

    /// Leaves `x`, `w`, `b` on the autodiff device, in `dtype` (cast on the graph from fp32
    /// leaves, as a bf16 step casts its masters), and the leaves.
    fn operands(dtype: FloatDType) -> ([Tensor<2>; 2], Tensor<1>, [Tensor<2>; 2], Tensor<1>) {
        let device = Device::flex().autodiff();
        // Values with many mantissa bits, so that bf16 roundings show.
        let values = |n: usize, phase: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i as f32) * 0.731 + phase).sin() * 1.37)
                .collect()
        };
        let matrix = |rows: usize, cols: usize, phase: f32| {
            Tensor::<2>::from_data(
                TensorData::new(values(rows * cols, phase), [rows, cols]),
                &device,
            )
            .require_grad()
        };
        let (x, w) = (matrix(48, 5, 0.1), matrix(5, 3, 0.7));
        let b =
            Tensor::<1>::from_data(TensorData::new(values(3, 1.3), [3]), &device).require_grad();
        let cast2 = |t: &Tensor<2>| {
            if dtype == FloatDType::F32 {
                t.clone()
            } else {
                t.clone().cast(dtype)
            }
        };
        let cb = if dtype == FloatDType::F32 {
            b.clone()
        } else {
            b.clone().cast(dtype)
        };
        ([x.clone(), w.clone()], b, [cast2(&x), cast2(&w)], cb)
    }

    /// The output and the three leaf gradients of `f(x, w, b)` seeded by a fixed upstream
    /// gradient.
    fn run(
        dtype: FloatDType,
        f: impl Fn(Tensor<2>, Tensor<2>, Tensor<1>) -> Tensor<2>,
    ) -> Vec<burn::tensor::TensorData> {
        let ([x, w], b, [cx, cw], cb) = operands(dtype);
        let y = f(cx, cw, cb);
        // An upstream gradient with many mantissa bits, so that its roundings show.
        let [rows, cols] = y.dims();
        let seed: Vec<f32> = (0..rows * cols)
            .map(|i| ((i as f32) * 1.913).cos() * 0.77)
            .collect();
        let seed = Tensor::<2>::from_data(TensorData::new(seed, [rows, cols]), &y.device())
            .cast(FloatDType::from(y.dtype()));
        let grads = (y.clone() * seed).sum().backward();
        vec![
            y.inner().cast(FloatDType::F32).into_data(),
            x.grad(&grads).unwrap().into_data(),
            w.grad(&grads).unwrap().into_data(),
            b.grad(&grads).unwrap().into_data(),
        ]
    }

    #[test]
    fn fp32_is_burns_matmul_and_bias_bit_for_bit() {
        let ours = run(FloatDType::F32, |x, w, b| linear_rows(x, w, Some(b)));
        let burn = run(FloatDType::F32, |x, w, b| x.matmul(w) + b.unsqueeze());
        assert_eq!(ours, burn);
    }

    #[test]
    fn bf16_is_the_fp32_product_rounded_once_forward_and_backward() {
        // The reference composes what autocast computes on the graph: widen, multiply and add
        // in fp32, round once; its backward widens dY, multiplies in fp32, rounds dX, dW and db
        // once each (the casts' backwards).
        let wide = |t: Tensor<2>| t.cast(FloatDType::F32);
        let ours = run(FloatDType::BF16, |x, w, b| linear_rows(x, w, Some(b)));
        let reference = run(FloatDType::BF16, |x, w, b| {
            (wide(x).matmul(wide(w)) + b.cast(FloatDType::F32).unsqueeze()).cast(FloatDType::BF16)
        });
        assert_eq!(ours, reference);
        let twice = run(FloatDType::BF16, |x, w, b| x.matmul(w) + b.unsqueeze());
        assert_ne!(
            ours[0], twice[0],
            "burn's bf16 product and bias round twice"
        );
    }
}
