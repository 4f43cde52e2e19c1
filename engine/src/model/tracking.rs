//! An activation in and out of a stage's graph: the received input as its leaf, a bundle's
//! constant parts cut from it, the backward seeded by the upstream gradient, and the input
//! gradient sent back. What each does to one tensor is the adapter's (`adapter::autodiff`);
//! what it does to each kind of [`Activation`] — floats of four ranks, ints, bundles of named
//! parts — is here.

use burn::prelude::*;

use crate::adapter::{self, Gradients};
use crate::error::EngineError;
use crate::model::activation::Activation;
use crate::model::bundle::{Bundle, Part};

/// A received (plain) activation as the leaf of this stage's graph. Float inputs of stages that
/// must send an input gradient upstream require grad; int inputs (token ids) stay plain; a
/// bundle's parts follow their own `differentiable` flag.
pub(crate) fn leaf(input: Activation, require_grad: bool) -> Activation {
    match input {
        Activation::Float1(t) => Activation::Float1(adapter::float_leaf(t, require_grad)),
        Activation::Float2(t) => Activation::Float2(adapter::float_leaf(t, require_grad)),
        Activation::Float3(t) => Activation::Float3(adapter::float_leaf(t, require_grad)),
        Activation::Float4(t) => Activation::Float4(adapter::float_leaf(t, require_grad)),
        Activation::Bundle(b) => Activation::Bundle(Bundle::from_parts(
            b.into_parts()
                .into_iter()
                .map(|p| Part {
                    value: leaf(p.value, require_grad && p.differentiable),
                    ..p
                })
                .collect(),
        )),
        int => int,
    }
}

/// `input` with its float tensors cut from the graph (same values, same device, no gradient
/// flows back through them): a bundle's constant parts, so single-device training treats them
/// as the pipeline does.
pub(crate) fn constant(input: Activation) -> Activation {
    match input {
        Activation::Float1(t) => Activation::Float1(adapter::detach(t)),
        Activation::Float2(t) => Activation::Float2(adapter::detach(t)),
        Activation::Float3(t) => Activation::Float3(adapter::detach(t)),
        Activation::Float4(t) => Activation::Float4(adapter::detach(t)),
        Activation::Bundle(b) => Activation::Bundle(b.map(constant)),
        int => int,
    }
}

/// Backward seeded with the upstream gradient: the vector-Jacobian product
/// `d(sum(output ⊙ grad))/dθ = Jᵀ·grad`, exact, for one element-wise product and a sum (burn
/// 0.22 has no public backward-with-seed). A bundle's differentiable parts are seeded together,
/// each by the part of `grad` of its name; an output with nothing differentiable (int, or a
/// bundle without such parts) gives no gradients.
pub(crate) fn backward_seeded(
    output: &Activation,
    grad: Activation,
) -> Result<Gradients, EngineError> {
    match seeded_sum(output, grad)? {
        Some(total) => Ok(adapter::backward_loss(&total)),
        None => Ok(adapter::no_gradients()),
    }
}

/// `sum(output ⊙ grad)` over every tracked float tensor of `output`, or `None` if none is.
fn seeded_sum(output: &Activation, grad: Activation) -> Result<Option<Tensor<1>>, EngineError> {
    if let Activation::Bundle(out) = output {
        let mut grads = grad.bundle()?;
        let mut total: Option<Tensor<1>> = None;
        for part in out.parts().iter().filter(|p| p.differentiable) {
            if let Some(sum) = seeded_sum(&part.value, grads.take(&part.name)?)? {
                total = Some(match total {
                    Some(t) => t + sum,
                    None => sum,
                });
            }
        }
        return Ok(total);
    }
    if !output.is_float() {
        return Ok(None);
    }
    if output.dims() != grad.dims() {
        return Err(EngineError::LayerRejected(format!(
            "upstream gradient of shape {:?} does not match this stage's output {:?}",
            grad.dims(),
            output.dims()
        )));
    }
    macro_rules! seeded {
        ($out:expr, $d:literal) => {
            if adapter::is_tracked($out) {
                Some(($out.clone() * grad.float::<$d>()?).sum())
            } else {
                None
            }
        };
    }
    Ok(match output {
        Activation::Float1(o) => seeded!(o, 1),
        Activation::Float2(o) => seeded!(o, 2),
        Activation::Float3(o) => seeded!(o, 3),
        Activation::Float4(o) => seeded!(o, 4),
        _ => unreachable!("a float activation"),
    })
}

/// The gradient of this stage's input leaf, plain, to send upstream. A bundle's is a bundle of
/// its differentiable parts' gradients (zeros for a part the stage did not use); an int input's
/// an empty bundle (nothing to send back, but the message the plan expects).
pub(crate) fn input_grad(input: &Activation, grads: &Gradients) -> Option<Activation> {
    match input {
        Activation::Float1(t) => adapter::grad_of(t, grads).map(Into::into),
        Activation::Float2(t) => adapter::grad_of(t, grads).map(Into::into),
        Activation::Float3(t) => adapter::grad_of(t, grads).map(Into::into),
        Activation::Float4(t) => adapter::grad_of(t, grads).map(Into::into),
        Activation::Bundle(b) => {
            let mut out = Bundle::new();
            for part in b.parts().iter().filter(|p| p.differentiable) {
                let grad = match &part.value {
                    Activation::Float1(t) => Some(adapter::grad_or_zeros(t, grads).into()),
                    Activation::Float2(t) => Some(adapter::grad_or_zeros(t, grads).into()),
                    Activation::Float3(t) => Some(adapter::grad_or_zeros(t, grads).into()),
                    Activation::Float4(t) => Some(adapter::grad_or_zeros(t, grads).into()),
                    nested => input_grad(nested, grads),
                };
                out = out.with(part.name.clone(), grad?);
            }
            Some(out.into())
        }
        _ => Some(Bundle::new().into()),
    }
}
