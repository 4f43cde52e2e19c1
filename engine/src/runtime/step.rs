//! Running: a training step and an inference pass, each a [`Job`] for the workers. Each lends
//! the workers' states to their threads with an assignment and takes every state back.

use std::sync::Arc;
use std::time::Instant;

use pipetrain_schedules::{Plan, ReplicaId, StageId, WorkerId};

use super::config::Backward;
use super::lifecycle::Runtime;
use crate::adapter;
use crate::error::{EngineError, Result};
use crate::model::activation::Activation;
use crate::model::batch::{Batch, Shard};
use crate::model::layer::Layer;
use crate::runtime::thread::Assignment;
use crate::worker::report::StepOutcome;
use crate::worker::turns::Turns;
use crate::worker::warm_up::Serial;
use crate::worker::{Feed, Finished, Job, StepContext, Training, WorkerState};

impl<L: Layer> Runtime<L> {
    /// The turn of a warm-up step (`worker/warm_up.rs`): for the first step of its kind
    /// (`warmed` false) when the configuration's [`WarmUp`](crate::WarmUp) applies to these
    /// devices.
    fn warm_up(&self, warmed: bool) -> Option<Serial> {
        let gpu = self
            .workers
            .iter()
            .any(|w| !crate::device::is_cpu(w.device()));
        (!warmed && self.config.warm_up.applies(gpu)).then(Serial::default)
    }

    /// One training step on `batch`: cut into R × m contiguous micro-batches whose rows differ
    /// by at most one (replica r takes the r-th m), each loss weighted by its share of the rows;
    /// forward and backward through the pipeline; each stage's gradients summed
    /// over the replicas; one optimizer step per worker (every k-th call with accumulation k).
    /// Equal to one full-batch step on one device.
    pub fn step(&mut self, batch: &Batch) -> Result<StepOutcome> {
        self.usable()?;
        let world = self.workers.world();
        let shards = batch.shard(self.layout())?;
        let k = self.config.data_parallel.accumulation.max(1);
        let optimizer_step = self.pending + 1 == k;
        let plan = if optimizer_step {
            Arc::clone(&self.plans.step)
        } else {
            Arc::clone(&self.plans.accumulating)
        };
        let dp = self.config.data_parallel;
        let training = Training {
            learning_rate: self.config.learning_rate,
            loss: Arc::clone(&self.config.loss),
            loss_scale: 1.0 / k as f64,
            remat: self.config.remat,
            split: matches!(self.config.backward, Backward::Split { .. })
                && self.config.precision.splits_by_hand(),
            weight_group: self.weight_group(),
            bucket_elems: (dp.bucket_bytes / std::mem::size_of::<f32>()).max(1),
            zero: dp.zero,
            guard: self.config.guard,
            turns: (self.plans.ranks.as_deref()).map(|p| Turns::new(p, world.replicas())),
            layer_offsets: (0..world.stages())
                .map(|s| self.workers.partition().range(s.into()).start)
                .collect(),
        };
        let ctx = StepContext {
            stages: world.stages(),
            micro_batches: self.config.micro_batches,
            job: Job::Train(training),
            abort: Arc::clone(&self.abort),
            start: Instant::now(),
            timing: self.config.timing,
            handoff: self.config.handoff,
            precision: self.config.precision,
            skips: self.workers.skip_routes().clone(),
            serial: self.warm_up(self.warmed.train),
        };
        let feeds = feeds(world.local(), world.stages(), shards, true);
        let (finished, ctx) = self
            .launch(feeds, plan, ctx)
            .inspect_err(|_| self.poisoned = true)?;
        let wall = ctx.start.elapsed();
        self.warmed.train = true;
        // Each micro-batch loss was weighted by its rows / the batch's and by 1/k: this batch's
        // mean is k × the sum.
        let loss = finished.iter().map(|f| f.loss).sum::<f64>() * k as f64;
        self.pending = if optimizer_step { 0 } else { self.pending + 1 };
        self.optimizer_steps += u64::from(optimizer_step);
        Ok(StepOutcome {
            loss,
            samples: batch.len(),
            wall,
            optimizer_step,
            workers: finished.into_iter().map(|f| f.report).collect(),
        })
    }

