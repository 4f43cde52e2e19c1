//! `Pipeline`: a model cut into stages, trained step by step.

use std::sync::Arc;

use burn::prelude::*;
use pipetrain_engine::{
    Activation, Batch, EngineError, Layer, Loss, OptimizerConfig, Remat, Shard, StageState,
    StepConfig, pool, profile, run_step,
};
use pipetrain_partitioner::{LayerCost, Partition, partition_by_time};
use pipetrain_schedules::{
    Costs, Lowering, Plan, ReplicaId, ScheduleKind, StageId, WorkerId, lower, simulate,
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
    pub devices: Vec<Device>,
    pub threads: Option<usize>,
}

enum State<L: Layer> {
    /// Not split yet: the split is measured on the first batch.
    Pending(Vec<L>),
    /// One worker per stage.
    Running(Vec<StageState<L>>),
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
    micro_batches: usize,
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
        let plan = lower(
            &s.schedule.plan(stages, s.micro_batches)?,
            Lowering::default(),
        );
        pipetrain_schedules::validate(&plan)?;
        let threads = s
            .threads
            .unwrap_or_else(|| pool::threads_per_worker(stages));
        let mut pipeline = Self {
            state: State::Pending(s.layers),
            partition: None,
            split: s.split,
            plan,
            micro_batches: s.micro_batches,
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
        let mut layers = layers.into_iter();
        let workers = partition
            .iter()
            .map(|(stage, range)| {
                let stage_layers: Vec<L> = layers.by_ref().take(range.len()).collect();
                let id = WorkerId::new(ReplicaId(0), stage);
                StageState::new(
                    id,
                    stage_layers,
                    &self.devices[stage.index()],
                    &self.optimizer,
                    self.threads,
                )
            })
            .collect();
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
        let costs = profile::layer_costs(layers, &sample, &self.devices[0], 2)
            .map_err(EngineError::from)?;
        let partition = partition_by_time(&costs, stages, None)?;
        self.start(partition, Some(&costs))
    }

    fn workers(&mut self) -> &mut Vec<StageState<L>> {
        match &mut self.state {
            State::Running(w) => w,
            State::Pending(_) => unreachable!("started before use"),
        }
    }

    /// One training step on `batch` (split into m micro-batches): forward and backward through
    /// the pipeline, one optimizer step per stage. Equal to one full-batch step on one device.
    pub fn train_step(&mut self, batch: &Batch) -> Result<StepReport> {
        if self.poisoned {
            return Err(EngineError::Poisoned.into());
        }
        self.ensure_started(&batch.inputs)?;
        let m = self.micro_batches;
        let inputs = batch.inputs.clone().split(m).map_err(EngineError::from)?;
        let targets = batch.targets.clone().split(m).map_err(EngineError::from)?;
        let shards = vec![Shard { inputs, targets }];
        let plan = self.plan.clone();
        let loss = Arc::clone(&self.loss);
        let config = StepConfig {
            plan: &plan,
            learning_rate: self.learning_rate,
            remat: self.remat,
            loss: &*loss,
        };
        let outcome =
            run_step(self.workers(), shards, &config).inspect_err(|_| self.poisoned = true)?;
        let report = StepReport::from_outcome(self.step, batch.len(), outcome, &self.predicted);
        self.step += 1;
        Ok(report)
    }

    /// Inference: the whole batch through every stage in turn, without autodiff.
    pub fn forward(&mut self, inputs: Activation) -> Result<Activation> {
        if self.poisoned {
            return Err(EngineError::Poisoned.into());
        }
        self.ensure_started(&inputs)?;
        let mut x = inputs.detach();
        for worker in self.workers().iter() {
            let device = worker.device().clone().inner();
            x = x.to_device(&device);
            for layer in worker.layers() {
                let shown = x.to_string();
                x = layer.valid().forward(x).map_err(|e| {
                    Error::Config(format!("{} rejected input {shown}: {e}", worker.id().stage))
                })?;
            }
        }
        Ok(x)
    }

    /// The whole model as one layer sequence (stage 0's layers first).
    pub fn into_layers(self) -> Vec<L> {
        match self.state {
            State::Pending(layers) => layers,
            State::Running(workers) => workers
                .into_iter()
                .flat_map(StageState::into_layers)
                .collect(),
        }
    }

    /// Every float parameter of the whole model, flattened, in model order.
    pub fn parameters(&self) -> Vec<Vec<f32>> {
        match &self.state {
            State::Pending(layers) => pipetrain_engine::parameters(layers),
            State::Running(workers) => workers
                .iter()
                .flat_map(|w| pipetrain_engine::parameters(&w.layers().to_vec()))
                .collect(),
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
