//! The [`Runtime`] itself: its parts, how it starts and connects, checkpoints, and what it
//! tells about itself.

use std::path::Path;
use std::sync::Arc;
use std::thread::ThreadId;

use pipetrain_schedules::{Lowering, Plan, StageId, WorkerId, lower, route_skips, validate};

use super::config::{Backward, RuntimeConfig};
use super::step::died;
use crate::abort::Abort;
use crate::checkpoint::{self, Checkpoint, Progress};
use crate::error::{EngineError, Result};
use crate::fabric::{ChannelFabric, Fabric, TieLink};
use crate::layer::Layer;
use crate::thread::WorkerThread;
use crate::tie::TiePlan;
use crate::workers::Workers;

/// The plans a runtime interprets.
pub(super) struct Plans {
    /// A step that ends with the all-reduce and the optimizer step.
    pub step: Arc<Plan>,
    /// A non-final step of an accumulation: no all-reduce, no optimizer step.
    pub accumulating: Arc<Plan>,
    /// The compute plan per rank, when ranks hold several stages: the order of
    /// [`Turns`](crate::turns::Turns).
    pub ranks: Option<Arc<Plan>>,
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
/// };
/// let mut runtime = Runtime::new(workers, config)?;
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
        let planned = config.schedule.plan(stages, config.micro_batches)?;
        let split = matches!(config.backward, Backward::Split { .. });
        // The stages that can split their backward: those holding a dense layer or a layer that
        // splits its `Linear` calls.
        let dense: Vec<bool> = (0..stages)
            .map(|s| {
                split
                    && workers.states().iter().any(|w| {
                        w.id.stage.index() == s
                            && w.layers
                                .iter()
                                .any(|l| l.dense().is_some() || l.splits_linears())
                    })
            })
            .collect();
        let unlowered = if planned.places_weights() {
            // The schedule places each `W`: the other stages run fused `B`s (see
            // `fused_stages`).
            planned.join_backward(|s| !dense[s.index()])
        } else {
            planned.split_backward(|s| dense[s.index()])
        };
        // Skips that cross stages go straight from the stashing to the popping stage.
        let unlowered = route_skips(&unlowered, &workers.skip_routes().pairs())?;
        // Ranks holding several stages: the dry run proves the rank order deadlock-free, then
        // every stage runs on its own worker (its actions in rank order), taking turns.
        validate(&lower(&unlowered, Lowering::default()))?;
        let ranks = unlowered
            .is_interleaved()
            .then(|| Arc::new(unlowered.clone()));
        let unlowered = unlowered.by_stage();
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
            tie_plan: TiePlan::new(&config.ties, &workers)?,
            workers,
            threads,
            plans: Plans {
                step: Arc::new(step),
                accumulating: Arc::new(accumulating),
                ranks,
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
                false => checkpoint.load_layers(w.layers().to_vec(), range.start)?,
            });
        }
        let zero = self
            .config
            .data_parallel
            .zero
            .then_some(self.workers.world().replicas());
        let partition = self.workers.partition().clone();
        // The weights fit; from here on the workers change: a failure poisons.
        self.poisoned = true;
        for (w, layers) in self.workers.iter_mut().zip(stages) {
            let range = partition.range(w.id().stage);
            w.set_layers(layers);
            checkpoint.load_optimizer(w, range.start, name, zero)?;
        }
        self.tie_plan = TiePlan::new(&self.config.ties, &self.workers)?;
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

    /// The stages whose backward cannot be split (no [dense](crate::dense) layer, or
    /// [`Backward::Fused`]) although the schedule places split backwards (`I`, `W`): they run
    /// a full backward `B` where the schedule has `I` and nothing where it has `W`. The result
    /// is the same; the bubble the `W`s were to fill stays there. Empty for schedules
    /// that place full backwards.
    pub fn fused_stages(&self) -> Vec<StageId> {
        let stages = self.workers.world().stages();
        let Ok(planned) = self.config.schedule.plan(stages, self.config.micro_batches) else {
            return Vec::new(); // the runtime started with this plan: unreachable
        };
        let planned = planned.by_stage();
        let input = pipetrain_schedules::ActionKind::BackwardInput;
        StageId::range(stages)
            .filter(|&s| planned.count(s, input) > 0 && self.plans.step.count(s, input) == 0)
            .collect()
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
