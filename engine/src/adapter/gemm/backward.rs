//! [`GemmOps`] under autodiff: a custom backward op. The graph keeps `x` and `w` as they came
//! (under bf16 the bf16 copies, not fp32 ones), and the backward runs through the seam too:
//!
//! - `dX = dY·wᵀ` and `dW = xᵀ·dY`, each one product of [`GemmOps::gemm_linear`] with the
//!   transposed operand as a view (one rounding each in a narrow dtype, as autocast's `mm`
//!   backward);
//! - `db = Σ_rows dY`, summed in fp32 and rounded once to the bias's dtype.
//!
//! In fp32 these are the operations burn's own matmul and broadcast add record (`float_matmul`
//! against a transposed view, `float_sum_dim` over the rows), so a CPU run keeps its bits.

use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, TensorMetadata};
use burn::tensor::{DType, FloatDType, Shape};

use super::ops::{Bias, GemmOps};

impl<B: GemmOps, C: CheckpointStrategy> GemmOps for Autodiff<B, C> {
    fn gemm_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Bias<Self>,
    ) -> FloatTensor<Self> {
        match bias {
            Bias::Add(b) => affine::<B, C>(x, weight, b),
            Bias::Zero => product::<B, C>(x, weight),
        }
    }

    fn gemm_batched(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        let saved = saved::<B, C>(&a, &b);
        let nodes = [a.node(), b.node()];
        let (a, b) = (a.into_primitive(), b.into_primitive());
        match Batched.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(saved, B::gemm_batched(a, b)),
            OpsKind::UnTracked(prep) => prep.finish(B::gemm_batched(a, b)),
        }
    }
}

/// The backward of a batched `a·b`: `dA = dC·bᵀ`, `dB = aᵀ·dC`, each a batched product through
/// the seam with the transposed operand as a view (burn's matmul backward computes the same
/// products).
#[derive(Debug)]
struct Batched;

impl<B: GemmOps> Backward<B, 2> for Batched {
    type State = Saved<B>;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [node_a, node_b] = ops.parents;
        let (a, b) = ops.state;
        if let (Some(node), Some(b)) = (node_a, b) {
            grads.register::<B>(
                node.id,
                B::gemm_batched(grad.clone(), B::float_transpose(b)),
            );
        }
        if let (Some(node), Some(a)) = (node_b, a) {
            grads.register::<B>(node.id, B::gemm_batched(B::float_transpose(a), grad));
        }
    }
}

/// The operands a backward needs: `x` for `dW`, `w` for `dX`, each kept only when the other
/// side is tracked.
type Saved<B> = (Option<FloatTensor<B>>, Option<FloatTensor<B>>);

/// `x·w`, recorded.
fn product<B: GemmOps, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    weight: FloatTensor<Autodiff<B, C>>,
) -> FloatTensor<Autodiff<B, C>> {
    let saved = saved::<B, C>(&x, &weight);
    let nodes = [x.node(), weight.node()];
    let (x, weight) = (x.into_primitive(), weight.into_primitive());
    match Product.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish(saved, B::gemm_linear(x, weight, Bias::Zero)),
        OpsKind::UnTracked(prep) => prep.finish(B::gemm_linear(x, weight, Bias::Zero)),
    }
}

/// `x·w + b`, recorded.
fn affine<B: GemmOps, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    weight: FloatTensor<Autodiff<B, C>>,
    bias: FloatTensor<Autodiff<B, C>>,
) -> FloatTensor<Autodiff<B, C>> {
    let saved = saved::<B, C>(&x, &weight);
    let bias_dtype = bias.dtype();
    let nodes = [x.node(), weight.node(), bias.node()];
    let (x, weight) = (x.into_primitive(), weight.into_primitive());
    let bias = Bias::Add(bias.into_primitive());
    match Affine.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((saved, bias_dtype), B::gemm_linear(x, weight, bias)),
        OpsKind::UnTracked(prep) => prep.finish(B::gemm_linear(x, weight, bias)),
    }
}

/// What the backward keeps of `x` and `w`.
fn saved<B: GemmOps, C: CheckpointStrategy>(
    x: &FloatTensor<Autodiff<B, C>>,
    weight: &FloatTensor<Autodiff<B, C>>,
) -> Saved<B> {
    (
        weight.is_tracked().then(|| x.primitive().clone()),
        x.is_tracked().then(|| weight.primitive().clone()),
    )
}

/// The backward of `x·w`.
#[derive(Debug)]
struct Product;

impl<B: GemmOps> Backward<B, 2> for Product {
    type State = Saved<B>;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [node_x, node_w] = ops.parents;
        let ids = (node_x.map(|n| n.id), node_w.map(|n| n.id));
        operand_grads::<B>(grads, ids, ops.state, grad);
    }
}

/// The backward of `x·w + b`.
#[derive(Debug)]
struct Affine;

impl<B: GemmOps> Backward<B, 3> for Affine {
    type State = (Saved<B>, DType);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [node_x, node_w, node_b] = ops.parents;
        let (saved, bias_dtype) = ops.state;
        if let Some(node) = node_b {
            grads.register::<B>(node.id, bias_grad::<B>(grad.clone(), bias_dtype));
        }
        let ids = (node_x.map(|n| n.id), node_w.map(|n| n.id));
        operand_grads::<B>(grads, ids, saved, grad);
    }
}

/// Registers `dX = dY·wᵀ` and `dW = xᵀ·dY` for the parents that are tracked.
fn operand_grads<B: GemmOps>(
    grads: &mut Gradients,
    (node_x, node_w): (Option<NodeId>, Option<NodeId>),
    (x, weight): Saved<B>,
    grad: FloatTensor<B>,
) {
    if let (Some(node), Some(weight)) = (node_x, weight) {
        let dx = B::gemm_linear(grad.clone(), B::float_transpose(weight), Bias::Zero);
        grads.register::<B>(node, dx);
    }
    if let (Some(node), Some(x)) = (node_w, x) {
        let dw = B::gemm_linear(B::float_transpose(x), grad, Bias::Zero);
        grads.register::<B>(node, dw);
    }
}

/// `Σ_rows dY` in fp32, rounded once to the bias's dtype (in fp32 burn's broadcast-add
/// backward: one `sum_dim` over the rows).
fn bias_grad<B: GemmOps>(grad: FloatTensor<B>, dtype: DType) -> FloatTensor<B> {
    let n = grad.shape()[1];
    let narrow = grad.dtype() != DType::F32;
    let grad = if narrow {
        B::float_cast(grad, FloatDType::F32)
    } else {
        grad
    };
    let sum = B::float_reshape(B::float_sum_dim(grad, 0), Shape::new([n]));
    if sum.dtype() == dtype {
        sum
    } else {
        B::float_cast(sum, FloatDType::from(dtype))
    }
}
