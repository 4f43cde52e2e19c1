//! Checkpoints of a [`Pipeline`]: layout-independent, so a run saved under one split and replica
//! count resumes under any other. The engine's runtime does the work once the split is made;
//! before that, the whole model is saved or loaded as one sequence.

use std::collections::BTreeMap;
use std::path::Path;

use pipetrain_engine::Layer;
use pipetrain_engine::checkpoint::{self, Checkpoint, Progress};

use crate::error::Result;
use crate::pipeline::{Pipeline, State};

impl<L: Layer> Pipeline<L> {
    /// Optimizer steps taken so far (restored by [`load_checkpoint`](Self::load_checkpoint)).
    pub fn optimizer_steps(&self) -> u64 {
        match &self.state {
            State::Running(runtime) => runtime.optimizer_steps(),
            State::Pending { restore, .. } => restore.as_ref().map_or(0, |c| c.progress().step),
        }
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
        let path = path.as_ref();
        match &self.state {
            State::Running(runtime) => runtime.save_checkpoint(path, extra)?,
            State::Pending { layers, .. } => {
                let progress = Progress {
                    step: self.optimizer_steps(),
                    extra,
                };
                checkpoint::save_model(path, layers, self.config.optimizer.name(), &progress)?
            }
        }
        Ok(())
    }

    /// This process's part of a checkpoint in a multi-process run (the weights of the stages
    /// it runs and its workers' optimizer state): one process gathers every part and writes
    /// the single file with [`pipetrain_engine::checkpoint::write_parts`]. `path` names the
    /// checkpoint in errors. Refused before the split is made and in the middle of an
    /// accumulation.
    pub fn checkpoint_part(
        &self,
        path: impl AsRef<Path>,
        extra: BTreeMap<String, String>,
    ) -> Result<Vec<u8>> {
        match &self.state {
            State::Running(runtime) => Ok(runtime.checkpoint_part(path.as_ref(), extra)?),
            State::Pending { .. } => Err(crate::error::Error::NoSplitYet {
                what: "a checkpoint part",
            }),
        }
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
        checkpoint.check_optimizer(self.config.optimizer.name())?;
        let progress = checkpoint.progress().clone();
        match &mut self.state {
            State::Pending { layers, restore } => {
                *layers = checkpoint.load_model(layers.clone())?;
                *restore = Some(checkpoint);
            }
            State::Running(runtime) => runtime.load_checkpoint(&checkpoint)?,
        }
        Ok(progress)
    }
}
