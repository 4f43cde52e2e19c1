//! The runtime: owns the workers, their persistent threads, the plans and the fabric, and runs
//! steps.
//!
//! A step as data: the batch is cut into replicas × micro-batches ([`Batch::shard`]), each
//! worker's thread is lent its state with its share (stage 0 the inputs, the last stage the
//! targets), walks its lowered program (receive → compute → send; all-reduce and optimizer step
//! at the end) and hands the state back with its report. The loss is scaled here, once:
//! every micro-batch loss by 1/(m·R·k), so that the summed gradients are the mean gradient of
//! the k accumulated batches, and the reported loss is the batch's true mean.
//!
//! First error wins (see [`crate::abort`]): the step returns the first failure once every
//! worker has handed its state back; the runtime then refuses to go on
//! ([`EngineError::Poisoned`]) until a checkpoint is loaded.

use std::path::Path;
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Instant;

use pipetrain_schedules::{
    Lowering, Plan, ReplicaId, ScheduleKind, StageId, WorkerId, inference, lower, validate,
    validate_inference,
};

use crate::abort::Abort;
use crate::activation::Activation;
use crate::batch::{Batch, Shard};
use crate::checkpoint::{self, Checkpoint, Progress};
use crate::error::{EngineError, Result};
use crate::fabric::{ChannelFabric, Fabric, TieLink};
use crate::layer::Layer;
use crate::loss::Loss;
use crate::remat::Remat;
use crate::report::StepOutcome;
use crate::thread::{Job, WorkerThread};
use crate::tie::{Tie, TiePlan};
use crate::worker::{Feed, Finished, StepContext, WorkerState};
use crate::workers::Workers;

/// How replicas combine their gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataParallel {
    /// Bytes per all-reduce bucket (PyTorch DDP's default: 25 MiB). The gradients of a stage
    /// are reduced bucket by bucket, in a fixed order.
    pub bucket_bytes: usize,
    /// ZeRO stage 1: optimizer state sharded across the replicas of each stage.
    pub zero: bool,
    /// Batches whose gradients are summed before one optimizer step (DDP's `no_sync`).
    pub accumulation: usize,
}

impl Default for DataParallel {
    fn default() -> Self {
        Self {
            bucket_bytes: 25 << 20,
            zero: false,
            accumulation: 1,
        }
    }
}

/// What the runtime runs: the schedule, the step's settings and the tied parameters.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// The schedule of every step.
    pub schedule: ScheduleKind,
    /// Micro-batches per replica per step (m).
    pub micro_batches: usize,
    /// Learning rate of the optimizer steps.
    pub learning_rate: f64,
    /// Re-materialization mode.
    pub remat: Remat,
    /// The loss on the last stage.
    pub loss: Arc<dyn Loss>,
    /// How replicas combine their gradients.
    pub data_parallel: DataParallel,
    /// Tied parameters (see [`Tie`]).
    pub ties: Vec<Tie>,
}

/// The plans a runtime interprets.
struct Plans {
    /// A step that ends with the all-reduce and the optimizer step.
    step: Arc<Plan>,
    /// A non-final step of an accumulation: no all-reduce, no optimizer step.
    accumulating: Arc<Plan>,
}

