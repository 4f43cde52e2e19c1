//! `Pipeline`: a model cut into stages, trained step by step. Wiring only: the split (measured
//! on the first batch when not given) and the engine's [`Runtime`], which does the work.

use pipetrain_engine::checkpoint::Checkpoint;
use pipetrain_engine::{Activation, Batch, Layer, Runtime, Workers, World, profile};
use pipetrain_partitioner::{LayerCost, Partition, PartitionError, partition_by_time};
use pipetrain_schedules::{
    Costs, Lowering, Plan, ReplicaId, Schedule, StageId, WorkerId, lower, simulate,
};

use crate::builder::{Config, PipelineBuilder, Split};
use crate::error::{Error, Result};
use crate::memory::{self, Bytes, WorkerMemory};
use crate::remedy::{Remedy, Setting, Value};
use crate::report::StepReport;

pub(crate) enum State<L: Layer> {
    /// Not split yet: the split is measured on the first batch. A checkpoint loaded meanwhile
    /// waits here for the workers (its weights are in `layers` already).
    Pending {
        layers: Vec<L>,
        restore: Option<Checkpoint>,
    },
    Running(Box<Runtime<L>>),
}

/// A model cut into stages, trained with a pipeline schedule.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain::{Pipeline, ScheduleKind};
/// use pipetrain_models::{MlpConfig, synthetic};
///
/// let device = Device::flex();
/// let mut pipeline = Pipeline::builder()
///     .layers(MlpConfig::new(16, 3, 4).init(&device))
///     .stages(2)
///     .micro_batches(4)
///     .schedule(ScheduleKind::OneFOneB)
///     .build()?;
/// let batch = synthetic::classification(0, 0, 32, 16, 4, &device);
/// let report = pipeline.train_step(&batch)?;
/// assert!(report.loss.is_finite());
/// let logits = pipeline.forward(batch.inputs.clone())?;
/// assert_eq!(logits.dims(), vec![32, 4]);
/// let model = pipeline.into_layers(); // the whole trained model, one layer sequence
/// assert_eq!(model.len(), 4);
/// # Ok::<(), pipetrain::Error>(())
/// ```
pub struct Pipeline<L: Layer> {
    pub(crate) config: Config,
    /// The lowered plan (validated when the pipeline was built).
    plan: Plan,
    pub(crate) state: State<L>,
    predicted: Vec<f64>,
    /// The first micro-batch of replica 0's shard of the first batch: what
    /// [`worker_memory`](Self::worker_memory) measures activations on.
    sample: Option<Activation>,
}

impl<L: Layer> Pipeline<L> {
    /// A builder with the defaults.
    pub fn builder() -> PipelineBuilder<L> {
        PipelineBuilder::default()
    }

    pub(crate) fn new(config: Config, layers: Vec<L>, plan: Plan) -> Result<Self> {
        let mut pipeline = Self {
            config,
            plan,
            state: State::Pending {
                layers,
                restore: None,
            },
            predicted: Vec::new(),
            sample: None,
        };
        if let Split::Fixed(partition) = &pipeline.config.split {
            let partition = partition.clone();
            pipeline.start(partition, None)?;
        }
        Ok(pipeline)
    }

    /// Number of stages.
    pub fn stages(&self) -> usize {
        self.config.split.stages()
    }

    /// Data-parallel replicas.
    pub fn replicas(&self) -> usize {
        self.config.replicas
    }

    /// Steps whose gradients are accumulated before one optimizer step.
    pub fn accumulation(&self) -> usize {
        self.config.runtime.data_parallel.accumulation
    }

    /// Whether optimizer state is sharded across replicas (ZeRO-1).
    pub fn zero(&self) -> bool {
        self.config.runtime.data_parallel.zero
    }

    /// Micro-batches per step.
    pub fn micro_batches(&self) -> usize {
        self.config.runtime.micro_batches
    }

    /// The schedule (generated, or a given plan).
    pub fn schedule(&self) -> &Schedule {
        &self.config.runtime.schedule
    }

    /// The lowered plan every worker interprets: the schedule's, and once the pipeline has
    /// started (its split is known), with the backward split on the stages that hold
    /// [dense](crate::Dense) layers (see [`Backward`](crate::Backward)); one program per rank
    /// before, one per stage after, when ranks hold several stages (interleaved, ZB-V).
    pub fn plan(&self) -> &Plan {
        self.runtime().map(|r| r.plan()).unwrap_or(&self.plan)
    }

