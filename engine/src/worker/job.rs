//! What a step asks of its workers: the [`StepContext`] they all share — with the [`Job`],
//! training or inference — and each worker's share of the data ([`Feed`]), and what a worker
//! hands back ([`Finished`]).

use std::sync::Arc;
use std::time::Instant;

use pipetrain_schedules::{MicroBatchId, Zero};

use crate::comm::abort::Abort;
use crate::model::activation::Activation;
use crate::model::loss::Loss;
use crate::skips::SkipRoutes;
use crate::worker::grad_guard::GradGuard;
use crate::worker::remat::Remat;
use crate::worker::report::WorkerReport;
use crate::worker::timing::Timing;
use crate::worker::turns::Turns;

/// What the whole step shares: its shape, its job, and how its workers stop and time.
pub(crate) struct StepContext {
    pub stages: usize,
    pub micro_batches: usize,
    pub job: Job,
    pub abort: Arc<Abort>,
    pub start: Instant,
    /// Whether each compute action synchronises the device before its time is read.
    pub timing: Timing,
    /// How tensors cross to other worker threads on a GPU.
    pub handoff: crate::Handoff,
    /// The dtype the layers compute in.
    pub precision: crate::Precision,
    /// The skips sent straight between stages.
    pub skips: SkipRoutes,
    /// A warm-up step's turn: its compute actions run one at a time (`worker/warm_up.rs`).
    pub serial: Option<crate::worker::warm_up::Serial>,
}

/// What the step computes.
// One job per step, shared by every worker of it: boxing `Training` would save nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Job {
    /// Forward and backward with the loss; the gradients accumulate, and the plan says whether
    /// they are summed over the replicas and applied.
    Train(Training),
    /// Forward only, without autodiff: the last stage keeps its outputs.
    Infer,
}

/// A training step's settings.
pub(crate) struct Training {
    pub learning_rate: f64,
    /// The loss on the last stage.
    pub loss: Arc<dyn Loss>,
    /// 1 / k (accumulation): with each micro-batch's row weight ([`Feed::weights`]), makes the
    /// summed gradients the mean gradient of the accumulated batches.
    pub loss_scale: f64,
    pub remat: Remat,
    /// Split backward: dense layers run by hand, their weight gradients deferred to `W`.
    pub split: bool,
    /// Micro-batches whose deferred weight gradients are computed together (0: the step's).
    pub weight_group: usize,
    /// Values per all-reduce bucket.
    pub bucket_elems: usize,
    /// The ZeRO level: from 1, each replica keeps optimizer state for its own share of the
    /// parameters (and from 2 its gradients; at 3 its values between computations).
    pub zero: Zero,
    /// Checks and clipping of the summed gradients before the optimizer step.
    pub guard: GradGuard,
    /// The compute order across the stages of each rank, when ranks hold several (interleaved
    /// plans).
    pub turns: Option<Turns>,
    /// The index in the whole model of each stage's first layer (names in errors).
    pub layer_offsets: Vec<usize>,
}

impl Job {
    /// The training settings; `None` for inference.
    pub fn training(&self) -> Option<&Training> {
        match self {
            Job::Train(training) => Some(training),
            Job::Infer => None,
        }
    }

    /// The turns of an interleaved training plan.
    pub fn turns(&self) -> Option<&Turns> {
        self.training().and_then(|t| t.turns.as_ref())
    }

    /// Whether the backward is split (never for inference).
    pub fn split(&self) -> bool {
        self.training().is_some_and(|t| t.split)
    }

    /// The phase's name in traces.
    pub fn phase(&self) -> &'static str {
        match self {
            Job::Train(_) => "train",
            Job::Infer => "inference",
        }
    }
}

/// Stage 0 reads micro-batch inputs from here, the last stage targets.
#[derive(Default)]
pub(crate) struct Feed {
    pub inputs: Vec<Option<Activation>>,
    pub targets: Vec<Option<Activation>>,
    /// The last stage's loss weight per micro-batch: its rows / the batch's rows.
    pub weights: Vec<f64>,
}

/// What a worker that finished its program hands back.
pub(crate) struct Finished {
    /// Its share of the step's loss (last stage of a training step), else 0.
    pub loss: f64,
    pub report: WorkerReport,
    /// The last stage's outputs of an inference run, by micro-batch.
    pub outputs: Vec<(MicroBatchId, Activation)>,
}
