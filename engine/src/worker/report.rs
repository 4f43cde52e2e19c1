//! What one step measured.

use std::collections::BTreeMap;
use std::time::Duration;

use pipetrain_schedules::{ActionKind, WorkerId};

/// How long one worker's compute actions of each kind took in a step: a count and a total per
/// kind. The measured F/B/W costs a simulation of the plan can be fed with.
///
/// ```
/// use std::time::Duration;
/// use pipetrain_engine::ActionTimes;
/// use pipetrain_schedules::ActionKind;
/// let mut times = ActionTimes::default();
/// times.record(ActionKind::Forward, Duration::from_millis(2));
/// times.record(ActionKind::Forward, Duration::from_millis(4));
/// assert_eq!(times.count(ActionKind::Forward), 2);
/// assert_eq!(times.mean(ActionKind::Forward), Some(Duration::from_millis(3)));
/// assert_eq!(times.mean(ActionKind::Backward), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActionTimes(BTreeMap<ActionKind, (u32, Duration)>);

impl ActionTimes {
    /// Adds one action of `kind` that took `elapsed`.
    pub fn record(&mut self, kind: ActionKind, elapsed: Duration) {
        let entry = self.0.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += elapsed;
    }

    /// How many actions of `kind` ran.
    pub fn count(&self, kind: ActionKind) -> u32 {
        self.0.get(&kind).map_or(0, |e| e.0)
    }

    /// Their total time.
    pub fn total(&self, kind: ActionKind) -> Duration {
        self.0.get(&kind).map_or(Duration::ZERO, |e| e.1)
    }

    /// Their mean time; `None` when none ran.
    pub fn mean(&self, kind: ActionKind) -> Option<Duration> {
        self.0.get(&kind).map(|&(n, t)| t / n.max(1))
    }
}

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
    /// Most bytes held at once for deferred weight gradients (split backward: each dense
    /// layer's input and pre-activation gradient from its `I` until its group's `W`).
    pub peak_deferred_bytes: usize,
    /// When this worker's gradient all-reduce ran (offsets from the step's start); `None` with
    /// one replica or on a step without an all-reduce.
    pub all_reduce: Option<(Duration, Duration)>,
    /// When this worker's last backward of the step ended (offset from the step's start).
    pub backward_end: Option<Duration>,
    /// Its compute actions' times, by kind.
    pub actions: ActionTimes,
    /// How many times it synchronised its device: after every compute action under
    /// [`Timing::Device`](crate::Timing::Device), after its last one only under
    /// [`Timing::Host`](crate::Timing::Host); counted as each sync returns (a no-op on a CPU,
    /// counted all the same).
    pub device_syncs: u32,
    /// Compute actions it ran one at a time with the step's other workers: all of them in a
    /// warm-up step ([`WarmUp`](crate::WarmUp)), none in any other.
    pub serialized_actions: u32,
    /// How many times it read device values back to the host, waiting for them: one per
    /// training step (the gradient guard's norm, read with the last stage's losses), one for
    /// the losses of a step without an optimizer step. A steady-state step's host syncs are
    /// `device_syncs + read_backs`.
    pub read_backs: u32,
    /// Bytes of the values this worker sent to other stages in the step (activations, input
    /// gradients, skips): elements × their dtype's width, so half under bf16.
    pub sent_bytes: u64,
    /// The global gradient norm (over every stage and replica, before clipping) that this
    /// worker's optimizer step saw; `None` on a step without an optimizer step.
    pub grad_norm: Option<f64>,
    /// Whether the optimizer step was skipped for a non-finite gradient
    /// ([`GradGuard::skip_nonfinite`](crate::GradGuard::skip_nonfinite)).
    pub skipped: bool,
}

/// What [`Runtime::step`](crate::Runtime::step) returns.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutcome {
    /// The batch's mean loss.
    pub loss: f64,
    /// Rows in the batch.
    pub samples: usize,
    /// Wall time from launch to the last worker's end.
    pub wall: Duration,
    /// Whether this step ran the optimizer (false on the first k−1 steps of an accumulation).
    pub optimizer_step: bool,
    /// Per worker, replica-major.
    pub workers: Vec<WorkerReport>,
}

impl StepOutcome {
    /// The global gradient norm before clipping (every worker saw the same); `None` when no
    /// optimizer step ran.
    pub fn grad_norm(&self) -> Option<f64> {
        self.workers.iter().find_map(|w| w.grad_norm)
    }

    /// Whether the step's update was skipped for a non-finite gradient.
    pub fn skipped(&self) -> bool {
        self.workers.iter().any(|w| w.skipped)
    }

    /// Total time spent in gradient all-reduces, summed over workers.
    pub fn all_reduce_time(&self) -> Duration {
        self.workers
            .iter()
            .filter_map(|w| w.all_reduce.map(|(a, b)| b.saturating_sub(a)))
            .sum()
    }

    /// The fraction of all-reduce time that ran while an upstream stage of the same replica was
    /// still computing backward: the overlap of communication with computation. `None` when no
    /// all-reduce ran.
    pub fn all_reduce_overlap(&self) -> Option<f64> {
        let total = self.all_reduce_time();
        if total.is_zero() {
            return None;
        }
        let overlapped: Duration = self
            .workers
            .iter()
            .filter_map(|w| {
                let (start, end) = w.all_reduce?;
                let horizon = self
                    .workers
                    .iter()
                    .filter(|u| {
                        u.worker.replica == w.worker.replica && u.worker.stage < w.worker.stage
                    })
                    .filter_map(|u| u.backward_end)
                    .max()?;
                Some(end.min(horizon).saturating_sub(start))
            })
            .sum();
        Some(overlapped.as_secs_f64() / total.as_secs_f64())
    }

    /// Overall bubble: total idle over total worker time.
    pub fn bubble_fraction(&self) -> f64 {
        let total = self.wall.as_secs_f64() * self.workers.len() as f64;
        let idle: f64 = self.workers.iter().map(|w| w.idle.as_secs_f64()).sum();
        if total > 0.0 { idle / total } else { 0.0 }
    }
}
