//! Checkpoints of a [`Pipeline`]: layout-independent, so a run saved under one split and replica
//! count resumes under any other. The engine's runtime does the work, from the moment the
//! pipeline is built (before its first step too).

use std::collections::BTreeMap;
use std::path::Path;

use pipetrain_engine::Layer;
use pipetrain_engine::checkpoint::{Checkpoint, Progress};

use crate::error::Result;
use crate::pipeline::Pipeline;

impl<L: Layer> Pipeline<L> {
    /// Optimizer steps taken so far (restored by [`load_checkpoint`](Self::load_checkpoint)).
    pub fn optimizer_steps(&self) -> u64 {
        self.runtime().optimizer_steps()
    }

    /// Saves the whole model (replica 0's weights under full-model names), the optimizer state
    /// of every worker (merged by parameter name) and `extra` (e.g. the data position) to one
    /// safetensors file, atomically. The file does not depend on the stage split or the replica
    /// count: any layout can load it. Refused in the middle of a gradient accumulation.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain::Pipeline;
    /// use pipetrain_models::{MlpConfig, synthetic};
    ///
    /// let device = Device::flex();
    /// let layers = MlpConfig::new(8, 2, 3).init(&device);
    /// let batch = synthetic::classification(0, 0, 8, 8, 3, &device);
    /// let path = std::env::temp_dir().join(format!("pipetrain-doc-{}.safetensors", std::process::id()));
    ///
    /// let mut a = Pipeline::builder().layers(layers.clone()).balance([2, 1]).replicas(2).micro_batches(2).build()?;
    /// a.train_step(&batch)?;
    /// a.save_checkpoint(&path, Default::default())?;
    ///
    /// let mut b = Pipeline::builder().layers(layers).stages(1).build()?; // another layout
    /// let progress = b.load_checkpoint(&path)?;
    /// assert_eq!(progress.step, 1);
    /// assert_eq!(b.parameters(), a.parameters());
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), pipetrain::Error>(())
    /// ```
    pub fn save_checkpoint(
        &self,
        path: impl AsRef<Path>,
        extra: BTreeMap<String, String>,
    ) -> Result<()> {
        Ok(self.runtime().save_checkpoint(path.as_ref(), extra)?)
    }

    /// This process's part of a checkpoint in a multi-process run (the weights of the stages
    /// it runs and its workers' optimizer state): one process gathers every part and writes
    /// the single file with [`pipetrain_engine::checkpoint::write_parts`]. `path` names the
    /// checkpoint in errors. Refused in the middle of an accumulation.
    pub fn checkpoint_part(
        &self,
        path: impl AsRef<Path>,
        extra: BTreeMap<String, String>,
    ) -> Result<Vec<u8>> {
        Ok(self.runtime().checkpoint_part(path.as_ref(), extra)?)
    }

    /// Loads a checkpoint written by [`save_checkpoint`](Self::save_checkpoint) under any
    /// layout: weights into every replica, each worker's optimizer state, and the step count;
    /// returns the saved progress. Nothing changes if the file does not fit (the error names the
    /// tensor); should the optimizer state then fail to load, the pipeline is left poisoned
    /// rather than half loaded. Also makes a pipeline usable again after a failed step.
    pub fn load_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<Progress> {
        self.restore(Checkpoint::read(path.as_ref())?)
    }

    /// [`load_checkpoint`](Self::load_checkpoint) of a checkpoint already read (for example
    /// broadcast from another process: [`Checkpoint::from_bytes`]).
    pub fn restore(&mut self, checkpoint: Checkpoint) -> Result<Progress> {
        let runtime = self.runtime_mut();
        checkpoint.check_optimizer(runtime.workers().optimizer().name())?;
        let progress = checkpoint.progress().clone();
        runtime.load_checkpoint(&checkpoint)?;
        Ok(progress)
    }
}
