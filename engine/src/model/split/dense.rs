//! Dense layers by hand: a [`Layer`](crate::Layer) that is a `Linear` followed by an element-wise
//! activation says so with [`Layer::dense`](crate::Layer::dense), and the engine trains it
//! without autodiff, with its backward split in two:
//!
//! - the **input gradient** `dX = dZ·Wᵀ`, computed at once (the `I` action) and sent upstream.
//!   For a micro-batch of few rows (an eighth of the input features or fewer) it is computed as
//!   `(W·dZᵀ)ᵀ`: the same product with the weight as the left operand in its stored layout,
//!   which burn-flex's GEMM (the `gemm` crate) runs 1.3–3× faster at 64 to 8 rows than the
//!   product against the transposed weight view that autodiff's matmul backward computes
//!   (measured: `benches/gemm_orientation.rs`, and docs/upstream-gemm.md);
//! - the **weight gradient** `dW = Xᵀ·dZ`, `db = Σ dZ`, deferred (the `W` action) and computed
//!   once per group of micro-batches over all their rows: one GEMM with `k` = every row of the
//!   group instead of one small GEMM and one accumulation per micro-batch.
//!
//! Layers that are not dense keep the autodiff path; a stage may mix both.

use burn::nn::Linear;
use burn::prelude::*;

use crate::adapter::{self, LinearParams};
use crate::error::EngineError;
use crate::model::activation::Activation;

/// The element-wise function after a [`Dense`] layer's affine map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenseActivation {
    /// None: `y = x·W + b`.
    Identity,
    /// `y = max(x·W + b, 0)`.
    Relu,
}

/// What a dense layer is: `y = f(x·W + b)` for a burn `Linear` and an element-wise `f`
/// (see [`Layer::dense`](crate::Layer::dense)).
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::prelude::*;
/// use burn::tensor::activation::relu;
/// use pipetrain_engine::{Activation, EngineError, Dense, Layer};
///
/// #[derive(Module, Debug)]
/// struct Block {
///     linear: Linear,
/// }
///
/// impl Layer for Block {
///     fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
///         Ok(relu(self.linear.forward(input.float::<2>()?)).into())
///     }
///     // The same function, described: the engine can split its backward.
///     fn dense(&self) -> Option<Dense<'_>> {
///         Some(Dense::linear(&self.linear).relu())
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Dense<'a> {
    linear: &'a Linear,
    activation: DenseActivation,
}

impl<'a> Dense<'a> {
    /// `y = x·W + b` for `linear` (its bias, if it has one).
    pub fn linear(linear: &'a Linear) -> Self {
        Self {
            linear,
            activation: DenseActivation::Identity,
        }
    }

    /// Followed by a ReLU.
    pub fn relu(self) -> Self {
        Self {
            activation: DenseActivation::Relu,
            ..self
        }
    }

    /// The element-wise function after the affine map.
    pub fn activation(&self) -> DenseActivation {
        self.activation
    }

    /// The `Linear`'s parameters, where the weight gradients go.
    pub(crate) fn params(&self) -> LinearParams {
        LinearParams::of(self.linear)
    }

    /// Forward without autodiff of a rank-2 input `[rows, in]`: the output `[rows, out]`.
    pub(crate) fn forward(&self, x: Tensor<2>) -> Result<Tensor<2>, EngineError> {
        let [fan_in, _] = self.linear.weight.dims();
        let [_, features] = x.dims();
        if features != fan_in {
            return Err(EngineError::LayerRejected(format!(
                "this dense layer takes {fan_in} input features, got {features} (input {:?})",
                x.dims()
            )));
        }
        let z = adapter::linear_rows(
            x,
            adapter::plain(self.linear.weight.val()),
            self.linear.bias.as_ref().map(|b| adapter::plain(b.val())),
        );
        Ok(match self.activation {
            DenseActivation::Identity => z,
            DenseActivation::Relu => burn::tensor::activation::relu(z),
        })
    }

