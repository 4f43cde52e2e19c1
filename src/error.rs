//! The facade's error type: configuration errors (found before any thread starts) and
//! everything the crates below return.
//!
//! Each error states its facts as typed fields and, where one is known, a [`Remedy`] (its
//! [`Remedied::remedy`], asked of the inner error for the crates' errors). `Display` renders the
//! remedy as builder calls ([`Builder`]); [`Error::render`] renders it in any front end's
//! [`Style`] (the `pipetrain` binary's is its flags).

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use pipetrain_engine::checkpoint::CheckpointError;
use pipetrain_engine::{EngineError, Remat, SkipError, TieError};
use pipetrain_partitioner::PartitionError;
use pipetrain_schedules::{Schedule, ScheduleError, StageId};
use pipetrain_tune::TuneError;

use crate::memory::Bytes;
use crate::remedy::{Builder, Remedied, Remedy, Setting, Style, Value};

/// Everything `pipetrain` can return.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A setting's value breaks a rule of its own (a count of 0, a learning rate that is not a
    /// positive number, …).
    Setting {
        /// The setting.
        setting: Setting,
        /// Its value, as given.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
        /// What would fix it.
        remedy: Option<Remedy>,
    },
    /// The builder was given no layers.
    NoLayers,
    /// The layer sequence is empty.
    EmptyModel,
    /// Re-materialization with a batch-norm layer: the first forward would use running
    /// statistics, not the micro-batch's.
    RematWithBatchNorm {
        /// The re-materialization mode given.
        remat: Remat,
        /// The first layer with batch statistics.
        layer: usize,
    },
    /// A schedule with several chunks per rank in a multi-process pipeline, which runs one stage
    /// per rank.
    ChunksAcrossProcesses {
        /// The schedule given.
        schedule: Schedule,
    },
    /// A number of stages that disagrees with the balance's.
    StagesAndBalance {
        /// The (model) stages asked for.
        stages: usize,
        /// The balance given.
        balance: Vec<usize>,
    },
    /// More stages than layers.
    MoreStagesThanLayers {
        /// The stages asked for.
        stages: usize,
        /// The model's layers.
        layers: usize,
    },
    /// A memory budget, which chooses the split, with a balance, which fixes it.
    BudgetAndBalance {
        /// The budget, bytes per worker.
        budget: u64,
        /// The balance given.
        balance: Vec<usize>,
    },
    /// A multi-process pipeline without a fixed split (each process could measure another).
    MeasuredSplitAcrossProcesses {
        /// The stages asked for.
        stages: usize,
    },
    /// A device list that is neither one device, one per stage nor one per worker.
    DeviceCount {
        /// Devices given.
        devices: usize,
        /// Replicas.
        replicas: usize,
        /// Stages.
        stages: usize,
    },
    /// Gradient-norm clipping with tied parameters (a tied gradient would count twice).
    ClipWithTies,
    /// Something that needs the stages before the split is made.
    NoSplitYet {
        /// What needs them, e.g. "a checkpoint part".
        what: &'static str,
    },
    /// A burn-train option that the pipeline does not do.
    GradAccumulation {
        /// The batches burn-train would sum.
        batches: usize,
    },
    /// The directory for the pipeline's own state cannot be created.
    StateDir {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The engine failed (a worker failed, a bad batch, …).
    Engine(EngineError),
    /// The stage split failed.
    Partition(PartitionError),
    /// The plan failed.
    Schedule(ScheduleError),
    /// The layers' skips do not pair up (a pop without a stash, a name stashed twice, …).
    Skips(SkipError),
    /// A tie names a parameter the model lacks, or shapes that do not match.
    Tie(TieError),
    /// A checkpoint could not be written or read.
    Checkpoint(CheckpointError),
    /// The configuration search ([`crate::tune`]) refused its inputs or found nothing that fits.
    Tune(TuneError),
    /// No split into the asked number of stages fits
    /// [`memory_budget`](crate::PipelineBuilder::memory_budget).
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
        /// What would make it fit: the least budget, more stages, re-materialization, smaller
        /// micro-batches, weight gradients every micro-batch.
        remedy: Remedy,
    },
}

impl Error {
    /// The facts and the remedy in `style`'s words: `{facts}; {remedy}`. `Display` is this in
    /// [`Builder`] style.
    pub fn render(&self, style: &dyn Style) -> String {
        self.explain(style)
    }

