//! Exact resume under burn-train's checkpointer: the pipeline's own checkpoint (weights, every
//! stage's optimizer state, step count) saved beside burn's each epoch, and loaded when a run
//! resumes with `SupervisedTraining::checkpoint(epoch)`. burn's optimizer record cannot hold it:
//! the optimizer state lives in the pipeline's stages, not in the `Learner`.

use std::path::{Path, PathBuf};

use pipetrain_engine::Layer;

use crate::error::Result;
use crate::pipeline::Pipeline;

/// The pipeline checkpoint of `epoch` in `dir`.
pub(crate) fn path(dir: &Path, epoch: usize) -> PathBuf {
    dir.join(format!("pipeline-{epoch}.safetensors"))
}

/// Saves `pipeline` as epoch `epoch`'s checkpoint in `dir` (created if missing).
pub(crate) fn save<L: Layer>(pipeline: &Pipeline<L>, dir: &Path, epoch: usize) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        crate::error::Error::Run(crate::error::RunError::StateDir {
            path: dir.to_path_buf(),
            source: e,
        })
    })?;
    pipeline.save_checkpoint(path(dir, epoch), Default::default())
}
