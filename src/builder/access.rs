//! What [`PipelineBuilder::auto`](super::PipelineBuilder::auto) reads of the settings so far.

use burn::prelude::*;
use pipetrain_engine::{Layer, OptimizerConfig};

use super::PipelineBuilder;

impl<L: Layer> PipelineBuilder<L> {
    /// The layers set so far (for [`auto`](Self::auto)).
    pub(crate) fn layers_set(&self) -> Option<&[L]> {
        self.layers.as_deref()
    }

    /// The devices set so far.
    pub(crate) fn devices_set(&self) -> &[Device] {
        &self.devices
    }

    /// The optimizer set so far.
    pub(crate) fn optimizer_set(&self) -> &OptimizerConfig {
        &self.optimizer
    }
}
