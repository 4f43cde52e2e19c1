//! What the builder (and the burn-train strategy) refuses before any thread starts:
//! [`BuildError`], a usage error. Each names the value and its remedy.

use std::ops::Range;

use pipetrain_engine::Remat;
use pipetrain_schedules::{Schedule, StageId};

use crate::memory::Bytes;
use crate::remedy::{Remedy, Setting, Value};

/// A configuration refused before any thread starts ([`Error::Build`](super::Error::Build)).
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
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
    /// The configuration search was given no batch to measure the model on.
    NoTuneBatch,
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
    /// A number of stages that disagrees with the balance's.
    StagesAndBalance {
        /// The stages asked for (ranks, under a schedule of several chunks per rank).
        stages: usize,
        /// Chunks per rank: the balance lists `stages × virtual_stages` of them.
        virtual_stages: usize,
        /// The balance given.
        balance: Vec<usize>,
        /// A stage count, or a balance, that agree.
        remedy: Remedy,
    },
    /// More stages (or chunks, at several per rank) than layers.
    MoreStagesThanLayers {
        /// The stages asked for (ranks, under a schedule of several chunks per rank).
        stages: usize,
        /// Chunks per rank.
        virtual_stages: usize,
        /// The model's layers.
        layers: usize,
        /// A stage count the layers hold, or a schedule of fewer chunks per rank.
        remedy: Remedy,
    },
    /// A balance whose stages do not split into ranks of the schedule's chunks.
    UnevenBalance {
        /// The balance given.
        balance: Vec<usize>,
        /// Chunks per rank.
        virtual_stages: usize,
        /// The schedule.
        schedule: Schedule,
        /// A balance of whole ranks, or a schedule of one chunk per rank.
        remedy: Remedy,
    },
    /// A memory budget, which chooses the split, with a balance, which fixes it.
    BudgetAndBalance {
        /// The budget, bytes per worker.
        budget: u64,
        /// The balance given.
        balance: Vec<usize>,
    },
    /// A multi-process pipeline whose split a memory budget would choose by measuring (each
    /// process could measure another); without a budget its split is even.
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
    /// The pipeline is used after its build failed (the burn-train strategy builds it on the
    /// first batch).
    BuildFailedBefore,
    /// `build()` of a split that is measured on a batch (by time, or by memory budget).
    NeedsBatch {
        /// The stages to split into.
        stages: usize,
        /// The memory budget that chooses the split, bytes per worker, if one was given.
        budget: Option<u64>,
    },
    /// A burn-train option that the pipeline does not do.
    GradAccumulation {
        /// The batches burn-train would sum.
        batches: usize,
    },
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

