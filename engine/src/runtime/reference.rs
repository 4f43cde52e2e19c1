//! Single-device training: the reference every pipeline must match.

use burn::prelude::*;

use pipetrain_schedules::{Action, MicroBatchId};

use crate::adapter::{self, Accumulator, ModuleOptimizer};
use crate::error::{EngineError, Result};
use crate::model::activation::Activation;
use crate::model::layer::Layer;
use crate::model::loss::Loss;
use crate::model::params;
use crate::optim::optimizer::OptimizerConfig;
use crate::optim::tie::{self, Tie, TieSlot};
use crate::precision::Precision;
use crate::worker::grad_guard::{self, GradGuard};
use std::collections::HashMap;

/// Plain training of the whole layer sequence on one device, one step at a time: either one
/// forward of the full batch ([`step`](Self::step)) or the same micro-batches a pipeline runs,
/// one after another, with accumulated gradients ([`step_chunked`](Self::step_chunked)).
pub struct SingleDevice<L: Layer> {
    layers: Vec<L>,
    optimizer: ModuleOptimizer,
    device: Device,
    ties: Vec<TieSlot>,
    guard: GradGuard,
    precision: Precision,
}

impl<L: Layer> SingleDevice<L> {
    /// A trainer for `layers` on `device`.
    pub fn new(layers: Vec<L>, device: &Device, optimizer: &OptimizerConfig) -> Self {
        let device = adapter::autodiff_device(device);
        let layers = layers
            .into_iter()
            .map(|l| adapter::trainable(l, &device))
            .collect();
        Self {
            layers,
            optimizer: optimizer.init(),
            device,
            ties: Vec::new(),
            guard: GradGuard::default(),
            precision: Precision::default(),
        }
    }

    /// With tied parameters (see [`Tie`]): the second copies start from the first's value, and
    /// each step both get the sum of their gradients, as in a pipeline.
    pub fn with_ties(mut self, ties: &[Tie]) -> std::result::Result<Self, EngineError> {
        let layers = std::mem::take(&mut self.layers);
        self.layers = tie::equalize(layers, ties)?;
        self.ties = tie::place(ties, &[&self.layers[..]])?
            .into_iter()
            .flat_map(|pair| pair.map(|(_, slot)| slot))
            .collect();
        Ok(self)
    }

    /// With the pipeline's gradient guard: the global norm clipped as one device clips it, and
    /// a step with a non-finite gradient skipped.
    pub fn with_guard(mut self, guard: GradGuard) -> Self {
        self.guard = guard;
        self
    }

    /// Computing in `precision`, with the casts a pipeline makes (see [`Precision`]): the
    /// reference of a pipeline that trains in it.
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// The optimizer step on the `accumulated` gradients, after summing tied gradients.
    fn apply(&mut self, mut accumulated: Accumulator<Vec<L>>, learning_rate: f64) {
        let grads = accumulated.take();
        let grads = if self.ties.is_empty() {
            grads
        } else {
            let device = adapter::plain_device(&self.device);
            crate::optim::tie::sum_tied_gradients(grads, &self.ties, &mut HashMap::new(), &device)
                .expect("no collective: a local sum cannot fail")
        };
        if let Some(grads) = grad_guard::clip_single(&self.guard, &self.layers, grads) {
            adapter::step(&mut self.optimizer, learning_rate, &mut self.layers, grads);
        }
    }

    /// One step on the whole batch; returns the mean loss.
    pub fn step(
        &mut self,
        inputs: Activation,
        targets: Activation,
        loss: &dyn Loss,
        learning_rate: f64,
    ) -> Result<f64> {
        let value = self.forward_loss(inputs, targets, loss, None)?;
        let reported = adapter::scalar(&value);
        let mut grads = Accumulator::new();
        grads.add(&self.layers, adapter::backward_loss(&value));
        self.apply(grads, learning_rate);
        Ok(reported)
    }

