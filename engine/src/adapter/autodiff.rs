//! Autodiff: leaves, seeded backward, input gradients, gradient accumulation and the optimizer
//! step.

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use crate::activation::{Activation, ActivationError};

/// A stage's parameter gradients, by parameter (burn's container).
pub(crate) type Grads = GradientsParams;

/// The gradients of one backward pass, by tensor (burn's autodiff container).
pub(crate) type Gradients = burn::tensor::Gradients;

/// A received (plain) activation as the leaf of this stage's graph. Float inputs of stages that
/// must send an input gradient upstream require grad; int inputs (token ids) stay plain.
pub(crate) fn leaf(input: Activation, require_grad: bool) -> Activation {
    macro_rules! float_leaf {
        ($t:expr) => {{
            let t = $t.autodiff();
            if require_grad { t.require_grad() } else { t }
        }};
    }
    match input {
        Activation::Float1(t) => Activation::Float1(float_leaf!(t)),
        Activation::Float2(t) => Activation::Float2(float_leaf!(t)),
        Activation::Float3(t) => Activation::Float3(float_leaf!(t)),
        Activation::Float4(t) => Activation::Float4(float_leaf!(t)),
        int => int,
    }
}

/// Backward of a loss (the last stage).
pub(crate) fn backward_loss(loss: &Tensor<1>) -> Gradients {
    loss.backward()
}

/// Backward seeded with the upstream gradient: the vector-Jacobian product
/// `d(sum(output ⊙ grad))/dθ = Jᵀ·grad`, exact, for one element-wise product and a sum (burn
/// 0.22 has no public backward-with-seed).
pub(crate) fn backward_seeded(
    output: &Activation,
    grad: Activation,
) -> Result<Gradients, ActivationError> {
    if output.dims() != grad.dims() {
        return Err(ActivationError::Other(format!(
            "upstream gradient of shape {:?} does not match this stage's output {:?}",
            grad.dims(),
            output.dims()
        )));
    }
    macro_rules! seeded {
        ($out:expr, $d:literal) => {
            ($out.clone() * grad.float::<$d>()?).sum().backward()
        };
    }
    Ok(match output {
        Activation::Float1(o) => seeded!(o, 1),
        Activation::Float2(o) => seeded!(o, 2),
        Activation::Float3(o) => seeded!(o, 3),
        Activation::Float4(o) => seeded!(o, 4),
        other => {
            return Err(other.mismatch("float (a stage output must be float to backpropagate)"));
        }
    })
}

/// The gradient of this stage's input leaf, plain, to send upstream.
pub(crate) fn input_grad(input: &Activation, grads: &Gradients) -> Option<Activation> {
    match input {
        Activation::Float1(t) => t.grad(grads).map(Into::into),
        Activation::Float2(t) => t.grad(grads).map(Into::into),
        Activation::Float3(t) => t.grad(grads).map(Into::into),
        Activation::Float4(t) => t.grad(grads).map(Into::into),
        _ => None,
    }
}

/// Parameter gradients of one micro-batch, accumulated over the step in program order.
pub(crate) struct Accumulator<M: Module> {
    inner: GradientsAccumulator<M>,
    micro_batches: usize,
}

impl<M: Module> Accumulator<M> {
    pub(crate) fn new() -> Self {
        Self {
            inner: GradientsAccumulator::new(),
            micro_batches: 0,
        }
    }

    /// Adds the parameter gradients of one backward pass through `module`'s graph.
    pub(crate) fn add(&mut self, module: &M, grads: Gradients) {
        self.inner
            .accumulate(module, GradientsParams::from_grads(grads, module));
    }

    /// Adds parameter gradients computed by hand (the dense layers' `W`).
    pub(crate) fn add_params(&mut self, module: &M, grads: GradientsParams) {
        if !grads.is_empty() {
            self.inner.accumulate(module, grads);
        }
    }

    /// One more micro-batch's backward has run.
    pub(crate) fn count_micro_batch(&mut self) {
        self.micro_batches += 1;
    }

    pub(crate) fn take(&mut self) -> GradientsParams {
        self.micro_batches = 0;
        self.inner.grads()
    }

    /// Micro-batches accumulated since the last [`take`](Self::take).
    pub(crate) fn micro_batches(&self) -> usize {
        self.micro_batches
    }
}

/// Bytes of optimizer state (serialized), e.g. Adam's two moments per parameter it updates.
pub(crate) fn optimizer_state_bytes(optimizer: &ModuleOptimizer) -> usize {
    optimizer
        .to_record()
        .into_bytes()
        .map(|b| b.len())
        .unwrap_or(0)
}

/// One optimizer step; `module` is replaced by its updated value.
pub(crate) fn step<M: Module + Default>(
    optimizer: &mut ModuleOptimizer,
    learning_rate: f64,
    module: &mut M,
    grads: GradientsParams,
) {
    let current = std::mem::take(module);
    *module = optimizer.step(learning_rate, current, grads);
}

/// Registers a dense layer's weight (and bias) gradient for `linear`'s parameters.
pub(crate) fn register_dense(
    grads: &mut GradientsParams,
    linear: &burn::nn::Linear,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) {
    grads.register(linear.weight.id, weight);
    if let (Some(param), Some(bias)) = (&linear.bias, bias) {
        grads.register(param.id, bias);
    }
}

/// A scalar loss value for reporting.
pub(crate) fn scalar(loss: &Tensor<1>) -> f64 {
    loss.clone().inner().into_scalar::<f64>()
}