/// Persistent workers running steps of a lowered plan.
///
/// ```
/// use std::sync::Arc;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::prelude::*;
/// use pipetrain_engine::*;
/// use pipetrain_partitioner::Partition;
/// use pipetrain_schedules::ScheduleKind;
///
/// #[derive(Module, Debug)]
/// struct Dense { linear: Linear }
/// impl Layer for Dense {
///     fn forward(&self, x: Activation) -> Result<Activation, ActivationError> {
///         Ok(self.linear.forward(x.float::<2>()?).into())
///     }
/// }
/// let device = Device::flex();
/// let model = vec![
///     Dense { linear: LinearConfig::new(4, 8).init(&device) },
///     Dense { linear: LinearConfig::new(8, 2).init(&device) },
/// ];
/// let world = World::new(2, 2)?; // 2 replicas × 2 stages
/// let workers = Workers::build(world, Partition::from_balance(&[1, 1], 2)?, &model, &[device.clone()], &OptimizerConfig::sgd(), 1)?;
/// let config = RuntimeConfig {
///     schedule: ScheduleKind::OneFOneB,
///     micro_batches: 2,
///     learning_rate: 0.1,
///     remat: Remat::Never,
///     loss: Arc::new(Mse),
///     data_parallel: DataParallel::default(),
///     ties: Vec::new(),
/// };
/// let mut runtime = Runtime::new(workers, config)?;
/// let batch = Batch {
///     inputs: Tensor::<2>::ones([8, 4], &device).into(),
///     targets: Tensor::<2>::zeros([8, 2], &device).into(),
/// };
/// let first = runtime.step(&batch)?;
/// let second = runtime.step(&batch)?;
/// assert!(second.loss < first.loss);
/// assert_eq!(runtime.into_workers().into_model().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Runtime<L: Layer> {
    workers: Workers<L>,
    /// One per local worker, in `world.local()` order.
    threads: Vec<WorkerThread<L>>,
    plans: Plans,
    config: RuntimeConfig,
    tie_plan: TiePlan,
    fabric: Box<dyn Fabric>,
    /// The current links' abort signal: fresh with every connection.
    abort: Arc<Abort>,
    /// Batches accumulated since the last optimizer step.
    pending: usize,
    optimizer_steps: u64,
    poisoned: bool,
    /// A worker thread died with its state: nothing can be recovered.
    lost: bool,
}

impl<L: Layer> Runtime<L> {
    /// Starts one thread per local worker, connected by in-process channels ([`ChannelFabric`]).
    pub fn new(workers: Workers<L>, config: RuntimeConfig) -> Result<Self> {
        Self::with_fabric(workers, config, Box::new(ChannelFabric))
    }

    /// Like [`new`](Self::new), with the workers connected by `fabric`.
    pub fn with_fabric(
        workers: Workers<L>,
        config: RuntimeConfig,
        fabric: Box<dyn Fabric>,
    ) -> Result<Self> {
        let stages = workers.world().stages();
        let unlowered = config.schedule.plan(stages, config.micro_batches)?;
        let step = lower(&unlowered, Lowering::default());
        validate(&step)?;
        let accumulating = lower(
            &unlowered,
            Lowering {
                all_reduce: false,
                optimizer_step: false,
            },
        );
        validate(&accumulating)?;
        let threads = workers
            .world()
            .local()
            .iter()
            .map(|&id| WorkerThread::spawn(id))
            .collect::<Result<Vec<_>>>()?;
        let mut runtime = Self {
            tie_plan: TiePlan::new(&config.ties, workers.states(), stages)?,
            workers,
            threads,
            plans: Plans {
                step: Arc::new(step),
                accumulating: Arc::new(accumulating),
            },
            config,
            fabric,
            abort: Arc::new(Abort::new()),
            pending: 0,
            optimizer_steps: 0,
            poisoned: false,
            lost: false,
        };
        runtime.connect()?;
        Ok(runtime)
    }

    /// Fresh links for every worker, with a fresh abort signal.
    fn connect(&mut self) -> Result<()> {
        let world = self.workers.world().clone();
        let ties: Vec<TieLink> = self
            .tie_plan
            .links()
            .into_iter()
            .map(|(tie, low, high)| TieLink {
                tie,
                low: StageId::from(low),
                high: StageId::from(high),
            })
            .collect();
        self.abort = Arc::new(Abort::new());
        let links = self.fabric.connect(&world, &ties, &self.abort)?;
        for (thread, links) in self.threads.iter().zip(links) {
            let slots = self.tie_plan.slots(thread.worker().stage.index());
            if !thread.connect(links, slots) {
                self.lost = true;
                return Err(died(thread.worker(), "its thread is gone"));
            }
        }
        Ok(())
    }