    /// Inference without autodiff: the batch is cut like a training batch — into R shards of m
    /// micro-batches — and streamed through the stages (stage s forwards micro-batch i while
    /// stage s+1 forwards i−1). A batch of fewer than R × m rows runs on replica 0 alone, in m
    /// micro-batches if it has m rows, else as one. Outputs come back in row order,
    /// on replica 0's last-stage device.
    pub fn infer(&mut self, inputs: Activation) -> Result<Activation> {
        self.usable()?;
        let world = self.workers.world().clone();
        if !world.is_whole() {
            return Err(EngineError::PartialWorld {
                operation: "inference (it gathers every replica's outputs)",
                local: world.local().len(),
                size: world.size(),
                remedy: pipetrain_schedules::Remedy::sentence(
                    "run it in a process that holds the whole world",
                ),
            });
        }
        let rows = inputs.batch_size();
        let layout = self.layout().fitting(rows);
        let (replicas, parts) = (layout.replicas(), layout.micro_batches());
        let plan = Arc::clone(self.plans.inference(parts));
        let mut shards = Vec::with_capacity(replicas);
        let mut micro_batches = inputs
            .plain()
            .split(layout.parts())
            .map_err(EngineError::bad_batch)?
            .into_iter();
        for _ in 0..replicas {
            shards.push(Shard {
                inputs: micro_batches.by_ref().take(parts).collect(),
                ..Shard::default()
            });
        }
        let active: Vec<WorkerId> = world
            .local()
            .iter()
            .copied()
            .filter(|id| id.replica.index() < replicas)
            .collect();
        let ctx = StepContext {
            stages: world.stages(),
            micro_batches: parts,
            job: Job::Infer,
            abort: Arc::clone(&self.abort),
            start: Instant::now(),
            timing: self.config.timing,
            handoff: self.config.handoff,
            precision: self.config.precision,
            skips: self.workers.skip_routes().clone(),
            serial: self.warm_up(self.warmed.infer),
        };
        let feeds = feeds(&active, world.stages(), shards, false);
        // A failed inference changes no state, but may leave messages in flight: fresh links.
        let (finished, _) = match self.launch(feeds, plan, ctx) {
            Ok(done) => done,
            Err(error) => {
                self.connect()?;
                return Err(error);
            }
        };
        self.warmed.infer = true;
        let last = WorkerId::new(ReplicaId(0), StageId::from(world.stages() - 1));
        let device = adapter::plain_device(
            self.workers
                .get(last)
                .expect("the whole world is local")
                .device(),
        );
        let outputs = finished
            .into_iter()
            .filter(|f| world.is_last(f.report.worker))
            .flat_map(|f| {
                let mut outputs = f.outputs;
                outputs.sort_by_key(|(mb, _)| *mb);
                outputs.into_iter().map(|(_, a)| a.to_device(&device))
            })
            .collect();
        Activation::cat(outputs).map_err(EngineError::bad_batch)
    }

    /// Lends each worker with a feed its state and an assignment, then takes every state back. Returns
    /// what the workers finished with (replica-major), or the step's first failure.
    fn launch(
        &mut self,
        mut feeds: Vec<(WorkerId, Feed)>,
        plan: Arc<Plan>,
        ctx: StepContext,
    ) -> Result<(Vec<Finished>, Arc<StepContext>)> {
        let ctx = Arc::new(ctx);
        let mut states: Vec<Option<WorkerState<L>>> =
            self.workers.take_states().into_iter().map(Some).collect();
        let mut lent = Vec::with_capacity(feeds.len());
        for (thread, state) in self.threads.iter().zip(states.iter_mut()) {
            let Some(at) = feeds.iter().position(|(id, _)| *id == thread.worker()) else {
                continue;
            };
            let (_, feed) = feeds.swap_remove(at);
            let assignment = Assignment {
                plan: Arc::clone(&plan),
                feed,
                ctx: Arc::clone(&ctx),
            };
            let owned = state.take().expect("every state is home between steps");
            match thread.run(owned, assignment) {
                Ok(()) => lent.push(thread.worker()),
                Err(back) => {
                    *state = Some(*back);
                    ctx.abort.fail(died(thread.worker(), "its thread is gone"));
                }
            }
        }
        let mut finished = Vec::with_capacity(lent.len());
        for (thread, state) in self.threads.iter().zip(states.iter_mut()) {
            if !lent.contains(&thread.worker()) {
                continue;
            }
            match thread.reply() {
                Some(reply) => {
                    *state = Some(*reply.state);
                    match reply.finished {
                        Some(f) => finished.push(f),
                        None if ctx.abort.is_aborted() => {}
                        None => unreachable!("a worker that stops early has recorded why"),
                    }
                }
                None => {
                    self.lost = true;
                    ctx.abort
                        .fail(died(thread.worker(), "its thread died during the step"));
                }
            }
        }
        self.workers.restore(states.into_iter().flatten().collect());
        match ctx.abort.take_error() {
            Some(error) => Err(error),
            None => Ok((finished, ctx)),
        }
    }
}

/// Each worker's share of the data: stage 0 the inputs of its replica's shard, the last stage
/// the targets (when `train`). Workers of replicas without a shard get nothing (no assignment).
fn feeds(
    workers: &[WorkerId],
    stages: usize,
    shards: Vec<Shard>,
    train: bool,
) -> Vec<(WorkerId, Feed)> {
    let mut out = Vec::with_capacity(workers.len());
    for &id in workers {
        let Some(shard) = shards.get(id.replica.index()) else {
            continue;
        };
        let mut feed = Feed::default();
        if id.stage.index() == 0 {
            feed.inputs = shard.inputs.iter().cloned().map(Some).collect();
        }
        if train && id.stage.index() + 1 == stages {
            feed.targets = shard.targets.iter().cloned().map(Some).collect();
            feed.weights = shard.weights.clone();
        }
        out.push((id, feed));
    }
    out
}

pub(super) fn died(id: WorkerId, message: &str) -> EngineError {
    EngineError::WorkerDied {
        replica: id.replica,
        stage: id.stage,
        message: message.to_string(),
    }
}
