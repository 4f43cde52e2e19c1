//! What one step measured.

use std::time::Duration;

use pipetrain_schedules::WorkerId;

/// Per-worker measurements of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerReport {
    /// Which worker.
    pub worker: WorkerId,
    /// Time spent in compute actions (forward, backward, all-reduce, optimizer step).
    pub compute: Duration,
    /// Step wall time minus compute: waiting for neighbours (the bubble) and transfers.
    pub idle: Duration,
    /// idle / step wall time.
    pub bubble_fraction: f64,
    /// Most micro-batches stashed at once.
    pub peak_stash: usize,
}

/// What [`crate::run_step`] returns.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutcome {
    /// The step's loss: mean over the whole mini-batch (the sum of the scaled micro-batch losses).
    pub loss: f64,
    /// Wall time from launch to the last worker's end.
    pub wall: Duration,
    /// Per worker, replica-major.
    pub workers: Vec<WorkerReport>,
}

impl StepOutcome {
    /// Overall bubble: total idle over total worker time.
    pub fn bubble_fraction(&self) -> f64 {
        let total = self.wall.as_secs_f64() * self.workers.len() as f64;
        let idle: f64 = self.workers.iter().map(|w| w.idle.as_secs_f64()).sum();
        if total > 0.0 { idle / total } else { 0.0 }
    }
}