    /// The stages that run full backwards although the schedule places split ones (ZB-H1):
    /// those without a [dense](crate::Dense) layer, or every stage under
    /// [`Backward::Fused`](crate::Backward::Fused). Their results are the same, their bubble is
    /// 1F1B's. Empty until the pipeline has started (its split is known).
    pub fn fused_stages(&self) -> Vec<StageId> {
        self.runtime().map(|r| r.fused_stages()).unwrap_or_default()
    }

    /// The stage split (None until measured on the first batch).
    pub fn partition(&self) -> Option<&Partition> {
        self.runtime().map(|r| r.workers().partition())
    }

    /// Compute threads per worker.
    pub fn threads_per_worker(&self) -> usize {
        self.config.threads
    }

    /// Per-stage bubble the simulator predicts for this plan with the split's layer costs
    /// (uniform costs when the split was given rather than measured).
    pub fn predicted_bubble(&self) -> &[f64] {
        &self.predicted
    }

    /// Splits the layers and starts the runtime: one persistent thread per worker.
    fn start(&mut self, partition: Partition, costs: Option<&[LayerCost]>) -> Result<()> {
        let stages = partition.stages();
        let per_stage: Vec<(f64, f64)> = match costs {
            Some(costs) => partition
                .iter()
                .map(|(_, r)| {
                    let c = &costs[r];
                    (
                        c.iter().map(|c| c.forward).sum(),
                        c.iter().map(|c| c.backward).sum(),
                    )
                })
                .collect(),
            None => vec![(1.0, 2.0); stages],
        };
        let sim_costs = Costs {
            forward: per_stage.iter().map(|c| c.0).collect(),
            backward: per_stage.iter().map(|c| c.1).collect(),
            ..Costs::uniform(stages, 1.0, 2.0)
        };
        let simulated = simulate(&self.plan, &sim_costs)?;
        let State::Pending { layers, restore } = &self.state else {
            return Ok(());
        };
        let c = &self.config;
        let world = match &c.distributed {
            Some(d) => World::with_local(c.replicas, stages, d.local.clone())?,
            None => World::new(c.replicas, stages)?,
        };
        let workers = Workers::build(
            world,
            partition,
            layers,
            &c.devices,
            &c.optimizer,
            c.threads,
        )?;
        // The fabric is handed over only now: a set-up step that fails above leaves the
        // pipeline as it was (its layers, its fabric), not a single-process shell.
        let runtime_config = c.runtime.clone();
        let mut runtime = match self.config.distributed.take() {
            Some(d) => Runtime::with_fabric(workers, runtime_config, d.fabric)?,
            None => Runtime::new(workers, runtime_config)?,
        };
        if let Some(checkpoint) = restore {
            runtime.load_checkpoint(checkpoint)?;
        }
        // Per stage: its rank's.
        let rank = |s: StageId| self.plan.rank_of(s).unwrap_or(s.index());
        let bubble = |r: usize| simulated.stages.get(r).map_or(0.0, |r| r.bubble_fraction);
        self.predicted = StageId::range(stages).map(|s| bubble(rank(s))).collect();
        self.state = State::Running(Box::new(runtime));
        Ok(())
    }

    /// Before the first step of a measured split: checks the batch splits, measures per-layer
    /// costs on one micro-batch and splits by time, under the memory budget if there is one.
    fn start_on(&mut self, inputs: &Activation) -> Result<()> {
        let (State::Pending { layers, .. }, Split::Measured { stages }) =
            (&self.state, &self.config.split)
        else {
            return Ok(());
        };
        let stages = *stages;
        // A training batch splits into replicas × m; an inference batch given to `forward`
        // first may have rows only for m micro-batches (it then runs on replica 0) or fewer.
        let (r, m) = (self.replicas(), self.micro_batches());
        let rows = inputs.batch_size();
        let parts = [r * m, m, 1].into_iter().find(|&p| rows >= p).unwrap_or(1);
        let sample = micro_batch(inputs, parts)?;
        let costs = profile::layer_costs(layers, &sample, &self.config.devices[0], 5)?;
        let partition = match self.config.memory_budget {
            None => partition_by_time(&costs, stages, None)?,
            Some(budget) => {
                let in_flight = self.in_flight(stages, self.micro_batches())?;
                let remat = self.config.runtime.remat;
                let slots = memory::optimizer_slots(&self.config.optimizer);
                let stashed = memory::charged_micro_batches(remat, in_flight);
                let group = memory::weight_group(
                    self.config.runtime.backward,
                    self.micro_batches(),
                    self.schedule().splits_backward(),
                );
                let split = match group {
                    0 => vec![0; layers.len()],
                    _ => profile::split_bytes(layers, &sample, &self.config.devices[0])?,
                };
                let deferred = memory::deferred_bytes(&split, group);
                let budgeted = memory::budget_costs(&costs, slots, stashed, &deferred);
                partition_by_time(&budgeted, stages, Some(budget)).map_err(|e| {
                    let deferring = deferred.iter().any(|&d| d > 0);
                    self.over_budget(e, costs.len(), sample.batch_size(), in_flight, deferring)
                })?
            }
        };
        self.start(partition, Some(&costs))
    }

