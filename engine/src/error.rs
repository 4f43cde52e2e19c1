//! The engine's error type.

use pipetrain_schedules::{Action, MicroBatchId, ReplicaId, ScheduleError, StageId};

use crate::activation::ActivationError;

/// Why one action of one worker failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Cause {
    /// A layer, the loss or burn panicked.
    #[error("panicked: {message}{context}")]
    Panic {
        /// The panic message.
        message: String,
        /// What the worker was computing on, e.g. " (input: rank-2 float [2, 8] received from
        /// stage 0)".
        context: String,
    },
    /// A layer rejected its input (wrong rank or kind, or its own reason).
    #[error("{error} (input: {input}{from})")]
    Layer {
        /// What the layer said.
        error: ActivationError,
        /// The input it was given.
        input: String,
        /// Where the input came from, e.g. " received from stage 0" (empty for stage 0).
        from: String,
    },
    /// The loss rejected the last stage's output or the targets.
    #[error("loss: {0}")]
    Loss(ActivationError),
    /// The upstream gradient does not fit this stage's output.
    #[error("gradient: {0}")]
    Gradient(ActivationError),
    /// The device failed to run the action's work (found when it was synchronised).
    #[error("device: {0}")]
    Device(String),
    /// The plan asks for something this engine cannot do yet.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The transport failed (a peer hung up without an error of its own).
    #[error("transport: {0}")]
    Transport(#[from] crate::transport::TransportError),
    /// The collective failed.
    #[error("collective: {0}")]
    Collective(#[from] crate::collective::CollectiveError),
    /// A gradient of the step is NaN or infinite (or its squared norm overflows f32); no stage
    /// applied the step. This is the lowest stage where one appeared.
    #[error(
        "non-finite gradient of `{parameter}` (the first stage and parameter with one; no \
         stage applied this step): lower the learning rate, clip gradients \
         (.clip_grad_norm(1.0)) or skip such steps (.skip_nonfinite())"
    )]
    NonFinite {
        /// The parameter's full-model name, e.g. `3.linear.weight`.
        parameter: String,
    },
}

/// Everything the engine can return: the crate's one error type. Sub-errors (checkpoint, ties,
/// activations, plans) keep their own types as sources.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// One worker failed; this is the first failure of the step (others were stopped).
    #[error(
        "{replica} / {stage} failed at `{action}` ({kind}{mb}): {source}",
        kind = action.kind,
        mb = micro_batch.map(|m| format!(" of {m}")).unwrap_or_default()
    )]
    StageFailed {
        /// The failing worker's replica.
        replica: ReplicaId,
        /// The failing worker's stage.
        stage: StageId,
        /// The micro-batch it was working on, if the action has one.
        micro_batch: Option<MicroBatchId>,
        /// The action that failed.
        action: Action,
        /// Why.
        #[source]
        source: Cause,
    },
    /// A step already failed: stage states may be partly updated, so the pipeline refuses to go
    /// on. Rebuild it (or reload a checkpoint).
    #[error(
        "the pipeline is unusable after a failed step (its stages may be partly updated); \
         build a new one or load a checkpoint"
    )]
    Poisoned,
    /// The batch cannot be fed to the pipeline.
    #[error("bad batch: {0}")]
    Batch(#[from] ActivationError),
    /// The batch has fewer rows than `replicas × micro_batches` (each micro-batch needs a
    /// row). Found before any worker runs: the pipeline stays usable.
    #[error(
        "a batch of {rows} rows does not split into {replicas} replicas × {micro_batches} \
         micro-batches of at least one row; use a batch of at least {} rows or fewer \
         micro-batches",
        replicas * micro_batches
    )]
    BatchSplit {
        /// Rows in the batch.
        rows: usize,
        /// Data-parallel replicas.
        replicas: usize,
        /// Micro-batches per replica.
        micro_batches: usize,
    },
    /// Another process of a multi-process run failed (or stopped answering): this step is over.
    #[error("rank {rank} failed: {message}")]
    Peer {
        /// The failed process's rank.
        rank: usize,
        /// What it was doing and why it failed, as it reported (or as its silence shows).
        message: String,
    },
    /// The world, its devices or its workers do not fit together.
    #[error("{0}")]
    World(String),
    /// A checkpoint could not be written or read.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// A tie names a parameter the model lacks, or shapes that do not match.
    #[error(transparent)]
    Tie(#[from] crate::tie::TieError),
    /// A checkpoint cannot be saved now.
    #[error(
        "{pending} of {accumulation} accumulated batches are not applied yet; save after the \
         optimizer step (when the step report says optimizer_step)"
    )]
    MidAccumulation {
        /// Batches accumulated since the last optimizer step.
        pending: usize,
        /// Batches per optimizer step.
        accumulation: usize,
    },
    /// The plan is invalid.
    #[error(transparent)]
    Plan(#[from] ScheduleError),
    /// A worker thread died outside any action (an engine bug).
    #[error("{replica} / {stage}: worker thread died: {message}")]
    WorkerDied {
        /// Replica.
        replica: ReplicaId,
        /// Stage.
        stage: StageId,
        /// The panic message.
        message: String,
    },
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// A panic payload as text.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-text panic payload".to_string()
    }
}
