//! The facade's error type: configuration errors (found before any thread starts) and
//! everything the crates below return.

use pipetrain_engine::EngineError;
use pipetrain_engine::checkpoint::CheckpointError;
use pipetrain_partitioner::PartitionError;
use pipetrain_schedules::ScheduleError;

/// Everything `pipetrain` can return.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A builder setting is invalid. The message names the value and the remedy.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The engine failed (a worker failed, a bad batch, …).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The stage split failed.
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The plan failed.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// A tie names a parameter the model lacks, or shapes that do not match.
    #[error(transparent)]
    Tie(#[from] pipetrain_engine::TieError),
    /// A checkpoint could not be written or read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

/// The facade's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn config<T>(message: impl Into<String>) -> Result<T> {
    Err(Error::Config(message.into()))
}
