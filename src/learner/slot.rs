//! The strategy's pipeline, built before training when its split is given and at the first
//! training batch when the split is measured on a batch: burn-train hands batches out only
//! while it trains, and drawing one early would advance a shuffled loader's order.

use crate::BuildError;
use std::path::PathBuf;

use pipetrain_engine::{Batch, Layer};

use crate::builder::Validated;
use crate::error::{Error, Result};
use crate::pipeline::Pipeline;

/// A pipeline, or the validated settings it is built from at the first batch.
pub(crate) struct Slot<L: Layer> {
    pipeline: Option<Pipeline<L>>,
    waiting: Option<Validated<L>>,
    /// Stages of the split.
    stages: usize,
    /// The pipeline checkpoint to load once it is built (exact resume).
    resume: Option<PathBuf>,
}

impl<L: Layer> Slot<L> {
    /// The pipeline of `settings` at once unless its split needs a batch; `resume` is loaded
    /// into it when it is built.
    pub fn new(settings: Validated<L>, resume: Option<PathBuf>) -> Result<Self> {
        let mut slot = Self {
            stages: settings.stages(),
            pipeline: None,
            resume,
            waiting: Some(settings),
        };
        if !slot.waiting.as_ref().is_some_and(Validated::needs_batch) {
            slot.build(None)?;
        }
        Ok(slot)
    }

    /// Stages of the split.
    pub fn stages(&self) -> usize {
        self.stages
    }

    /// The pipeline, if built.
    pub fn built(&self) -> Option<&Pipeline<L>> {
        self.pipeline.as_ref()
    }

    /// The pipeline, built on `batch` if it is not yet.
    pub fn get(&mut self, batch: &Batch) -> Result<&mut Pipeline<L>> {
        if self.pipeline.is_none() {
            self.build(Some(batch))?;
        }
        self.pipeline
            .as_mut()
            .ok_or(Error::Build(BuildError::BuildFailedBefore))
    }

    fn build(&mut self, batch: Option<&Batch>) -> Result<()> {
        let Some(settings) = self.waiting.take() else {
            return Err(Error::Build(BuildError::BuildFailedBefore));
        };
        let mut pipeline = settings.resolve(batch)?;
        if let Some(path) = self.resume.take() {
            pipeline.load_checkpoint(path)?;
        }
        self.pipeline = Some(pipeline);
        Ok(())
    }
}