    /// Whether this is a configuration the builder (or the burn-train strategy) refused
    /// before any thread started, as opposed to one the crates below refused.
    pub fn is_config(&self) -> bool {
        !matches!(
            self,
            Error::StateDir { .. }
                | Error::Engine(_)
                | Error::Partition(_)
                | Error::Schedule(_)
                | Error::Skips(_)
                | Error::Tie(_)
                | Error::Checkpoint(_)
                | Error::Tune(_)
                | Error::MemoryBudget { .. }
        )
    }

    /// The facts of a configuration error (after "invalid configuration: ").
    fn config_facts(&self) -> Option<String> {
        Some(match self {
            Error::Setting {
                setting,
                value,
                rule,
                ..
            } => match setting {
                Setting::Zero => format!("ZeRO stage {value}: {rule}"),
                Setting::BucketBytes | Setting::MemoryBudget => {
                    format!("{} = {value} bytes: {rule}", setting.key())
                }
                _ => format!("{} = {value}: {rule}", setting.key()),
            },
            Error::NoLayers => "no layers: the builder needs the model's layer sequence".into(),
            Error::EmptyModel => {
                "the layer sequence is empty: a pipeline needs at least one layer".into()
            }
            Error::RematWithBatchNorm { remat, layer } => format!(
                "remat {remat} with batch norm (layer {layer}): re-materialization's first \
                 forward uses running statistics, not the micro-batch's"
            ),
            Error::ChunksAcrossProcesses { schedule } => {
                format!("{schedule}: a multi-process pipeline runs one stage per rank")
            }
            Error::StagesAndBalance { stages, balance } => format!(
                "stages = {stages} but balance {balance:?} has {} stages",
                balance.len()
            ),
            Error::MoreStagesThanLayers { stages, layers } => format!(
                "{stages} stages but only {layers} layers: every stage needs at least one layer"
            ),
            Error::BudgetAndBalance { budget, balance } => format!(
                "a memory budget ({budget} bytes) chooses the split, but balance {balance:?} \
                 fixes it"
            ),
            Error::MeasuredSplitAcrossProcesses { stages } => format!(
                "a multi-process pipeline needs a fixed split of its {stages} stages: the split \
                 measured on each process could differ"
            ),
            Error::DeviceCount {
                devices,
                replicas,
                stages,
            } => format!("{devices} devices for {replicas} replicas × {stages} stages"),
            Error::ClipWithTies => "clip_grad_norm with tied parameters is not supported yet (a \
                                    tied parameter's gradient would count twice in the norm)"
                .into(),
            Error::NoSplitYet { what } => {
                format!("no stages yet: {what} is taken after the split is made")
            }
            Error::GradAccumulation { batches } => format!(
                "grads_accumulation({batches}): burn-train sums the gradients of {batches} \
                 batches, which PipelineStrategy does not do (the pipeline's micro-batches keep \
                 the memory of one micro-batch)"
            ),
            _ => return None,
        })
    }
}

