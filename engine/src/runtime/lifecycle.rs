//! The [`Runtime`] itself: its parts, how it starts and connects, checkpoints, and what it
//! tells about itself.

use std::path::Path;
use std::sync::Arc;
use std::thread::ThreadId;

use pipetrain_schedules::{Plan, StageId, WorkerId};

use super::config::{Backward, RuntimeConfig};
use super::step::died;
use crate::checkpoint::{self, Checkpoint, Progress};
use crate::comm::abort::Abort;
use crate::comm::fabric::{Fabric, TieLink};
use crate::error::{EngineError, Result};
use crate::model::layer::Layer;
use crate::model::layout::Layout;
use crate::optim::tie::TiePlan;
use crate::runtime::prepared::{Plans, Prepared};
use crate::runtime::thread::WorkerThread;
use crate::runtime::workers::Workers;

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
///     fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
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
///     schedule: ScheduleKind::OneFOneB.into(),
///     micro_batches: 2,
///     learning_rate: 0.1,
///     remat: Remat::Never,
///     loss: Arc::new(Mse),
///     data_parallel: DataParallel::default(),
///     ties: Vec::new(),
///     backward: Backward::default(),
///     guard: Default::default(),
///     timing: Default::default(),
///     handoff: Default::default(),
///     precision: Default::default(),
///     warm_up: Default::default(),
/// };
/// let mut runtime = Runtime::new(Prepared::new(workers, config)?, Box::new(ChannelFabric::default()))?;
/// let batch = Batch {
///     inputs: Tensor::<2>::ones([8, 4], &device).into(),
///     targets: Tensor::<2>::zeros([8, 2], &device).into(),
/// };
/// let threads = runtime.threads(); // one persistent thread per worker
/// let first = runtime.step(&batch)?;
/// let second = runtime.step(&batch)?;
/// assert!(second.loss < first.loss);
/// // The same four threads ran both steps.
/// assert_eq!(runtime.threads(), threads);
/// let ids: std::collections::HashSet<_> = threads.iter().map(|(_, t)| *t).collect();
/// assert_eq!(ids.len(), 4);
/// // Joined here: none outlives the runtime.
/// assert_eq!(runtime.into_workers().into_model().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Runtime<L: Layer> {
    pub(super) workers: Workers<L>,
    /// One per local worker, in `world.local()` order.
    pub(super) threads: Vec<WorkerThread<L>>,
    pub(super) plans: Plans,
    pub(super) config: RuntimeConfig,
    pub(super) tie_plan: TiePlan,
    pub(super) fabric: Box<dyn Fabric>,
    /// The current links' abort signal: fresh with every connection.
    pub(super) abort: Arc<Abort>,
    /// Batches accumulated since the last optimizer step.
    pub(super) pending: usize,
    pub(super) optimizer_steps: u64,
    pub(super) poisoned: bool,
    /// A worker thread died with its state: nothing can be recovered.
    pub(super) lost: bool,
    /// Whether a training step, and an inference, have completed (no warm-up after them).
    pub(super) warmed: Warmed,
}

/// Which kinds of step have completed once (`worker/warm_up.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Warmed {
    pub train: bool,
    pub infer: bool,
}

impl<L: Layer> Runtime<L> {
    /// Starts one thread per local worker of `prepared`, connected by `fabric`
    /// ([`ChannelFabric`](crate::ChannelFabric) in one process). Wiring only: everything the
    /// workers run was resolved and validated by [`Prepared::new`].
    pub fn new(prepared: Prepared<L>, fabric: Box<dyn Fabric>) -> Result<Self> {
        let Prepared {
            workers,
            config,
            plans,
            tie_plan,
        } = prepared;
        let threads = workers
            .world()
            .local()
            .iter()
            .map(|&id| WorkerThread::spawn(id))
            .collect::<Result<Vec<_>>>()?;
        let mut runtime = Self {
            tie_plan,
            workers,
            threads,
            plans,
            config,
            fabric,
            abort: Arc::new(Abort::new()),
            pending: 0,
            optimizer_steps: 0,
            poisoned: false,
            warmed: Warmed::default(),
            lost: false,
        };
        runtime.connect()?;
        Ok(runtime)
    }