    /// One step on the batch cut into `chunks` micro-batches (along dimension 0, as the
    /// pipeline cuts it: rows differ by at most one, the first ones longer), run one after
    /// another: forward and backward of each with its loss weighted by its rows / the batch's
    /// rows, gradients accumulated, then one optimizer step. Returns the mean
    /// loss (the sum of the scaled micro-batch losses).
    ///
    /// For models whose layers only see one example at a time this equals [`step`](Self::step)
    /// up to rounding. For models whose forward depends on the batch — batch norm — it is the
    /// reference a pipeline with `chunks` micro-batches must match: each micro-batch is
    /// normalized with its own statistics, and running statistics are updated once per
    /// micro-batch, in micro-batch order.
    ///
    /// # Errors
    /// [`EngineError::Batch`] if the batch has fewer than `chunks` rows; a layer or
    /// loss error names the failing micro-batch.
    pub fn step_chunked(
        &mut self,
        inputs: Activation,
        targets: Activation,
        chunks: usize,
        loss: &dyn Loss,
        learning_rate: f64,
    ) -> Result<f64> {
        let rows = inputs.batch_size() as f64;
        let inputs = inputs.split(chunks).map_err(EngineError::bad_batch)?;
        let targets = targets.split(chunks).map_err(EngineError::bad_batch)?;
        let mut accumulated = Accumulator::new();
        let mut reported = 0.0;
        for (i, (x, y)) in inputs.into_iter().zip(targets).enumerate() {
            let scale = x.batch_size() as f64 / rows;
            let value = self
                .forward_loss(x, y, loss, Some(MicroBatchId::from(i)))?
                .mul_scalar(scale);
            reported += adapter::scalar(&value);
            accumulated.add(&self.layers, adapter::backward_loss(&value));
        }
        self.apply(accumulated, learning_rate);
        Ok(reported)
    }

    /// Forward of every layer and the loss, on the autodiff device. `micro_batch` only labels
    /// errors.
    fn forward_loss(
        &self,
        inputs: Activation,
        targets: Activation,
        loss: &dyn Loss,
        micro_batch: Option<MicroBatchId>,
    ) -> Result<Tensor<1>> {
        let fail = |cause: EngineError| EngineError::StageFailed {
            replica: Default::default(),
            stage: Default::default(),
            micro_batch,
            action: match micro_batch {
                Some(mb) => Action::forward(Default::default(), mb),
                None => Action::optimizer_step(Default::default()),
            },
            source: Box::new(cause),
        };
        let mut x = self
            .precision
            .input(self.layers.first(), inputs.to_device(&self.device));
        for layer in &self.precision.layers(&self.layers) {
            let shown = x.to_string();
            x = layer.forward(x).map_err(|error| {
                fail(EngineError::Layer {
                    error: Box::new(error),
                    input: shown,
                    from: String::new(),
                })
            })?;
        }
        loss.loss(self.precision.output(x), targets.to_device(&self.device))
            .map_err(|e| fail(EngineError::Loss(Box::new(e))))
    }

    /// Sets every parameter (and buffer) to its value in `model`, the same model's layer
    /// sequence (for example a pipeline's, after a step), matched by full-model name; the
    /// optimizer state is kept. Per-step verification (`--verify`'s default) starts each
    /// reference step from the pipeline's weights this way, so a long run checks each step, not
    /// accumulated rounding (`tests/engine/verify_per_step.rs` shows the loop).
    ///
    /// # Errors
    /// [`EngineError::MissingParameter`] if `model` lacks one of the parameters or has another shape.
    pub fn load_weights(&mut self, model: &[L]) -> Result<()> {
        let theirs: HashMap<String, adapter::ParamId> = adapter::named_parameters(model, 0)
            .into_iter()
            .map(|n| (n.name, n.id))
            .collect();
        let model: Vec<L> = model.to_vec();
        let mut values = HashMap::new();
        for ours in adapter::named_parameters(&self.layers, 0) {
            let value = theirs
                .get(&ours.name)
                .and_then(|&id| adapter::value_of(&model, id))
                .filter(|(_, shape)| *shape == ours.shape)
                .ok_or_else(|| EngineError::MissingParameter {
                    name: ours.name.clone(),
                    shape: ours.shape.clone(),
                })?;
            values.insert(ours.id, value.0);
        }
        let layers = std::mem::take(&mut self.layers);
        self.layers = adapter::set_values(layers, values);
        Ok(())
    }

    /// The layers.
    pub fn layers(&self) -> &[L] {
        &self.layers
    }

    /// Every float parameter, flattened, in model order.
    pub fn parameters(&self) -> Vec<Vec<f32>> {
        params::parameters(&self.layers)
    }

    /// The trained parameters (no buffers), flattened, in model order.
    pub fn trainable_parameters(&self) -> Vec<Vec<f32>> {
        params::trainable_parameters(&self.layers)
    }
}