    /// The gradient before the activation, `dZ = f'(z) ⊙ dY`, from the layer's output `y` and
    /// the gradient `dY` that reached it.
    pub(crate) fn pre_activation_grad(&self, output: &Tensor<2>, grad: Tensor<2>) -> Tensor<2> {
        match self.activation {
            DenseActivation::Identity => grad,
            // y = max(z, 0): z > 0 exactly where y > 0.
            DenseActivation::Relu => grad.mask_fill(output.clone().lower_equal_elem(0.0), 0.0),
        }
    }

    /// The input gradient `dX = dZ·Wᵀ`, computed as `(W·dZᵀ)ᵀ` for few rows (see the module
    /// docs).
    pub(crate) fn input_grad(&self, pre_activation_grad: Tensor<2>) -> Tensor<2> {
        let weight = adapter::plain(self.linear.weight.val());
        let [fan_in, _] = weight.dims();
        let [rows, _] = pre_activation_grad.dims();
        if rows * 8 <= fan_in {
            adapter::product_rows(weight, pre_activation_grad.transpose()).transpose()
        } else {
            adapter::product_rows(pre_activation_grad, weight.transpose())
        }
    }
}

/// The weight and bias gradients of a product `x·W (+ b)` over a group of micro-batches: `Xᵀ·dY`
/// and `Σ_rows dY` over the rows of all of them (`inputs` and `grads` in the same micro-batch
/// order), in one GEMM with `k` = every row of the group. Shared by the dense layers and the
/// split `Linear` calls ([`crate::linears`]).
pub(crate) fn weight_grads(
    inputs: Vec<Tensor<2>>,
    grads: Vec<Tensor<2>>,
    bias: bool,
) -> (Tensor<2>, Option<Tensor<1>>) {
    let x = cat_rows(inputs);
    let dy = cat_rows(grads);
    let bias = bias.then(|| {
        let [_, out] = dy.dims();
        dy.clone().sum_dim(0).reshape([out])
    });
    (adapter::product_rows(x.transpose(), dy), bias)
}

/// The rows of `parts` stacked in order (no copy for one part).
fn cat_rows(mut parts: Vec<Tensor<2>>) -> Tensor<2> {
    if parts.len() == 1 {
        parts.pop().expect("one part")
    } else {
        Tensor::cat(parts, 0)
    }
}

/// An activation of rank 2 or more as rows of features: `[d0, …, dn]` → `[d0·…·dn−1, dn]`, and
/// the leading dimensions to restore it.
pub(crate) fn to_rows(x: Activation) -> Result<(Tensor<2>, Vec<usize>), EngineError> {
    const WANTED: &str = "float of rank 2 to 4 (a dense layer's input)";
    if !x.is_float() {
        return Err(x.mismatch(WANTED));
    }
    let dims = x.dims();
    let rows = |t: Activation| -> Result<Tensor<2>, EngineError> {
        let features = *dims.last().expect("rank ≥ 1");
        let n: usize = dims[..dims.len() - 1].iter().product();
        Ok(match t {
            Activation::Float2(t) => t,
            Activation::Float3(t) => t.reshape([n, features]),
            Activation::Float4(t) => t.reshape([n, features]),
            other => return Err(other.mismatch(WANTED)),
        })
    };
    let lead = dims[..dims.len().saturating_sub(1)].to_vec();
    Ok((rows(x)?, lead))
}

/// The inverse of [`to_rows`]: rows of features back to the leading dimensions `lead`.
pub(crate) fn from_rows(x: Tensor<2>, lead: &[usize]) -> Activation {
    let [_, features] = x.dims();
    match lead.len() {
        1 => x.into(),
        2 => x.reshape([lead[0], lead[1], features]).into(),
        _ => x.reshape([lead[0], lead[1], lead[2], features]).into(),
    }
}
