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

    // ---- Begin: the run loop (`trainer`). Typed facts of what a training run can fail on;
    // the messages name the trainer's settings and the builder's methods, never a
    // command-line flag (the binary maps them onto its flags). Their types follow the enum. ----
    /// A training step failed.
    #[error("step {step}: {source}")]
    Step {
        /// The optimizer step, from 1.
        step: u64,
        /// What failed.
        source: Box<Error>,
    },
    /// A step's loss is NaN or infinite and the gradient guard did not skip it.
    #[error(
        "step {step}: the loss is {loss}; lower .learning_rate(), clip gradients \
         (.clip_grad_norm(1.0)) or skip such steps (.skip_nonfinite())"
    )]
    NonFiniteLoss {
        /// The optimizer step, from 1.
        step: u64,
        /// The loss.
        loss: f64,
    },
    /// A file of the run (its checkpoint, metrics, trace, plot, or the checkpoint it resumes)
    /// could not be read or written.
    #[error("{file} {}: {reason}", path.display())]
    RunFile {
        /// Which file.
        file: RunFile,
        /// Its path.
        path: std::path::PathBuf,
        /// Why.
        reason: RunFileError,
    },
    /// The checkpoint to resume was saved by a run with another value of a setting the
    /// batches depend on.
    #[error(
        "resume {}: the run was saved with {setting} {saved}, this one has {setting} {ours}; \
         resume with the same {setting} (the batches depend on it)",
        path.display()
    )]
    ResumeMismatch {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The identity entry (`seed`, `batch`, …: [`RunIdentity`](crate::trainer::RunIdentity)).
        setting: String,
        /// The saved run's value.
        saved: String,
        /// This run's value.
        ours: String,
    },
    /// The checkpoint to resume was saved under another learning-rate schedule.
    #[error(
        "resume {}: the run was saved with lr-schedule {saved}, this one has lr-schedule \
         {ours}: a schedule's rates follow the learning rate and the steps, so the steps already \
         taken would have had other rates; resume with the saved run's steps and learning rate, \
         or start a new run from its weights (`init_from`)",
        path.display()
    )]
    ResumeSchedule {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The saved run's schedule.
        saved: String,
        /// This run's.
        ours: String,
    },
    /// The checkpoint to resume is at the run's last step already.
    #[error(
        "resume {}: the checkpoint is at step {saved} already; steps = {steps} is the total, \
         give more to continue",
        path.display()
    )]
    ResumeDone {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// Its step.
        saved: u64,
        /// The run's total steps.
        steps: u64,
    },
    /// The checkpoint's next data position is not the one this data gives at its step.
    #[error(
        "resume {}: the checkpoint's next data is {saved}, this data gives {expected} at step \
         {step}; the dataset changed",
        path.display()
    )]
    ResumeData {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The saved position.
        saved: String,
        /// This data's position at `step`.
        expected: String,
        /// The checkpoint's step.
        step: u64,
    },
    /// A step made a weight non-finite from finite gradients: the checkpoint was not written.
    #[error(
        "checkpoint {}: not written: weight `{tensor}` element {index} is {value} after this step \
         (its gradients were finite); lower .learning_rate() or clip gradients \
         (.clip_grad_norm(1.0))",
        path.display()
    )]
    CheckpointNonFinite {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The tensor.
        tensor: String,
        /// The element.
        index: usize,
        /// Its value, as text (`inf`, `NaN`).
        value: String,
    },
    /// A step failed after a last good step whose checkpoint could be kept: what became of it.
    #[error("{source}\n{saved}")]
    AfterLastGood {
        /// The step's error.
        source: Box<Error>,
        /// What became of the checkpoint.
        saved: LastGood,
    },
    /// A training batch could not be read or shaped ([`Source`](crate::trainer::Source)).
    #[error("{reason}")]
    Batch {
        /// The batch's index in the run, from 0.
        index: u64,
        /// Why.
        reason: String,
    },
    /// A checkpoint to resume or to take weights from holds another model, whose weights do
    /// not fit this one.
    #[error(
        "{file} {}: the file holds {stored}, but this run builds {ours}; give the settings of \
         the stored model, or a file of this model ({source})",
        path.display()
    )]
    OtherModel {
        /// Which file.
        file: RunFile,
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The model it holds.
        stored: String,
        /// This run's model.
        ours: String,
        /// Why the weights do not fit.
        source: CheckpointError,
    },
    /// A path a run reads or writes cannot be used ([`trainer::paths`](crate::trainer::paths)).
    #[error("{name} {}: {problem}", path.display())]
    Path {
        /// The name its user knows it by.
        name: String,
        /// The path.
        path: std::path::PathBuf,
        /// What is wrong.
        problem: PathProblem,
    },
    /// An output of a run is another of its files.
    #[error(
        "{name} {} and {other} {} are the same file; {other} would overwrite it: give each its \
         own path",
        path.display(),
        other_path.display()
    )]
    SameFile {
        /// The first file's name.
        name: String,
        /// Its path.
        path: std::path::PathBuf,
        /// The output's name.
        other: String,
        /// Its path.
        other_path: std::path::PathBuf,
    },
    /// A multi-process launch does not fit the run: the launcher's processes cannot hold its
    /// workers, they were given different settings, or no MPI launcher started them.
    #[error("{0}")]
    Launch(String),
    /// Tensor-name rewriting rules (`REGEX=REPLACEMENT`) do not parse or collide.
    #[error("rename rules: {0}")]
    Renames(String),
    /// Another process of a multi-process run, or the communication with it, failed.
    #[error("{0}")]
    Processes(String),
    /// The signal handlers could not be installed, or the stop hook is malformed.
    #[error("signals: {0}")]
    Signals(String),
    // ---- End: the run loop. ----
}

