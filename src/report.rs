//! What one training step reports.

use std::time::Duration;

use pipetrain_engine::StepOutcome;
use pipetrain_schedules::{StageId, WorkerId};

/// Measurements of one stage (summed over nothing: one row per worker).
#[derive(Clone, Debug, PartialEq)]
pub struct StageReport {
    /// Which worker.
    pub worker: WorkerId,
    /// Time in compute actions.
    pub compute: Duration,
    /// Time waiting (bubble and transfers).
    pub idle: Duration,
    /// Measured idle / step wall time.
    pub bubble_fraction: f64,
    /// Simulated bubble fraction of the same plan with this step's measured mean costs.
    pub predicted_bubble_fraction: f64,
    /// Most micro-batches stashed at once.
    pub peak_stash: usize,
    /// Most bytes held at once for deferred weight gradients (split backward; see
    /// [`Backward`](crate::Backward)).
    pub peak_deferred_bytes: usize,
    /// When the worker's all-reduce ran, as offsets from the step's start.
    pub all_reduce: Option<(Duration, Duration)>,
}

/// What [`crate::Pipeline::train_step`] returns.
#[derive(Clone, Debug, PartialEq)]
pub struct StepReport {
    /// 0-based step number.
    pub step: u64,
    /// Mean loss over the mini-batch.
    pub loss: f64,
    /// Rows in the mini-batch.
    pub samples: usize,
    /// Step wall time.
    pub wall: Duration,
    /// One row per worker, replica-major.
    pub workers: Vec<StageReport>,
    /// Whether this step ran the optimizer (false on the first k−1 steps of an accumulation).
    pub optimizer_step: bool,
    /// Time in gradient all-reduces, summed over workers (zero with one replica).
    pub all_reduce: Duration,
    /// Fraction of the all-reduce time that overlapped upstream stages' backward.
    pub all_reduce_overlap: Option<f64>,
    /// The global gradient norm (over every stage and replica) before clipping; `None` when no
    /// optimizer step ran.
    pub grad_norm: Option<f64>,
    /// Whether the update was skipped for a non-finite gradient (see
    /// [`PipelineBuilder::skip_nonfinite`](crate::PipelineBuilder::skip_nonfinite)).
    pub skipped: bool,
}

impl StepReport {
    /// Samples per second of this step.
    pub fn samples_per_sec(&self) -> f64 {
        self.samples as f64 / self.wall.as_secs_f64().max(1e-12)
    }

    /// Overall measured bubble: total idle over total worker time.
    pub fn bubble_fraction(&self) -> f64 {
        let total = self.wall.as_secs_f64() * self.workers.len() as f64;
        let idle: f64 = self.workers.iter().map(|s| s.idle.as_secs_f64()).sum();
        if total > 0.0 { idle / total } else { 0.0 }
    }

    /// The row of `stage` in replica 0.
    pub fn stage(&self, stage: StageId) -> Option<&StageReport> {
        self.workers
            .iter()
            .find(|s| s.worker.stage == stage && s.worker.replica.0 == 0)
    }

    pub(crate) fn from_outcome(step: u64, o: StepOutcome, predicted: &[f64]) -> Self {
        let (all_reduce_time, overlap) = (o.all_reduce_time(), o.all_reduce_overlap());
        let (grad_norm, skipped) = (o.grad_norm(), o.skipped());
        let workers = o
            .workers
            .into_iter()
            .map(|w| StageReport {
                worker: w.worker,
                compute: w.compute,
                idle: w.idle,
                bubble_fraction: w.bubble_fraction,
                predicted_bubble_fraction: predicted
                    .get(w.worker.stage.index())
                    .copied()
                    .unwrap_or(0.0),
                peak_stash: w.peak_stash,
                peak_deferred_bytes: w.peak_deferred_bytes,
                all_reduce: w.all_reduce,
            })
            .collect();
        Self {
            step,
            loss: o.loss,
            samples: o.samples,
            wall: o.wall,
            workers,
            optimizer_step: o.optimizer_step,
            all_reduce: all_reduce_time,
            all_reduce_overlap: overlap,
            grad_norm,
            skipped,
        }
    }
}