impl Remedied for Error {
    fn remedy(&self) -> Option<Remedy> {
        let count = |setting, n| Remedy::set(setting, Value::Count(n));
        match self {
            Error::Setting { remedy, .. } => remedy.clone(),
            Error::NoLayers => Some(Remedy::sentence(
                "call .layers(model_layers) with the model's layer sequence",
            )),
            Error::RematWithBatchNorm { .. } => {
                Some(Remedy::set(Setting::Remat, Value::mode("never")))
            }
            Error::ChunksAcrossProcesses { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::Schedule, Value::mode("1f1b")),
                Remedy::set(Setting::Schedule, Value::mode("zb-h1")),
            ])),
            Error::StagesAndBalance { balance, .. } => Some(Remedy::one_of([
                Remedy::sentence("give one of them"),
                count(Setting::Stages, balance.len()),
            ])),
            Error::MoreStagesThanLayers { layers, .. } => Some(count(Setting::Stages, *layers)),
            Error::BudgetAndBalance { balance, .. } => Some(Remedy::one_of([
                Remedy::sentence("drop one of them"),
                count(Setting::Stages, balance.len()),
            ])),
            Error::MeasuredSplitAcrossProcesses { .. } => {
                Some(Remedy::set(Setting::Balance, Value::Any))
            }
            Error::DeviceCount {
                replicas, stages, ..
            } => Some(Remedy::sentence(format!(
                "give one device per stage ({stages}), one per worker ({}), or one for all",
                replicas * stages
            ))),
            Error::ClipWithTies => Some(Remedy::sentence("drop the ties or the clipping")),
            Error::NoSplitYet { .. } => Some(Remedy::set(Setting::Balance, Value::Any)),
            Error::GradAccumulation { batches } => Some(Remedy::sentence(format!(
                "drop it and use a {batches}× larger batch"
            ))),
            Error::StateDir { .. } => Some(Remedy::sentence("give a writable directory")),
            Error::Engine(e) => e.remedy(),
            Error::Schedule(e) => e.remedy(),
            Error::Checkpoint(e) => e.remedy(),
            Error::Tune(e) => e.remedy(),
            Error::MemoryBudget { remedy, .. } => Some(remedy.clone()),
            Error::EmptyModel | Error::Partition(_) | Error::Skips(_) | Error::Tie(_) => None,
        }
    }

    fn facts(&self) -> String {
        if let Some(facts) = self.config_facts() {
            return format!("invalid configuration: {facts}");
        }
        match self {
            Error::StateDir { path, source } => format!(
                "cannot create the pipeline state directory {}: {source}",
                path.display()
            ),
            Error::Engine(e) => e.to_string(),
            Error::Partition(e) => e.to_string(),
            Error::Schedule(e) => e.to_string(),
            Error::Skips(e) => e.to_string(),
            Error::Tie(e) => e.to_string(),
            Error::Checkpoint(e) => e.to_string(),
            Error::Tune(e) => e.to_string(),
            Error::MemoryBudget {
                budget,
                smallest,
                stages,
                micro_batches,
                stage,
                layers,
                ..
            } => format!(
                "memory budget {budget} per worker is too small for {stages} stage(s) at \
                 {micro_batches} micro-batch(es): the split that needs least still needs \
                 {smallest} on {stage} (layers {layers:?}: parameters, gradients, optimizer \
                 state, stashed activations and deferred weight-gradient inputs)"
            ),
            _ => unreachable!("every configuration error has facts"),
        }
    }
}

impl fmt::Display for Error {
    /// The facts and the remedy as builder calls ([`Error::render`] with [`Builder`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Builder))
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::StateDir { source, .. } => Some(source),
            Error::Engine(e) => e.source(),
            Error::Partition(e) => e.source(),
            Error::Schedule(e) => e.source(),
            Error::Skips(e) => e.source(),
            Error::Tie(e) => e.source(),
            Error::Checkpoint(e) => e.source(),
            Error::Tune(e) => e.source(),
            _ => None,
        }
    }
}

impl From<EngineError> for Error {
    /// The one route of the engine's errors into the facade: checkpoint and tie errors keep
    /// their own variants, whichever crate reports them.
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Checkpoint(e) => Error::Checkpoint(e),
            EngineError::Tie(e) => Error::Tie(e),
            other => Error::Engine(other),
        }
    }
}

impl From<CheckpointError> for Error {
    /// Through [`EngineError`] (see `From<EngineError>`).
    fn from(e: CheckpointError) -> Self {
        EngineError::from(e).into()
    }
}

impl From<TieError> for Error {
    /// Through [`EngineError`] (see `From<EngineError>`).
    fn from(e: TieError) -> Self {
        EngineError::from(e).into()
    }
}

impl From<pipetrain_engine::ActivationError> for Error {
    fn from(e: pipetrain_engine::ActivationError) -> Self {
        EngineError::from(e).into()
    }
}

/// `From` for the errors that take one variant each.
macro_rules! from {
    ($($error:ty => $variant:ident),* $(,)?) => {$(
        impl From<$error> for Error {
            fn from(e: $error) -> Self {
                Error::$variant(e)
            }
        }
    )*};
}

from! {
    PartitionError => Partition,
    ScheduleError => Schedule,
    SkipError => Skips,
    TuneError => Tune,
}

/// The facade's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `setting = value` breaks `rule`; `remedy` fixes it.
pub(crate) fn invalid<T>(
    setting: Setting,
    value: impl fmt::Display,
    rule: &'static str,
    remedy: Option<Remedy>,
) -> Result<T> {
    Err(Error::Setting {
        setting,
        value: value.to_string(),
        rule,
        remedy,
    })
}