    /// Fresh links for every worker, with a fresh abort signal.
    pub(super) fn connect(&mut self) -> Result<()> {
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
        let skips = self.workers.skip_routes().pairs();
        let links = self.fabric.connect(&world, &ties, &skips, &self.abort)?;
        for (thread, links) in self.threads.iter().zip(links) {
            let slots = self.tie_plan.slots(thread.worker().stage.index());
            if !thread.connect(links, slots) {
                self.lost = true;
                return Err(died(thread.worker(), "its thread is gone"));
            }
        }
        Ok(())
    }

    pub(super) fn usable(&self) -> Result<()> {
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
        let progress = self.progress(extra)?;
        let w = &self.workers;
        checkpoint::save(
            path,
            &w.model(),
            w.states(),
            w.world().stages(),
            w.optimizer().name(),
            &progress,
        )?;
        Ok(())
    }

    /// The progress a checkpoint saves now, with `extra`; refused in the middle of an
    /// accumulation.
    pub(super) fn progress(
        &self,
        extra: std::collections::BTreeMap<String, String>,
    ) -> Result<Progress> {
        if self.pending > 0 {
            return Err(EngineError::MidAccumulation {
                pending: self.pending,
                accumulation: self.config.data_parallel.accumulation,
            });
        }
        Ok(Progress {
            step: self.optimizer_steps,
            extra,
        })
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
        // The whole model when it is here; else (a multi-process run) each local stage alone.
        let whole = self.workers.world().is_whole();
        let loaded = match whole {
            true => checkpoint.load_model(self.workers.model())?,
            false => Vec::new(),
        };
        let mut stages: Vec<Vec<L>> = Vec::new();
        for w in self.workers.iter() {
            let range = self.workers.partition().range(w.id().stage);
            stages.push(match whole {
                true => loaded[range].to_vec(),
                false => {
                    checkpoint.load_layers(self.workers.whole_layers(w).to_vec(), range.start)?
                }
            });
        }
        let zero = self
            .config
            .data_parallel
            .zero
            .shards_optimizer_state()
            .then_some(self.workers.world().replicas());
        let partition = self.workers.partition().clone();
        // The weights fit; from here on the workers change: a failure poisons.
        self.poisoned = true;
        for (w, layers) in self.workers.iter_mut().zip(stages) {
            let range = partition.range(w.id().stage);
            w.set_layers(layers);
            checkpoint.load_optimizer(w, range.start, name, zero)?;
        }
        self.tie_plan = self.workers.tie_plan(&self.config.ties)?;
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

    /// The world's replicas and stages with the micro-batches of a step: the counts every
    /// product (workers, micro-batches per step, rows per micro-batch) is read from.
    pub fn layout(&self) -> Layout {
        let world = self.workers.world();
        Layout::new(world.replicas(), world.stages(), self.config.micro_batches)
    }

    /// The lowered plan of a step that ends with the optimizer step.
    pub fn plan(&self) -> &Plan {
        &self.plans.step
    }

    /// Every plan the runtime interprets (see [`Plans`]).
    pub fn plans(&self) -> &Plans {
        &self.plans
    }

    /// The stages that run full backwards although the schedule places split ones (see
    /// [`Plans::fused`]).
    pub fn fused_stages(&self) -> Vec<StageId> {
        self.plans.fused().to_vec()
    }

    /// Micro-batches per weight-gradient pass (0: the step's): the [`Backward`]'s, except that
    /// a plan placing its own `W`s computes each at its place unless a group is given.
    pub(super) fn weight_group(&self) -> usize {
        match self.config.backward {
            Backward::Split { weight_group: 0 } if self.config.schedule.splits_backward() => 1,
            Backward::Split { weight_group } => weight_group,
            Backward::Fused => 0,
        }
    }

    /// What the runtime runs.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Sets the learning rate of the next optimizer steps (a scheduler's value for this step).
    /// The caller checks it (finite, not negative).
    pub fn set_learning_rate(&mut self, learning_rate: f64) {
        self.config.learning_rate = learning_rate;
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
