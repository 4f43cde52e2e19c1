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

    // ---- The subcommands' library side: bench, tune, plan, export (crate::bench, crate::tune,
    // crate::plan, crate::export). Facts only; the binary names its flags. ----
    /// A bench setting that every row needs at least 1 of is 0.
    #[error("bench setting `{setting}` is 0: every row needs at least 1")]
    BenchZero {
        /// The [`BenchSettings`](crate::bench::BenchSettings) field.
        setting: &'static str,
    },
    /// The batch does not split evenly over a row's replicas × micro-batches.
    #[error(
        "batch {batch} does not split into {replicas} replica(s) × {micro_batches} \
         micro-batches (row `{row}`); give a batch that is a multiple of {}, or leave \
         {micro_batches} out of the micro-batch counts",
        replicas * micro_batches
    )]
    BenchBatchSplit {
        /// Rows per step.
        batch: usize,
        /// The row's replicas.
        replicas: usize,
        /// The row's micro-batches.
        micro_batches: usize,
        /// The row's label.
        row: String,
    },
    /// The row filter matches no row.
    #[error("{only:?} matches no row; rows are: {}", rows.join("; "))]
    BenchNoRow {
        /// The filter.
        only: String,
        /// Every row there is.
        rows: Vec<String>,
    },
    /// One of our bench rows failed.
    #[error("{row}: {reason}")]
    BenchRow {
        /// The row's label.
        row: String,
        /// What failed.
        reason: String,
    },
    #[cfg(feature = "commands")]
    /// The folder given for the PyTorch peer scripts does not hold them.
    #[error(
        "{}: no common.py there; the peers folder holds bench_single.py, bench_ddp.py, \
         bench_pipe.py and common.py",
        dir.display()
    )]
    PeersNoScripts {
        /// The folder.
        dir: std::path::PathBuf,
    },
    #[cfg(feature = "commands")]
    /// No folder was given for the PyTorch peer scripts and none was found.
    #[error(
        "no PyTorch peer scripts found (looked for shared/peers/common.py in every folder above \
         the program and the source tree)"
    )]
    PeersNotFound,
    #[cfg(feature = "commands")]
    /// The Python given for the PyTorch peers cannot import torch.
    #[error(
        "{} cannot import torch and numpy, so no PyTorch column; to get them: {}",
        python.display(),
        crate::bench::HOW_TO_GET_TORCH
    )]
    PeersNoTorch {
        /// The Python.
        python: std::path::PathBuf,
    },
    /// No configuration of the tune search fits (its memory budget, its workers).
    #[error("no configuration fits; the first left out:\n{}", left_out.join("\n"))]
    TuneNothingFits {
        /// `  knobs: why` for the first configurations left out.
        left_out: Vec<String>,
    },
    /// A plan cost that is negative, not finite, or a weight gradient above the backward.
    #[error("{cost} cost {value}: {reason}")]
    PlanCost {
        /// Which cost: `forward`, `backward`, `weight` or `transfer`.
        cost: &'static str,
        /// The value given.
        value: f64,
        /// What is wrong and what to give instead.
        reason: String,
    },
    /// The checkpoint's model has no PyTorch module to export to.
    #[error(
        "the model {} has no documented PyTorch module (MLP and GPT have); load the checkpoint \
         with pipetrain instead",
        model.as_deref().unwrap_or("(not recorded)")
    )]
    ExportModel {
        /// The model the checkpoint records, if it records one.
        model: Option<String>,
    },
    /// A checkpoint tensor that is not F32.
    #[error("tensor `{tensor}` is {dtype}; checkpoints hold F32 weights")]
    ExportTensor {
        /// The tensor's name.
        tensor: String,
        /// Its element type.
        dtype: String,
    },
    /// A checkpoint that cannot be read as safetensors, or an export that cannot be encoded.
    #[error("{}: {reason}", path.display())]
    ExportFile {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// What failed.
        reason: String,
    },
    // ---- end of the subcommands' block ----
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
