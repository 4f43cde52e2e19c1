//! The facade's error type: configuration errors (found before any thread starts) and
//! everything the crates below return.

use std::ops::Range;

use pipetrain_engine::EngineError;
use pipetrain_engine::checkpoint::CheckpointError;
use pipetrain_partitioner::PartitionError;
use pipetrain_schedules::{ScheduleError, StageId};

use crate::memory::Bytes;

/// Everything `pipetrain` can return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder setting is invalid. The message names the value and the remedy.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The engine failed (a worker failed, a bad batch, …).
    #[error(transparent)]
    Engine(EngineError),
    /// The stage split failed.
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The plan failed.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// The layers' skips do not pair up (a pop without a stash, a name stashed twice, …).
    #[error(transparent)]
    Skips(#[from] pipetrain_engine::SkipError),
    /// A tie names a parameter the model lacks, or shapes that do not match.
    #[error(transparent)]
    Tie(#[from] pipetrain_engine::TieError),
    /// A checkpoint could not be written or read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The configuration search ([`crate::tune`]) refused its inputs or found nothing that fits.
    #[error(transparent)]
    Tune(#[from] pipetrain_tune::TuneError),
    /// No split into the asked number of stages fits
    /// [`memory_budget`](crate::PipelineBuilder::memory_budget).
    #[error(
        "memory budget {budget} per worker is too small for {stages} stage(s) at \
         {micro_batches} micro-batch(es): the split that needs least still needs {smallest} \
         on {stage} (layers {layers:?}: parameters, gradients, optimizer state, stashed \
         activations and deferred weight-gradient inputs); give at least .memory_budget({smallest_bytes}), or {remedy}"
    )]
    MemoryBudget {
        /// The budget, per worker.
        budget: Bytes,
        /// The least budget any split into `stages` stages fits.
        smallest: Bytes,
        /// `smallest` in bytes, as `memory_budget` takes it.
        smallest_bytes: u64,
        /// Stages asked for.
        stages: usize,
        /// Micro-batches per step.
        micro_batches: usize,
        /// The fullest stage of the split that needs least.
        stage: StageId,
        /// Its layers.
        layers: Range<usize>,
        /// What else would make it fit: more stages, re-materialization, smaller micro-batches.
        remedy: String,
    },
}

impl From<EngineError> for Error {
    /// Checkpoint and tie errors keep their own variants, whichever crate reports them.
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Checkpoint(e) => Error::Checkpoint(e),
            EngineError::Tie(e) => Error::Tie(e),
            other => Error::Engine(other),
        }
    }
}

impl From<pipetrain_engine::ActivationError> for Error {
    fn from(e: pipetrain_engine::ActivationError) -> Self {
        Error::Engine(e.into())
    }
}

/// The facade's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn config<T>(message: impl Into<String>) -> Result<T> {
    Err(Error::Config(message.into()))
}
