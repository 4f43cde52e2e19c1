//! Autodiff: leaves, seeded backward, input gradients, gradient accumulation and the optimizer
//! step.

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use crate::activation::Activation;
use crate::bundle::{Bundle, Part};
use crate::error::EngineError;

/// A stage's parameter gradients, by parameter (burn's container).
pub(crate) type Grads = GradientsParams;

/// The gradients of one backward pass, by tensor (burn's autodiff container).
pub(crate) type Gradients = burn::tensor::Gradients;

/// A received (plain) activation as the leaf of this stage's graph. Float inputs of stages that
/// must send an input gradient upstream require grad; int inputs (token ids) stay plain; a
/// bundle's parts follow their own `differentiable` flag.
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
        Activation::Float1(t) => Activation::Float1(t.detach()),
        Activation::Float2(t) => Activation::Float2(t.detach()),
        Activation::Float3(t) => Activation::Float3(t.detach()),
        Activation::Float4(t) => Activation::Float4(t.detach()),
        Activation::Bundle(b) => Activation::Bundle(b.map(constant)),
        int => int,
    }
}

/// Backward of a loss (the last stage).
pub(crate) fn backward_loss(loss: &Tensor<1>) -> Gradients {
    loss.backward()
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
        Some(total) => Ok(total.backward()),
        None => Ok(no_gradients()),
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
            if $out.is_tracked() {
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

/// Gradients of a backward that reaches no parameter (burn has no public empty container: the
/// backward of a throw-away leaf).
fn no_gradients() -> Gradients {
    let device = Device::flex().autodiff();
    Tensor::<1>::zeros([1], &device)
        .require_grad()
        .sum()
        .backward()
}

/// The gradient of this stage's input leaf, plain, to send upstream. A bundle's is a bundle of
/// its differentiable parts' gradients (zeros for a part the stage did not use); an int input's
/// an empty bundle (nothing to send back, but the message the plan expects).
pub(crate) fn input_grad(input: &Activation, grads: &Gradients) -> Option<Activation> {
    macro_rules! grad_or_zeros {
        ($t:expr) => {
            Some(
                $t.grad(grads)
                    .unwrap_or_else(|| $t.zeros_like().inner())
                    .into(),
            )
        };
    }
    match input {
        Activation::Float1(t) => t.grad(grads).map(Into::into),
        Activation::Float2(t) => t.grad(grads).map(Into::into),
        Activation::Float3(t) => t.grad(grads).map(Into::into),
        Activation::Float4(t) => t.grad(grads).map(Into::into),
        Activation::Bundle(b) => {
            let mut out = Bundle::new();
            for part in b.parts().iter().filter(|p| p.differentiable) {
                let grad = match &part.value {
                    Activation::Float1(t) => grad_or_zeros!(t),
                    Activation::Float2(t) => grad_or_zeros!(t),
                    Activation::Float3(t) => grad_or_zeros!(t),
                    Activation::Float4(t) => grad_or_zeros!(t),
                    nested => input_grad(nested, grads),
                };
                out = out.with(part.name.clone(), grad?);
            }
            Some(out.into())
        }
        _ => Some(Bundle::new().into()),
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

/// The parameters of a `Linear`, by id: where its hand-computed gradients go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LinearParams {
    weight: burn::module::ParamId,
    bias: Option<burn::module::ParamId>,
}

impl LinearParams {
    pub(crate) fn of(linear: &burn::nn::Linear) -> Self {
        Self {
            weight: linear.weight.id,
            bias: linear.bias.as_ref().map(|b| b.id),
        }
    }

    /// Whether the `Linear` has a bias.
    pub(crate) fn has_bias(&self) -> bool {
        self.bias.is_some()
    }

    /// Registers the weight (and bias) gradient of these parameters.
    pub(crate) fn register(
        &self,
        grads: &mut GradientsParams,
        weight: Tensor<2>,
        bias: Option<Tensor<1>>,
    ) {
        grads.register(self.weight, weight);
        if let (Some(id), Some(bias)) = (self.bias, bias) {
            grads.register(id, bias);
        }
    }
}

/// A scalar loss value for reporting.
pub(crate) fn scalar(loss: &Tensor<1>) -> f64 {
    loss.clone().inner().into_scalar::<f64>()
}

/// The detached value of a scalar loss, to be read later with [`sum_scalars`].
pub(crate) fn detached(loss: &Tensor<1>) -> Tensor<1> {
    loss.clone().inner()
}

/// The sum, in order and in `f64`, of scalar losses kept by [`detached`]: the same value as
/// adding their [`scalar`]s one by one, read back from the device in one transfer (one host
/// synchronisation per step instead of one per micro-batch).
pub(crate) fn sum_scalars(losses: Vec<Tensor<1>>) -> f64 {
    if losses.is_empty() {
        return 0.0;
    }
    Tensor::cat(losses, 0)
        .into_data()
        .convert::<f64>()
        .try_to_vec::<f64>()
        .expect("f64 losses")
        .into_iter()
        .fold(0.0, |sum, loss| sum + loss)
}
