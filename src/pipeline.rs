//! `Pipeline`: a model cut into stages, trained step by step.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use burn::prelude::*;
use pipetrain_engine::checkpoint::{self, Checkpoint, Progress};
use pipetrain_engine::{
    Activation, Batch, DataParallel, EngineError, Layer, Loss, OptimizerConfig, Remat, Shard,
    StepConfig, Tie, TiePlan, WorkerState, pool, profile, run_inference, run_step_with,
};
use pipetrain_partitioner::{LayerCost, Partition, partition_by_time};
use pipetrain_schedules::{
    Costs, Lowering, Plan, ReplicaId, ScheduleKind, StageId, WorkerId, inference, lower, simulate,
};

use crate::builder::PipelineBuilder;
use crate::error::{Error, Result};
use crate::report::StepReport;

/// How the layers are split into stages.
pub(crate) enum Split {
    /// Given (or trivial).
    Fixed(Partition),
    /// Balance-by-time on per-layer costs measured on the first batch.
    Measured { stages: usize },
}

impl Split {
    pub(crate) fn stages(&self) -> usize {
        match self {
            Split::Fixed(p) => p.stages(),
            Split::Measured { stages } => *stages,
        }
    }
}

pub(crate) struct Settings<L: Layer> {
    pub layers: Vec<L>,
    pub split: Split,
    pub micro_batches: usize,
    pub schedule: ScheduleKind,
    pub remat: Remat,
    pub optimizer: OptimizerConfig,
    pub learning_rate: f64,
    pub loss: Arc<dyn Loss>,
    /// One per worker, replica-major.
    pub devices: Vec<Device>,
    pub threads: Option<usize>,
    pub replicas: usize,
    pub data_parallel: DataParallel,
    pub ties: Vec<Tie>,
}

enum State<L: Layer> {
    /// Not split yet: the split is measured on the first batch.
    Pending(Vec<L>),
    /// One worker per (replica, stage), replica-major.
    Running(Vec<WorkerState<L>>),
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
    state: State<L>,
    split: Split,
    partition: Option<Partition>,
    plan: Plan,
    /// The plan of a non-final accumulation step: no all-reduce, no optimizer step.
    accumulating_plan: Plan,
    micro_batches: usize,
    replicas: usize,
    data_parallel: DataParallel,
    /// train_step calls since the last optimizer step.
    pending: usize,
    /// Optimizer steps taken (saved in checkpoints).
    optimizer_steps: u64,
    /// Tied parameters, and where they live once the split is made.
    ties: Vec<Tie>,
    tie_plan: TiePlan,
    /// A checkpoint loaded before the split was made: its optimizer state goes to the workers
    /// when they start.
    restore: Option<Checkpoint>,
    schedule: ScheduleKind,
    remat: Remat,
    optimizer: OptimizerConfig,
    learning_rate: f64,
    loss: Arc<dyn Loss>,
    devices: Vec<Device>,
    threads: usize,
    predicted: Vec<f64>,
    step: u64,
    poisoned: bool,
}

impl<L: Layer> Pipeline<L> {
    /// A builder with the defaults.
    pub fn builder() -> PipelineBuilder<L> {
        PipelineBuilder::default()
    }

    pub(crate) fn new(s: Settings<L>) -> Result<Self> {
        let stages = s.split.stages();
        let unlowered = s.schedule.plan(stages, s.micro_batches)?;
        let plan = lower(&unlowered, Lowering::default());
        pipetrain_schedules::validate(&plan)?;
        let accumulating_plan = lower(
            &unlowered,
            Lowering {
                all_reduce: false,
                optimizer_step: false,
            },
        );
        pipetrain_schedules::validate(&accumulating_plan)?;
        let threads = s
            .threads
            .unwrap_or_else(|| pool::threads_per_worker(stages * s.replicas));
        let mut pipeline = Self {
            state: State::Pending(pipetrain_engine::equalize(s.layers, &s.ties)?),
            partition: None,
            split: s.split,
            plan,
            accumulating_plan,
            micro_batches: s.micro_batches,
            replicas: s.replicas,
            data_parallel: s.data_parallel,
            pending: 0,
            optimizer_steps: 0,
            restore: None,
            ties: s.ties.clone(),
            tie_plan: TiePlan::none(),
            schedule: s.schedule,
            remat: s.remat,
            optimizer: s.optimizer,
            learning_rate: s.learning_rate,
            loss: s.loss,
            devices: s.devices,
            threads,
            predicted: Vec::new(),
            step: 0,
            poisoned: false,
        };
        if let Split::Fixed(partition) = &pipeline.split {
            let partition = partition.clone();
            pipeline.start(partition, None)?;
        }
        Ok(pipeline)
    }

