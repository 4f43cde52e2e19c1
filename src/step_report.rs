//! What one training step reports.

use std::time::Duration;

use pipetrain_engine::{ActionTimes, StepOutcome};
use pipetrain_schedules::{ActionKind, Costs, StageId, WorkerId};

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
    /// Its compute actions' times by kind (forward, backward or its input and weight halves,
    /// all-reduce, optimizer step).
    pub actions: ActionTimes,
    /// How many times it synchronised its device (see [`Timing`](crate::Timing)): after every
    /// compute action, or only after its last one.
    pub device_syncs: u32,
    /// Compute actions it ran one at a time with the step's other workers: all of them in a
    /// warm-up step ([`WarmUp`](crate::WarmUp)), else none.
    pub serialized_actions: u32,
    /// How many times it read device values back and waited for them: one a training step
    /// (the gradient guard's norm, with the last stage's losses). Its host syncs in the step
    /// are `device_syncs + read_backs`.
    pub read_backs: u32,
    /// Bytes it sent to other stages in the step (activations, input gradients, skips): half
    /// under bf16.
    pub sent_bytes: u64,
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

    /// The plan's action costs as this step measured them, in seconds, from replica 0's
    /// workers: per stage, the mean forward and the mean backward of one micro-batch (a split
    /// backward's input half plus its weight half, whose time is spread over the micro-batches
    /// it covered); the weight half's share of all backward time; the mean all-reduce and
    /// optimizer step. Transfers count as free (they are idle time, not compute). Feed it to
    /// [`simulate`](crate::schedules::simulate) to predict what a plan takes with these costs.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain::schedules::simulate;
    /// use pipetrain::{Pipeline, ScheduleKind};
    /// use pipetrain_models::{MlpConfig, synthetic};
    ///
    /// let device = Device::flex();
    /// let batch = synthetic::classification(0, 0, 16, 16, 4, &device);
    /// let mut pipeline = Pipeline::builder()
    ///     .layers(MlpConfig::new(16, 3, 4).init(&device))
    ///     .stages(2)
    ///     .micro_batches(4)
    ///     .schedule(ScheduleKind::ZbH1) // separate input- and weight-gradient actions
    ///     .build_with(&batch)?;
    /// let report = pipeline.train_step(&batch)?;
    /// let stage = &report.workers[1].actions;
    /// assert_eq!(stage.count(pipetrain::schedules::ActionKind::Forward), 4);
    /// let costs = report.measured_costs();
    /// assert!(costs.forward.iter().chain(&costs.backward).all(|&t| t > 0.0));
    /// assert!(costs.weight_fraction > 0.0 && costs.weight_fraction < 1.0);
    /// let predicted = simulate(pipeline.plan(), &costs)?.makespan; // seconds
    /// assert!(predicted > 0.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn measured_costs(&self) -> Costs {
        let stages: Vec<&StageReport> = {
            let mut s: Vec<_> = self
                .workers
                .iter()
                .filter(|w| w.worker.replica.0 == 0)
                .collect();
            s.sort_by_key(|w| w.worker.stage);
            s
        };
        let secs = |d: Duration| d.as_secs_f64();
        let mean = |w: &StageReport, k| w.actions.mean(k).map_or(0.0, secs);
        let (mut input, mut weight) = (0.0, 0.0);
        let mut costs = Costs::uniform(stages.len(), 0.0, 0.0);
        for (i, w) in stages.iter().enumerate() {
            let a = &w.actions;
            let forwards = a.count(ActionKind::Forward).max(1) as f64;
            let full = secs(a.total(ActionKind::Backward));
            let (i_half, w_half) = (
                secs(a.total(ActionKind::BackwardInput)),
                secs(a.total(ActionKind::BackwardWeight)),
            );
            input += i_half;
            weight += w_half;
            costs.forward[i] = mean(w, ActionKind::Forward);
            costs.backward[i] = (full + i_half + w_half) / forwards;
        }
        costs.weight_fraction = if input + weight > 0.0 {
            weight / (input + weight)
        } else {
            0.5
        };
        let over = |k| {
            let v: Vec<f64> = stages.iter().map(|w| mean(w, k)).collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        };
        // ZeRO-2/3 sum with a reduce (`RG`) and hand values out with an unshard (`US`), each
        // charged half an all-reduce by the simulator: their times together are one.
        costs.all_reduce = match over(ActionKind::AllReduce) {
            0.0 => over(ActionKind::ReduceGrad) + over(ActionKind::Unshard),
            all_reduce => all_reduce,
        };
        costs.optimizer = over(ActionKind::OptimizerStep);
        costs
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
                actions: w.actions,
                device_syncs: w.device_syncs,
                serialized_actions: w.serialized_actions,
                read_backs: w.read_backs,
                sent_bytes: w.sent_bytes,
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
