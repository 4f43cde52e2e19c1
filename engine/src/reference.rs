//! Single-device training: the reference every pipeline must match.

use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use crate::activation::Activation;
use crate::error::{Cause, EngineError, Result};
use crate::layer::Layer;
use crate::loss::Loss;
use crate::optimizer::OptimizerConfig;
use crate::params;

/// Plain training of the whole layer sequence on one device, one full-batch step at a time.
pub struct SingleDevice<L: Layer> {
    layers: Vec<L>,
    optimizer: ModuleOptimizer,
    device: Device,
}

impl<L: Layer> SingleDevice<L> {
    /// A trainer for `layers` on `device`.
    pub fn new(layers: Vec<L>, device: &Device, optimizer: &OptimizerConfig) -> Self {
        let device = device.clone().autodiff();
        let layers = layers
            .into_iter()
            .map(|l| l.to_device(&device).train())
            .collect();
        Self {
            layers,
            optimizer: optimizer.init(),
            device,
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
        let fail = |cause| EngineError::StageFailed {
            replica: Default::default(),
            stage: Default::default(),
            micro_batch: None,
            action: pipetrain_schedules::Action::optimizer_step(Default::default()),
            source: cause,
        };
        let mut x = inputs.to_device(&self.device);
        for layer in &self.layers {
            let shown = x.to_string();
            x = layer.forward(x).map_err(|error| {
                fail(Cause::Layer {
                    error,
                    input: shown,
                    from: String::new(),
                })
            })?;
        }
        let value = loss
            .loss(x, targets.to_device(&self.device))
            .map_err(|e| fail(Cause::Loss(e)))?;
        let reported = value.clone().inner().into_scalar::<f64>();
        let grads = GradientsParams::from_grads(value.backward(), &self.layers);
        let layers = std::mem::take(&mut self.layers);
        self.layers = self.optimizer.step(learning_rate, layers, grads);
        Ok(reported)
    }

    /// The layers.
    pub fn layers(&self) -> &[L] {
        &self.layers
    }

    /// Every float parameter, flattened, in model order.
    pub fn parameters(&self) -> Vec<Vec<f32>> {
        params::parameters(&self.layers)
    }
}