    /// One training step on `batch`: replica r takes the r-th of R contiguous shards, cut into m
    /// micro-batches; forward and backward through the pipeline; each stage's gradients summed
    /// over the replicas; one optimizer step per worker (every k-th call with accumulation k).
    /// Equal to one full-batch step on one device.
    pub fn step(&mut self, batch: &Batch) -> Result<StepOutcome> {
        self.usable()?;
        let world = self.workers.world();
        let shards = batch.shard(world.replicas(), self.config.micro_batches)?;
        let k = self.config.data_parallel.accumulation.max(1);
        let optimizer_step = self.pending + 1 == k;
        let plan = if optimizer_step {
            Arc::clone(&self.plans.step)
        } else {
            Arc::clone(&self.plans.accumulating)
        };
        let dp = self.config.data_parallel;
        let ctx = StepContext {
            stages: world.stages(),
            micro_batches: self.config.micro_batches,
            learning_rate: self.config.learning_rate,
            remat: self.config.remat,
            loss: Some(Arc::clone(&self.config.loss)),
            loss_scale: 1.0 / (self.config.micro_batches * world.replicas() * k) as f64,
            abort: Arc::clone(&self.abort),
            start: Instant::now(),
            bucket_elems: (dp.bucket_bytes / std::mem::size_of::<f32>()).max(1),
            zero: dp.zero,
        };
        let feeds = feeds(world.local(), world.stages(), shards, true);
        let (finished, ctx) = self
            .launch(feeds, plan, ctx)
            .inspect_err(|_| self.poisoned = true)?;
        let wall = ctx.start.elapsed();
        // The engine scaled each micro-batch loss by 1/(m·R·k): this batch's mean is k × the sum.
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
    /// stage s+1 forwards i−1). A batch that does not split into R × m runs on replica 0 alone,
    /// in m micro-batches if it splits into those, else as one. Outputs come back in row order,
    /// on replica 0's last-stage device.
    pub fn infer(&mut self, inputs: Activation) -> Result<Activation> {
        self.usable()?;
        let world = self.workers.world().clone();
        if !world.is_whole() {
            return Err(EngineError::World(
                "inference gathers every replica's outputs in one process; run it where the \
                 whole world is local"
                    .into(),
            ));
        }
        let rows = inputs.batch_size();
        let (r, m) = (world.replicas(), self.config.micro_batches);
        let (replicas, parts) = if rows % (r * m) == 0 {
            (r, m)
        } else if rows % m == 0 {
            (1, m)
        } else {
            (1, 1)
        };
        let plan = inference(world.stages(), parts)?;
        validate_inference(&plan)?;
        let mut shards = Vec::with_capacity(replicas);
        for shard in inputs.detach().split(replicas)? {
            shards.push(Shard {
                inputs: shard.split(parts)?,
                targets: Vec::new(),
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
            learning_rate: 0.0,
            remat: Remat::Never,
            loss: None,
            loss_scale: 0.0,
            abort: Arc::clone(&self.abort),
            start: Instant::now(),
            bucket_elems: 1,
            zero: false,
        };
        let feeds = feeds(&active, world.stages(), shards, false);
        // A failed inference changes no state, but may leave messages in flight: fresh links.
        let (finished, _) = match self.launch(feeds, Arc::new(plan), ctx) {
            Ok(done) => done,
            Err(error) => {
                self.connect()?;
                return Err(error);
            }
        };
        let last = WorkerId::new(ReplicaId(0), StageId::from(world.stages() - 1));
        let device = self
            .workers
            .get(last)
            .expect("the whole world is local")
            .device()
            .clone()
            .inner();
        let outputs = finished
            .into_iter()
            .filter(|f| world.is_last(f.report.worker))
            .flat_map(|f| {
                let mut outputs = f.outputs;
                outputs.sort_by_key(|(mb, _)| *mb);
                outputs.into_iter().map(|(_, a)| a.to_device(&device))
            })
            .collect();
        Ok(Activation::cat(outputs)?)
    }

    /// Lends each worker with a feed its state and a job, then takes every state back. Returns
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
            let job = Job {
                plan: Arc::clone(&plan),
                feed,
                ctx: Arc::clone(&ctx),
            };
            let owned = state.take().expect("every state is home between steps");
            match thread.run(owned, job) {
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

    fn usable(&self) -> Result<()> {
        if self.poisoned || self.lost {
            return Err(EngineError::Poisoned);
        }
        Ok(())
    }

    /// Saves the whole model (replica 0's weights under full-model names), every worker's
    /// optimizer state and `progress.extra` (the step count is the runtime's) to one safetensors
    /// file, atomically (see [`checkpoint`]). Refused in the middle of an accumulation.
    pub fn save_checkpoint(
        &self,
        path: &Path,
        extra: std::collections::BTreeMap<String, String>,
    ) -> Result<()> {
        if self.pending > 0 {
            return Err(EngineError::MidAccumulation {
                pending: self.pending,
                accumulation: self.config.data_parallel.accumulation,
            });
        }
        let progress = Progress {
            step: self.optimizer_steps,
            extra,
        };
        let w = &self.workers;
        checkpoint::save(
            path,
            w.states(),
            w.world().stages(),
            w.optimizer().name(),
            &progress,
        )?;
        Ok(())
    }

    /// Loads `checkpoint` (saved under any layout): weights into every replica, each worker's
    /// optimizer state, the step count; ties are placed again and the workers get fresh links.
    /// Nothing changes if the weights do not fit; a failure after that leaves the runtime
    /// poisoned rather than half loaded. Also makes a runtime usable again after a failed step.
    pub fn load_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        if self.lost {
            return Err(EngineError::Poisoned);
        }
        let name = self.workers.optimizer().name();
        checkpoint.check_optimizer(name)?;
        let loaded = checkpoint.load_model(self.workers.model())?;
        let zero = self
            .config
            .data_parallel
            .zero
            .then_some(self.workers.world().replicas());
        let partition = self.workers.partition().clone();
        // The weights fit; from here on the workers change: a failure poisons.
        self.poisoned = true;
        for w in self.workers.iter_mut() {
            let range = partition.range(w.id().stage);
            w.set_layers(loaded[range.clone()].to_vec());
            checkpoint.load_optimizer(w, range.start, name, zero)?;
        }
        let stages = self.workers.world().stages();
        self.tie_plan = TiePlan::new(&self.config.ties, self.workers.states(), stages)?;
        self.connect()?;
        self.optimizer_steps = checkpoint.progress().step;
        self.pending = 0;
        self.poisoned = false;
        Ok(())
    }

    /// The workers (their states between steps).
    pub fn workers(&self) -> &Workers<L> {
        &self.workers
    }

    /// The lowered plan of a step that ends with the optimizer step.
    pub fn plan(&self) -> &Plan {
        &self.plans.step
    }

    /// What the runtime runs.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Batches accumulated since the last optimizer step.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Optimizer steps taken (restored by [`load_checkpoint`](Self::load_checkpoint)).
    pub fn optimizer_steps(&self) -> u64 {
        self.optimizer_steps
    }

    /// Steps taken: optimizer steps × k plus the batches pending.
    pub fn steps(&self) -> u64 {
        self.optimizer_steps * self.config.data_parallel.accumulation.max(1) as u64
            + self.pending as u64
    }

    /// Whether a failed step left the runtime unusable (until a checkpoint is loaded).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned || self.lost
    }

    /// Each local worker's thread (stable for the runtime's life).
    pub fn threads(&self) -> Vec<(WorkerId, ThreadId)> {
        self.threads
            .iter()
            .filter_map(|t| Some((t.worker(), t.thread_id()?)))
            .collect()
    }

    /// Stops and joins every worker thread, and gives the workers back.
    pub fn into_workers(self) -> Workers<L> {
        let Self {
            workers, threads, ..
        } = self;
        drop(threads);
        workers
    }
}

/// Each worker's share of the data: stage 0 the inputs of its replica's shard, the last stage
/// the targets (when `train`). Workers of replicas without a shard get nothing (no job).
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
        }
        out.push((id, feed));
    }
    out
}

fn died(id: WorkerId, message: &str) -> EngineError {
    EngineError::WorkerDied {
        replica: id.replica,
        stage: id.stage,
        message: message.to_string(),
    }
}