    /// Most micro-batches any stage stashes at once under this schedule with `m` micro-batches.
    fn in_flight(&self, stages: usize, m: usize) -> Result<usize> {
        let plan = lower(&self.schedule().plan(stages, m)?, Lowering::default());
        let simulated = simulate(&plan, &Costs::uniform(stages, 1.0, 2.0))?;
        Ok(simulated
            .stages
            .iter()
            .map(|s| s.peak_stash)
            .max()
            .unwrap_or(1))
    }

    /// The partitioner's [`PartitionError::OverBudget`] as the user's
    /// [`Error::MemoryBudget`], with the remedies that apply here.
    fn over_budget(
        &self,
        error: PartitionError,
        layers: usize,
        rows: usize,
        in_flight: usize,
        deferring: bool,
    ) -> Error {
        let PartitionError::OverBudget {
            stage,
            layers: range,
            needed,
            budget,
            ..
        } = error
        else {
            return error.into();
        };
        let stages = self.stages();
        let m = self.micro_batches();
        let mut remedies = vec![Remedy::set(Setting::MemoryBudget, Value::Bytes(needed))];
        if stages < layers {
            remedies.push(Remedy::set(Setting::Stages, Value::Count(stages + 1)));
        }
        if self.config.runtime.remat == pipetrain_engine::Remat::Never && in_flight > 1 {
            remedies.push(Remedy::set(Setting::Remat, Value::mode("always")));
        }
        // Twice the micro-batches halves each one; it helps where the schedule then stashes
        // fewer than twice as many (1F1B's p, not GPipe's m).
        let fewer = self
            .in_flight(stages, 2 * m)
            .is_ok_and(|doubled| doubled < 2 * in_flight);
        if rows > 1 && fewer {
            remedies.push(Remedy::set(Setting::MicroBatches, Value::Count(2 * m)));
        }
        if deferring
            && memory::weight_group(
                self.config.runtime.backward,
                m,
                self.schedule().splits_backward(),
            ) > 1
        {
            remedies.push(Remedy::set(Setting::WeightGroup, Value::Count(1)));
        }
        let remedy = Remedy::one_of(remedies);
        Error::MemoryBudget {
            budget: Bytes(budget),
            smallest: Bytes(needed),
            smallest_bytes: needed,
            stages,
            micro_batches: m,
            stage,
            layers: range,
            remedy,
        }
    }

    /// Each worker's memory at the peak of `report`'s step, replica-major: parameters,
    /// gradients, optimizer state (the optimizer's serialized bytes) and `peak_stash`
    /// micro-batches of activations, as [`crate::memory`] counts them (activations measured by a
    /// forward pass of the first training batch's first micro-batch). Empty before the first
    /// [`train_step`](Self::train_step).
    pub fn worker_memory(&self, report: &StepReport) -> Result<Vec<WorkerMemory>> {
        let (Some(runtime), Some(sample)) = (self.runtime(), &self.sample) else {
            return Ok(Vec::new());
        };
        memory::of_workers(
            runtime.workers(),
            sample,
            &self.config.devices,
            self.config.runtime.remat,
            report,
        )
    }

    fn runtime(&self) -> Option<&Runtime<L>> {
        match &self.state {
            State::Running(runtime) => Some(runtime),
            State::Pending { .. } => None,
        }
    }

    fn runtime_mut(&mut self) -> &mut Runtime<L> {
        match &mut self.state {
            State::Running(runtime) => runtime,
            State::Pending { .. } => unreachable!("started before use"),
        }
    }

