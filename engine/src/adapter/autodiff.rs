//! Autodiff: leaves, seeded backward, input gradients, gradient accumulation and the optimizer
//! step.

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::prelude::*;

/// A stage's parameter gradients, by parameter (burn's container).
pub(crate) type Grads = GradientsParams;

/// The gradients of one backward pass, by tensor (burn's autodiff container).
pub(crate) type Gradients = burn::tensor::Gradients;

/// A plain float tensor as a leaf of this stage's graph, requiring grad or not.
pub(crate) fn float_leaf<const D: usize>(t: Tensor<D>, require_grad: bool) -> Tensor<D> {
    let t = t.autodiff();
    if require_grad { t.require_grad() } else { t }
}

/// `t` cut from the graph: same values, same device, no gradient flows back through it.
pub(crate) fn detach<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    t.detach()
}

/// Whether `t` is on a graph (a backward through it reaches something).
pub(crate) fn is_tracked<const D: usize>(t: &Tensor<D>) -> bool {
    t.is_tracked()
}

/// The gradient that reached the leaf `t` in `grads`, plain, if any did.
pub(crate) fn grad_of<const D: usize>(t: &Tensor<D>, grads: &Gradients) -> Option<Tensor<D>> {
    t.grad(grads)
}

/// Backward of a loss (the last stage).
pub(crate) fn backward_loss(loss: &Tensor<1>) -> Gradients {
    loss.backward()
}

/// Gradients of a backward that reaches no parameter (burn has no public empty container: the
/// backward of a throw-away leaf).
pub(crate) fn no_gradients() -> Gradients {
    let device = Device::flex().autodiff();
    Tensor::<1>::zeros([1], &device)
        .require_grad()
        .sum()
        .backward()
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

    /// Starts over from `grads` (ZeRO-2/3: the shard a reduce left this replica), keeping the
    /// count of micro-batches accumulated.
    pub(crate) fn restart(&mut self, module: &M, grads: GradientsParams) {
        self.inner = GradientsAccumulator::new();
        if !grads.is_empty() {
            self.inner.accumulate(module, grads);
        }
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