    /// Number of stages.
    pub fn stages(&self) -> usize {
        self.split.stages()
    }

    /// Data-parallel replicas.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Steps whose gradients are accumulated before one optimizer step.
    pub fn accumulation(&self) -> usize {
        self.data_parallel.accumulation
    }

    /// Whether optimizer state is sharded across replicas (ZeRO-1).
    pub fn zero(&self) -> bool {
        self.data_parallel.zero
    }

    /// Micro-batches per step.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches
    }

    /// The schedule.
    pub fn schedule(&self) -> ScheduleKind {
        self.schedule
    }

    /// The lowered plan every worker interprets.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The stage split (None until measured on the first batch).
    pub fn partition(&self) -> Option<&Partition> {
        self.partition.as_ref()
    }

    /// Compute threads per worker.
    pub fn threads_per_worker(&self) -> usize {
        self.threads
    }

    /// Per-stage bubble the simulator predicts for this plan with the split's layer costs
    /// (uniform costs when the split was given rather than measured).
    pub fn predicted_bubble(&self) -> &[f64] {
        &self.predicted
    }

    /// Splits the layers and starts one worker per stage.
    fn start(&mut self, partition: Partition, costs: Option<&[LayerCost]>) -> Result<()> {
        let State::Pending(layers) = std::mem::replace(&mut self.state, State::Pending(Vec::new()))
        else {
            return Ok(());
        };
        let stage_costs: Vec<(f64, f64)> = match costs {
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
            None => vec![(1.0, 2.0); partition.stages()],
        };
        let sim_costs = Costs {
            forward: stage_costs.iter().map(|c| c.0).collect(),
            backward: stage_costs.iter().map(|c| c.1).collect(),
            ..Costs::uniform(partition.stages(), 1.0, 2.0)
        };
        self.predicted = simulate(&self.plan, &sim_costs)?
            .stages
            .iter()
            .map(|s| s.bubble_fraction)
            .collect();
        // Every replica starts from clones of the same layers: same values, same parameter ids.
        let stages = partition.stages();
        let mut workers = Vec::with_capacity(self.replicas * stages);
        for replica in 0..self.replicas {
            let mut layers = layers.iter();
            for (stage, range) in partition.iter() {
                let stage_layers: Vec<L> = layers.by_ref().take(range.len()).cloned().collect();
                let id = WorkerId::new(ReplicaId::from(replica), stage);
                workers.push(WorkerState::new(
                    id,
                    stage_layers,
                    &self.devices[id.rank(stages)],
                    &self.optimizer,
                    self.threads,
                ));
            }
        }
        self.tie_plan = TiePlan::new(&self.ties, &workers, stages)?;
        let zero = self.data_parallel.zero.then_some(self.replicas);
        if let Some(checkpoint) = self.restore.take() {
            for w in &mut workers {
                let offset = partition.range(w.id().stage).start;
                checkpoint.load_optimizer(w, offset, self.optimizer.name(), zero)?;
            }
        }
        self.state = State::Running(workers);
        self.partition = Some(partition);
        Ok(())
    }

    /// Measures per-layer costs on one micro-batch of `inputs` and splits by time.
    fn ensure_started(&mut self, inputs: &Activation) -> Result<()> {
        let State::Pending(layers) = &self.state else {
            return Ok(());
        };
        let Split::Measured { stages } = self.split else {
            return Ok(());
        };
        let sample = inputs
            .clone()
            .split(self.micro_batches)
            .map_err(EngineError::from)?
            .swap_remove(0);
        let costs = profile::layer_costs(layers, &sample, &self.devices[0], 5)
            .map_err(EngineError::from)?;
        let partition = partition_by_time(&costs, stages, None)?;
        self.start(partition, Some(&costs))
    }

    fn workers(&mut self) -> &mut Vec<WorkerState<L>> {
        match &mut self.state {
            State::Running(w) => w,
            State::Pending(_) => unreachable!("started before use"),
        }
    }

    /// One training step on `batch`: replica i takes the i-th of `replicas` contiguous shards,
    /// split into m micro-batches; forward and backward through the pipeline; the stages'
    /// gradients are summed over the replicas; one optimizer step per worker. Equal to one
    /// full-batch step on one device. With [`accumulate(k)`](crate::PipelineBuilder::accumulate)
    /// only every k-th call all-reduces and steps ([`StepReport::optimizer_step`]).
    pub fn train_step(&mut self, batch: &Batch) -> Result<StepReport> {
        if self.poisoned {
            return Err(EngineError::Poisoned.into());
        }
        let (r, m) = (self.replicas, self.micro_batches);
        let rows = batch.len();
        if rows % (r * m) != 0 {
            return Err(Error::Config(format!(
                "a batch of {rows} rows does not split into {r} replicas × {m} micro-batches; \
                 use a batch size that is a multiple of {}",
                r * m
            )));
        }
        self.ensure_started(&batch.inputs)?;
        let inputs = batch.inputs.clone().split(r).map_err(EngineError::from)?;
        let targets = batch.targets.clone().split(r).map_err(EngineError::from)?;
        let mut shards = Vec::with_capacity(r);
        for (x, y) in inputs.into_iter().zip(targets) {
            shards.push(Shard {
                inputs: x.split(m).map_err(EngineError::from)?,
                targets: y.split(m).map_err(EngineError::from)?,
            });
        }
        let k = self.data_parallel.accumulation;
        let optimizer_step = self.pending + 1 == k;
        let plan = if optimizer_step {
            self.plan.clone()
        } else {
            self.accumulating_plan.clone()
        };
        let loss = Arc::clone(&self.loss);
        let config = StepConfig {
            plan: &plan,
            learning_rate: self.learning_rate,
            remat: self.remat,
            loss: &*loss,
        };
        let data_parallel = self.data_parallel;
        let ties = self.tie_plan.clone();
        let outcome = run_step_with(self.workers(), shards, &config, &data_parallel, &ties)
            .inspect_err(|_| self.poisoned = true)?;
        let mut report = StepReport::from_outcome(self.step, rows, outcome, &self.predicted);
        // The engine scaled each micro-batch loss by 1/(m·R·k): report this batch's mean.
        report.loss *= k as f64;
        report.optimizer_step = optimizer_step;
        self.pending = if optimizer_step { 0 } else { self.pending + 1 };
        self.optimizer_steps += u64::from(optimizer_step);
        self.step += 1;
        Ok(report)
    }

    /// Optimizer steps taken so far (restored by [`load_checkpoint`](Self::load_checkpoint)).
    pub fn optimizer_steps(&self) -> u64 {
        self.optimizer_steps
    }

    /// Saves the whole model (replica 0's weights under full-model names), the optimizer state
    /// of every worker (merged by parameter name) and `extra` (e.g. the data position) to one
    /// safetensors file, atomically. The file does not depend on the stage split or the replica
    /// count: any layout can load it. Refused in the middle of a gradient accumulation.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain::Pipeline;
    /// use pipetrain_models::{MlpConfig, synthetic};
    ///
    /// let device = Device::flex();
    /// let layers = MlpConfig::new(8, 2, 3).init(&device);
    /// let batch = synthetic::classification(0, 0, 8, 8, 3, &device);
    /// let path = std::env::temp_dir().join(format!("pipetrain-doc-{}.safetensors", std::process::id()));
    ///
    /// let mut a = Pipeline::builder().layers(layers.clone()).balance([2, 1]).replicas(2).micro_batches(2).build()?;
    /// a.train_step(&batch)?;
    /// a.save_checkpoint(&path, Default::default())?;
    ///
    /// let mut b = Pipeline::builder().layers(layers).stages(1).build()?; // another layout
    /// let progress = b.load_checkpoint(&path)?;
    /// assert_eq!(progress.step, 1);
    /// assert_eq!(b.parameters(), a.parameters());
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), pipetrain::Error>(())
    /// ```
    pub fn save_checkpoint(
        &self,
        path: impl AsRef<Path>,
        extra: BTreeMap<String, String>,
    ) -> Result<()> {
        if self.pending > 0 {
            return Err(Error::Config(format!(
                "{} of {} accumulated batches are not applied yet; save after the optimizer \
                 step (when StepReport::optimizer_step is true)",
                self.pending, self.data_parallel.accumulation
            )));
        }
        let progress = Progress {
            step: self.optimizer_steps,
            extra,
        };
        let path = path.as_ref();
        match &self.state {
            State::Running(workers) => checkpoint::save(
                path,
                workers,
                self.stages(),
                self.optimizer.name(),
                &progress,
            )?,
            State::Pending(layers) => {
                checkpoint::save_model(path, layers, self.optimizer.name(), &progress)?
            }
        }
        Ok(())
    }

    /// Loads a checkpoint written by [`save_checkpoint`](Self::save_checkpoint) under any
    /// layout: weights into every replica, each worker's optimizer state, and the step count;
    /// returns the saved progress. Nothing changes if the file does not fit (the error names the
    /// tensor); should the optimizer state then fail to load, the pipeline is left poisoned
    /// rather than half loaded. Also makes a pipeline usable again after a failed step.
    pub fn load_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<Progress> {
        let checkpoint = Checkpoint::read(path.as_ref())?;
        let progress = checkpoint.progress().clone();
        let name = self.optimizer.name();
        if checkpoint.optimizer() != name {
            return Err(checkpoint::CheckpointError::Optimizer {
                path: path.as_ref().to_path_buf(),
                saved: checkpoint.optimizer().to_string(),
                current: name.to_string(),
            }
            .into());
        }
        let stages = self.stages();
        let zero = self.data_parallel.zero.then_some(self.replicas);
        match &mut self.state {
            State::Pending(layers) => {
                let loaded = checkpoint.load_model(layers.clone())?;
                *layers = loaded;
                self.restore = Some(checkpoint);
            }
            State::Running(workers) => {
                let full: Vec<L> = workers
                    .iter()
                    .take(stages)
                    .flat_map(|w| w.layers().to_vec())
                    .collect();
                let loaded = checkpoint.load_model(full)?;
                let partition = self
                    .partition
                    .as_ref()
                    .expect("running pipelines have a split");
                // The weights fit (checked above); from here on the workers change. A failure
                // now would leave them half loaded: the pipeline is poisoned until a load
                // succeeds.
                let mut apply = || -> Result<TiePlan> {
                    for w in workers.iter_mut() {
                        let range = partition.range(w.id().stage);
                        w.set_layers(loaded[range.clone()].to_vec());
                        checkpoint.load_optimizer(w, range.start, name, zero)?;
                    }
                    // Ties are placed by parameter id: place them again on the loaded layers.
                    Ok(TiePlan::new(&self.ties, workers, stages)?)
                };
                match apply() {
                    Ok(plan) => self.tie_plan = plan,
                    Err(e) => {
                        self.poisoned = true;
                        return Err(e);
                    }
                }
            }
        }
        self.optimizer_steps = progress.step;
        self.step = progress.step * self.data_parallel.accumulation as u64;
        self.pending = 0;
        self.poisoned = false;
        Ok(progress)
    }

    /// Optimizer-state bytes held by each worker, replica-major (with ZeRO-1 each replica holds
    /// about 1/R of its stage's; before the first step there is none).
    pub fn optimizer_state_bytes(&self) -> Vec<(WorkerId, usize)> {
        match &self.state {
            State::Running(workers) => workers
                .iter()
                .map(|w| (w.id(), w.optimizer_state_bytes()))
                .collect(),
            State::Pending(_) => Vec::new(),
        }
    }

    /// Every float parameter of replica `replica`'s copy of the model, in model order (all
    /// replicas hold identical values after every optimizer step).
    pub fn replica_parameters(&self, replica: usize) -> Vec<Vec<f32>> {
        match &self.state {
            State::Pending(layers) => pipetrain_engine::parameters(layers),
            State::Running(workers) => workers
                .iter()
                .filter(|w| w.id().replica.index() == replica)
                .flat_map(|w| pipetrain_engine::parameters(&w.layers().to_vec()))
                .collect(),
        }
    }

    /// Inference through the pipeline, without autodiff: the batch is cut like a training
    /// batch — into `replicas` shards of `micro_batches` micro-batches each — and streamed
    /// through the stages, stage s forwarding micro-batch i while stage s+1 forwards i−1, every
    /// replica on its own shard. A batch that does not split into `replicas × micro_batches`
    /// runs on replica 0 alone, in `micro_batches` micro-batches if it splits into those, else
    /// as one. The outputs come back in the batch's row order.
    pub fn forward(&mut self, inputs: Activation) -> Result<Activation> {
        if self.poisoned {
            return Err(EngineError::Poisoned.into());
        }
        self.ensure_started(&inputs)?;
        let rows = inputs.dims().first().copied().unwrap_or(0);
        let (r, m) = (self.replicas, self.micro_batches);
        let (replicas, parts) = if rows % (r * m) == 0 {
            (r, m)
        } else if rows % m == 0 {
            (1, m)
        } else {
            (1, 1)
        };
        let stages = self.stages();
        let plan = inference(stages, parts)?;
        pipetrain_schedules::validate_inference(&plan)?;
        let mut shards = Vec::with_capacity(replicas);
        for shard in inputs.detach().split(replicas).map_err(EngineError::from)? {
            shards.push(shard.split(parts).map_err(EngineError::from)?);
        }
        let workers = &mut self.workers()[..replicas * stages];
        let outputs = run_inference(workers, shards, &plan)?;
        // Replicas may sit on different devices: gather on replica 0's last stage's device.
        let device = workers[stages - 1].device().clone().inner();
        let outputs = outputs
            .into_iter()
            .flatten()
            .map(|a| a.to_device(&device))
            .collect();
        Ok(Activation::cat(outputs).map_err(EngineError::from)?)
    }

    /// The whole model as one layer sequence (replica 0's; stage 0's layers first).
    pub fn into_layers(self) -> Vec<L> {
        let stages = self.stages();
        match self.state {
            State::Pending(layers) => layers,
            State::Running(workers) => workers
                .into_iter()
                .take(stages)
                .flat_map(WorkerState::into_layers)
                .collect(),
        }
    }

    /// Every float parameter of the whole model (replica 0's), flattened, in model order.
    pub fn parameters(&self) -> Vec<Vec<f32>> {
        self.replica_parameters(0)
    }

    /// The trained parameters of replica 0 (no buffers such as batch-norm running statistics),
    /// flattened, in model order; empty before the split is made.
    pub fn trainable_parameters(&self) -> Vec<Vec<f32>> {
        match &self.state {
            State::Running(workers) => workers
                .iter()
                .take(self.stages())
                .flat_map(|w| pipetrain_engine::trainable_parameters(&w.layers().to_vec()))
                .collect(),
            State::Pending(_) => Vec::new(),
        }
    }

    /// The layers of `stage` (empty until the split is made).
    pub fn stage_layers(&self, stage: StageId) -> &[L] {
        match &self.state {
            State::Running(workers) => workers
                .get(stage.index())
                .map(|w| w.layers())
                .unwrap_or(&[]),
            State::Pending(_) => &[],
        }
    }
}