    /// One training step on `batch` of any size ≥ `replicas × m` rows: it is cut into
    /// `replicas × m` contiguous micro-batches whose rows differ by at most one (replica i takes
    /// the i-th m), each micro-batch's loss weighted by its share of the rows; forward and backward through the pipeline; the stages'
    /// gradients are summed over the replicas; one optimizer step per worker. Equal to one
    /// full-batch step on one device. With [`accumulation(k)`](crate::PipelineBuilder::accumulation)
    /// only every k-th call all-reduces and steps ([`StepReport::optimizer_step`]).
    pub fn train_step(&mut self, batch: &Batch) -> Result<StepReport> {
        if self.runtime().is_none() {
            batch.shard(self.replicas(), self.micro_batches())?;
            self.start_on(&batch.inputs)?;
        }
        let runtime = self.runtime_mut();
        let step = runtime.steps();
        let outcome = runtime.step(batch)?;
        if self.sample.is_none() {
            let parts = self.replicas() * self.micro_batches();
            self.sample = Some(micro_batch(&batch.inputs, parts)?);
        }
        Ok(StepReport::from_outcome(step, outcome, &self.predicted))
    }

    /// Optimizer-state bytes held by each worker, replica-major (with ZeRO-1 each replica holds
    /// about 1/R of its stage's; before the first step there is none).
    pub fn optimizer_state_bytes(&self) -> Vec<(WorkerId, usize)> {
        self.runtime().map_or_else(Vec::new, |r| {
            r.workers()
                .iter()
                .map(|w| (w.id(), w.optimizer_state_bytes()))
                .collect()
        })
    }

    /// Every float parameter of replica `replica`'s copy of the model, in model order (all
    /// replicas hold identical values after every optimizer step).
    pub fn replica_parameters(&self, replica: usize) -> Vec<Vec<f32>> {
        match &self.state {
            State::Pending { layers, .. } => pipetrain_engine::parameters(layers),
            State::Running(runtime) => runtime
                .workers()
                .replica(ReplicaId::from(replica))
                .flat_map(|w| pipetrain_engine::parameters(&w.layers().to_vec()))
                .collect(),
        }
    }

    /// Inference through the pipeline, without autodiff: the batch is cut like a training
    /// batch — into `replicas` shards of `micro_batches` micro-batches each — and streamed
    /// through the stages, stage s forwarding micro-batch i while stage s+1 forwards i−1, every
    /// replica on its own shard. A batch of fewer than `replicas × micro_batches` rows runs on
    /// replica 0 alone, in `micro_batches` micro-batches if it has that many rows, else as one. The outputs come back in the batch's row order.
    pub fn forward(&mut self, inputs: Activation) -> Result<Activation> {
        self.start_on(&inputs)?;
        Ok(self.runtime_mut().infer(inputs)?)
    }

    /// The whole model as one layer sequence (replica 0's; stage 0's layers first).
    pub fn into_layers(self) -> Vec<L> {
        match self.state {
            State::Pending { layers, .. } => layers,
            State::Running(runtime) => runtime.into_workers().into_model(),
        }
    }

    /// Every float parameter of the whole model (replica 0's), flattened, in model order.
    pub fn parameters(&self) -> Vec<Vec<f32>> {
        self.replica_parameters(0)
    }

    /// The trained parameters of replica 0 (no buffers such as batch-norm running statistics),
    /// flattened, in model order; empty before the split is made.
    pub fn trainable_parameters(&self) -> Vec<Vec<f32>> {
        self.runtime().map_or_else(Vec::new, |r| {
            r.workers()
                .replica(ReplicaId(0))
                .flat_map(|w| pipetrain_engine::trainable_parameters(&w.layers().to_vec()))
                .collect()
        })
    }

    /// The layers of `stage` in replica 0 (empty until the split is made).
    pub fn stage_layers(&self, stage: StageId) -> &[L] {
        self.runtime()
            .and_then(|r| r.workers().get(WorkerId::new(ReplicaId(0), stage)))
            .map_or(&[], |w| w.layers())
    }
}

/// The first of `parts` row slices of `inputs` (the longest).
fn micro_batch(inputs: &Activation, parts: usize) -> Result<Activation> {
    Ok(inputs.clone().split(parts)?.swap_remove(0))
}