// ---- The run loop's error facts (the variants between `Begin` and `End` above). ----

/// A file of a training run, as [`Error::RunFile`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunFile {
    /// The checkpoint the run writes.
    Checkpoint,
    /// The checkpoint the run resumes.
    Resume,
    /// The metrics file.
    Metrics,
    /// The chrome trace.
    Profile,
    /// The loss plot.
    Plot,
    /// The weights file a run starts from.
    Init,
}

impl std::fmt::Display for RunFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RunFile::Checkpoint => "checkpoint",
            RunFile::Resume => "resume",
            RunFile::Metrics => "metrics",
            RunFile::Profile => "profile",
            RunFile::Plot => "plot",
            RunFile::Init => "init",
        })
    }
}

/// Why a [`RunFile`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunFileError {
    /// The destination is refused or could not be written ([`engine::output`](crate::engine::output)).
    #[error(transparent)]
    Output(#[from] pipetrain_engine::output::OutputError),
    /// Reading or writing failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A checkpoint could not be read or written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A metrics file's extension names no format.
    #[error("unknown format; name the file *.csv or *.jsonl")]
    MetricsFormat,
    /// An earlier run's metrics file cannot be continued (another layout, or not a metrics
    /// file).
    #[error("{0}; give another metrics file")]
    MetricsEarlier(String),
    /// The file's contents are not what was expected.
    #[error("{0}")]
    Invalid(String),
    /// A weights file fits PyTorch's layout and burn's alike: every matrix is square and no
    /// metadata says which.
    #[error(
        "tensor `{tensor}` {shape:?} and every other matrix is square, so the file fits \
         PyTorch's [out, in] layout and burn's [in, out] alike; save it with \
         `safetensors.torch.save_file` (it records format=pt) or burn's store (it records \
         producer=burn), or add that metadata"
    )]
    AmbiguousLayout {
        /// The first square matrix.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
    },
}

/// What is wrong with a path ([`Error::Path`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PathProblem {
    /// An input is too large for this machine's memory.
    #[error(
        "a file of {size} needs about {needed} to load, {why}; load it on a machine with more memory"
    )]
    TooLarge {
        /// Its size.
        size: String,
        /// The memory loading it needs.
        needed: String,
        /// How much is available, and why.
        why: String,
    },
    /// An input is a directory.
    #[error("is a directory; give the .safetensors file in it")]
    Directory,
    /// An input is a device, FIFO or socket.
    #[error("not a regular file (a device, FIFO or socket); give a file")]
    NotRegular,
    /// An input does not exist.
    #[error("no such file")]
    Missing,
    /// An output cannot be written there.
    #[error(transparent)]
    Output(pipetrain_engine::output::OutputError),
}

/// What became of the checkpoint when a step failed before any stage applied it
/// ([`Error::AfterLastGood`]).
#[derive(Clone, Debug, PartialEq)]
pub enum LastGood {
    /// The checkpoint already held the last good step.
    Held {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
    },
    /// No step completed: nothing was written.
    NoStep {
        /// The checkpoint.
        path: std::path::PathBuf,
    },
    /// A multi-process run does not write it.
    MultiProcess {
        /// The checkpoint.
        path: std::path::PathBuf,
    },
    /// It was written with the weights of the last good step.
    Written {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
    },
    /// Writing it failed too.
    Failed {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
        /// Why.
        error: String,
    },
}

impl std::fmt::Display for LastGood {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LastGood::Held { path, step } => write!(
                f,
                "checkpoint {} holds step {step}, the last good one",
                path.display()
            ),
            LastGood::NoStep { path } => write!(
                f,
                "no step completed, so checkpoint {} was not written",
                path.display()
            ),
            LastGood::MultiProcess { path } => write!(
                f,
                "checkpoint {} was not written (a multi-process run)",
                path.display()
            ),
            LastGood::Written { path, step } => write!(
                f,
                "no stage applied it, so checkpoint {} was written with the weights of step \
                 {step}, the last good one",
                path.display()
            ),
            LastGood::Failed { path, step, error } => write!(
                f,
                "checkpoint {} of step {step} failed too: {error}",
                path.display()
            ),
        }
    }
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