impl BuildError {
    /// The facts: `invalid configuration: …`, or the memory budget no split fits.
    pub(super) fn facts(&self) -> String {
        if let Some(facts) = self.config_facts() {
            return format!("invalid configuration: {facts}");
        }
        match self {
            BuildError::MemoryBudget {
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

    fn config_facts(&self) -> Option<String> {
        Some(match self {
            BuildError::Setting {
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
            BuildError::NoLayers => {
                "no layers: the builder needs the model's layer sequence".into()
            }
            BuildError::NoTuneBatch => {
                "tune needs at least one batch to measure the model on".into()
            }
            BuildError::EmptyModel => {
                "the layer sequence is empty: a pipeline needs at least one layer".into()
            }
            BuildError::RematWithBatchNorm { remat, layer } => format!(
                "remat {remat} with batch norm (layer {layer}): re-materialization's first \
                 forward uses running statistics, not the micro-batch's"
            ),
            BuildError::StagesAndBalance {
                stages,
                virtual_stages: 1,
                balance,
                ..
            } => format!(
                "stages = {stages} but balance {balance:?} has {} stages",
                balance.len()
            ),
            BuildError::StagesAndBalance {
                stages,
                virtual_stages: v,
                balance,
                ..
            } => format!(
                "stages = {stages} at {v} chunks per stage lists {} chunks, but balance \
                 {balance:?} has {}",
                stages * v,
                balance.len()
            ),
            BuildError::MoreStagesThanLayers {
                stages,
                virtual_stages: 1,
                layers,
                ..
            } => format!(
                "{stages} stages but only {layers} layers: every stage needs at least one layer"
            ),
            BuildError::MoreStagesThanLayers {
                stages,
                virtual_stages: v,
                layers,
                ..
            } => format!(
                "{stages} stages of {v} chunks each make {} chunks but only {layers} layers: \
                 every chunk needs at least one layer",
                stages * v
            ),
            BuildError::UnevenBalance {
                balance,
                virtual_stages,
                schedule,
                ..
            } => format!(
                "balance {balance:?} has {} stages, which do not split into stages of \
                 {virtual_stages} chunks each ({schedule}): it needs a multiple of \
                 {virtual_stages}",
                balance.len()
            ),
            BuildError::BudgetAndBalance { budget, balance } => format!(
                "a memory budget ({budget} bytes) chooses the split, but balance {balance:?} \
                 fixes it"
            ),
            BuildError::MeasuredSplitAcrossProcesses { stages } => format!(
                "a multi-process pipeline needs a fixed split of its {stages} stages: the split a \
                 memory budget chooses is measured on each process and could differ"
            ),
            BuildError::DeviceCount {
                devices,
                replicas,
                stages,
            } => format!("{devices} devices for {replicas} replicas × {stages} stages"),
            BuildError::ClipWithTies => {
                "clip_grad_norm with tied parameters is not supported yet (a \
                                    tied parameter's gradient would count twice in the norm)"
                    .into()
            }
            BuildError::BuildFailedBefore => "the pipeline's build failed before".into(),
            BuildError::NeedsBatch {
                stages,
                budget: Some(budget),
            } => format!(
                "a memory budget ({budget} bytes) chooses the split into {stages} stage(s) from                  the layers' memory and times, measured on a batch"
            ),
            BuildError::NeedsBatch {
                stages,
                budget: None,
            } => format!(
                "{stages} stages without a balance: the split is balanced by the layers' times,                  measured on a batch"
            ),
            BuildError::GradAccumulation { batches } => format!(
                "grads_accumulation({batches}): burn-train sums the gradients of {batches} \
                 batches, which PipelineStrategy does not do (the pipeline's micro-batches keep \
                 the memory of one micro-batch)"
            ),
            _ => return None,
        })
    }

    /// What fixes it.
    pub(super) fn remedy(&self) -> Option<Remedy> {
        match self {
            BuildError::Setting { remedy, .. } => remedy.clone(),
            BuildError::NoLayers => Some(Remedy::sentence(
                "call .layers(model_layers) with the model's layer sequence",
            )),
            BuildError::RematWithBatchNorm { .. } => {
                Some(Remedy::set(Setting::Remat, Value::mode("never")))
            }
            BuildError::StagesAndBalance { remedy, .. }
            | BuildError::MoreStagesThanLayers { remedy, .. }
            | BuildError::UnevenBalance { remedy, .. } => Some(remedy.clone()),
            // Either one alone: a stage count does not settle which.
            BuildError::BudgetAndBalance { .. } => Some(Remedy::one_of([
                Remedy::Drop(Setting::MemoryBudget),
                Remedy::Drop(Setting::Balance),
            ])),
            BuildError::MeasuredSplitAcrossProcesses { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::Balance, Value::Any),
                Remedy::Drop(Setting::MemoryBudget),
            ])),
            BuildError::DeviceCount {
                replicas, stages, ..
            } => Some(Remedy::sentence(format!(
                "give one device per stage ({stages}), one per worker ({}), or one for all",
                replicas * stages
            ))),
            BuildError::ClipWithTies => Some(Remedy::sentence("drop the ties or the clipping")),
            BuildError::BuildFailedBefore => Some(Remedy::sentence(
                "fix the error its build returned, and start a new run",
            )),
            BuildError::NeedsBatch { budget, .. } => {
                let measure =
                    Remedy::sentence("build with .build_with(&batch), giving a training batch");
                Some(match budget {
                    Some(_) => measure,
                    None => Remedy::one_of([measure, Remedy::set(Setting::Balance, Value::Any)]),
                })
            }
            BuildError::GradAccumulation { batches } => Some(Remedy::sentence(format!(
                "drop it and use a {batches}× larger batch"
            ))),
            BuildError::MemoryBudget { remedy, .. } => Some(remedy.clone()),
            BuildError::NoTuneBatch | BuildError::EmptyModel => None,
        }
    }
}
