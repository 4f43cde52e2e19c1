//! `Pipeline`: a model cut into stages, trained step by step: its [`Setup`] (resolved when it
//! was built) and the engine's [`Runtime`], which does the work.

use burn::prelude::Device;
use pipetrain_engine::{Activation, Batch, Layer, Runtime};
use pipetrain_partitioner::Partition;
use pipetrain_schedules::{Plan, ReplicaId, Schedule, StageId, WorkerId};

use crate::builder::PipelineBuilder;
use crate::error::Result;
use crate::memory::{self, WorkerMemory};
use crate::setup::{Setup, micro_batch};
use crate::step_report::StepReport;

mod checkpoint;
mod learning_rate;

/// A model cut into stages, trained with a pipeline schedule.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain::{Pipeline, ScheduleKind};
/// use pipetrain_models::{MlpConfig, synthetic};
///
/// let device = Device::flex();
/// let batch = synthetic::classification(0, 0, 32, 16, 4, &device);
/// let mut pipeline = Pipeline::builder()
///     .layers(MlpConfig::new(16, 3, 4).init(&device))
///     .stages(2) // split by the layers' times, measured on `batch`
///     .micro_batches(4)
///     .schedule(ScheduleKind::OneFOneB)
///     .build_with(&batch)?;
/// let report = pipeline.train_step(&batch)?;
/// assert!(report.loss.is_finite());
/// let logits = pipeline.forward(batch.inputs.clone())?;
/// assert_eq!(logits.dims(), vec![32, 4]);
/// let model = pipeline.into_layers(); // the whole trained model, one layer sequence
/// assert_eq!(model.len(), 4);
/// # Ok::<(), pipetrain::Error>(())
/// ```
pub struct Pipeline<L: Layer> {
    setup: Setup,
    runtime: Runtime<L>,
    /// One per worker, replica-major.
    devices: Vec<Device>,
    /// The first micro-batch of replica 0's shard of the first training batch: what
    /// [`worker_memory`](Self::worker_memory) measures activations on.
    sample: Option<Activation>,
}

impl<L: Layer> Pipeline<L> {
    /// A builder with the defaults.
    pub fn builder() -> PipelineBuilder<L> {
        PipelineBuilder::default()
    }

    pub(crate) fn new(setup: Setup, runtime: Runtime<L>, devices: Vec<Device>) -> Self {
        Self {
            setup,
            runtime,
            devices,
            sample: None,
        }
    }

    /// What the pipeline runs, resolved when it was built: the split, every plan, the
    /// predicted bubbles and memory, each worker's configuration.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The engine's runtime (its workers, threads and plans).
    pub(crate) fn runtime(&self) -> &Runtime<L> {
        &self.runtime
    }

    /// The engine's runtime, to change.
    pub(crate) fn runtime_mut(&mut self) -> &mut Runtime<L> {
        &mut self.runtime
    }

    /// Number of stages.
    pub fn stages(&self) -> usize {
        self.setup.partition().stages()
    }

    /// Data-parallel replicas.
    pub fn replicas(&self) -> usize {
        self.setup.layout().replicas()
    }

    /// Steps whose gradients are accumulated before one optimizer step.
    pub fn accumulation(&self) -> usize {
        self.runtime.config().data_parallel.accumulation
    }

    /// Whether optimizer state is sharded across replicas (ZeRO level 1 and up).
    pub fn zero(&self) -> bool {
        self.zero_level().shards_optimizer_state()
    }

    /// The ZeRO level (see [`PipelineBuilder::zero`](crate::PipelineBuilder::zero)).
    pub fn zero_level(&self) -> crate::schedules::Zero {
        self.runtime.config().data_parallel.zero
    }

    /// Micro-batches per step.
    pub fn micro_batches(&self) -> usize {
        self.setup.layout().micro_batches()
    }

    /// The schedule (generated, or a given plan).
    pub fn schedule(&self) -> &Schedule {
        &self.runtime.config().schedule
    }

    /// The lowered plan of a training step that every worker interprets: the schedule's, with
    /// the backward split on the stages that hold [dense](crate::Dense) layers (see
    /// [`Backward`](crate::Backward)), one program per stage (ranks holding several stages,
    /// interleaved and ZB-V, run theirs in turns). The same from build to drop; the
    /// [`setup`](Self::setup) has the other modes'.
    pub fn plan(&self) -> &Plan {
        self.setup.plans().step()
    }

    /// The stages that run full backwards although the schedule places split ones (ZB-H1):
    /// those without a [dense](crate::Dense) layer, or every stage under
    /// [`Backward::Fused`](crate::Backward::Fused). Their results are the same, their bubble is
    /// 1F1B's.
    pub fn fused_stages(&self) -> Vec<StageId> {
        self.setup.plans().fused().to_vec()
    }

    /// The stage split.
    pub fn partition(&self) -> &Partition {
        self.setup.partition()
    }

    /// Compute threads per worker.
    pub fn threads_per_worker(&self) -> usize {
        self.setup.workers().first().map_or(1, |w| w.threads)
    }

    /// Per-stage bubble the simulator predicts for this plan with the split's layer costs
    /// (uniform costs when the split was given rather than measured).
    pub fn predicted_bubble(&self) -> &[f64] {
        self.setup.predicted_bubble()
    }

    /// Each worker's memory at the peak of `report`'s step, replica-major: parameters,
    /// gradients, optimizer state (the optimizer's serialized bytes) and `peak_stash`
    /// micro-batches of activations, as [`crate::memory`] counts them (activations measured by a
    /// forward pass of the first training batch's first micro-batch). Empty before the first
    /// [`train_step`](Self::train_step); [`Setup::memory`] predicts it before.
    pub fn worker_memory(&self, report: &StepReport) -> Result<Vec<WorkerMemory>> {
        let Some(sample) = &self.sample else {
            return Ok(Vec::new());
        };
        let config = self.runtime.config();
        let m = config.micro_batches;
        let deferral = memory::Deferral {
            group: memory::weight_group(
                config.backward,
                config.precision,
                m,
                config.schedule.splits_backward(),
            ),
            micro_batches: m,
        };
        let mut workers = memory::of_workers(
            self.runtime.workers(),
            sample,
            &self.devices,
            (config.remat, config.precision, deferral),
            report,
        )?;
        let ranks = self.setup.plans().ranks();
        memory::one_weight_pass_per_rank(&mut workers, |s| ranks.and_then(|p| p.rank_of(s)));
        Ok(workers)
    }

    /// One training step on `batch` of any size ≥ `replicas × m` rows: it is cut into
    /// `replicas × m` contiguous micro-batches whose rows differ by at most one (replica i takes
    /// the i-th m), each micro-batch's loss weighted by its share of the rows; forward and backward through the pipeline; the stages'
    /// gradients are summed over the replicas; one optimizer step per worker. Equal to one
    /// full-batch step on one device. With [`accumulation(k)`](crate::PipelineBuilder::accumulation)
    /// only every k-th call all-reduces and steps ([`StepReport::optimizer_step`]).
    pub fn train_step(&mut self, batch: &Batch) -> Result<StepReport> {
        let step = self.runtime.steps();
        let outcome = self.runtime.step(batch)?;
        if self.sample.is_none() {
            self.sample = Some(micro_batch(&batch.inputs, self.setup.layout().parts())?);
        }
        Ok(StepReport::from_outcome(
            step,
            outcome,
            self.setup.predicted_bubble(),
        ))
    }

    /// Optimizer-state bytes held by each worker, replica-major (with ZeRO-1 each replica holds
    /// about 1/R of its stage's; before the first step there is none).
    pub fn optimizer_state_bytes(&self) -> Vec<(WorkerId, usize)> {
        self.runtime
            .workers()
            .iter()
            .map(|w| (w.id(), w.optimizer_state_bytes()))
            .collect()
    }

    /// Every float parameter of replica `replica`'s copy of the model, in model order (all
    /// replicas hold identical values after every optimizer step).
    pub fn replica_parameters(&self, replica: usize) -> Vec<Vec<f32>> {
        self.runtime
            .workers()
            .replica(ReplicaId::from(replica))
            .flat_map(|w| {
                pipetrain_engine::parameters(&self.runtime.workers().whole_layers(w).to_vec())
            })
            .collect()
    }

    /// Test support: adds 1e-3 to every trained weight of replica `replica`'s workers in this
    /// process, so that the replicas no longer hold equal weights (what the per-step
    /// verification and a multi-process checkpoint must each detect). No training run has a
    /// use for it.
    #[doc(hidden)]
    pub fn perturb_replica(&mut self, replica: usize) {
        self.runtime.perturb_replica(ReplicaId::from(replica));
    }

    /// Inference through the pipeline, without autodiff: the batch is cut like a training
    /// batch — into `replicas` shards of `micro_batches` micro-batches each — and streamed
    /// through the stages, stage s forwarding micro-batch i while stage s+1 forwards i−1, every
    /// replica on its own shard. A batch of fewer than `replicas × micro_batches` rows runs on
    /// replica 0 alone, in `micro_batches` micro-batches if it has that many rows, else as one. The outputs come back in the batch's row order.
    pub fn forward(&mut self, inputs: Activation) -> Result<Activation> {
        Ok(self.runtime.infer(inputs)?)
    }

    /// The whole model as one layer sequence (replica 0's; stage 0's layers first).
    pub fn into_layers(self) -> Vec<L> {
        self.runtime.into_workers().into_model()
    }

    /// What each local worker (replica-major) holds of its stage's parameters now. Under
    /// ZeRO-3 between steps a worker holds only what it owns.
    pub fn held_parameter_bytes(&self) -> Vec<HeldParameters> {
        self.runtime
            .workers()
            .iter()
            .map(|w| {
                let values: usize = pipetrain_engine::parameters(&w.layers().to_vec())
                    .iter()
                    .map(Vec::len)
                    .sum();
                let owned = w.owned_parameter_bytes();
                HeldParameters {
                    worker: w.id(),
                    held: values as u64 * 4,
                    owned: owned.map(|(owned, _)| owned),
                    whole: owned.map(|(_, whole)| whole),
                }
            })
            .collect()
    }

    /// Every float parameter of the whole model (replica 0's), flattened, in model order.
    pub fn parameters(&self) -> Vec<Vec<f32>> {
        self.replica_parameters(0)
    }

    /// The trained parameters of replica 0 (no buffers such as batch-norm running statistics),
    /// flattened, in model order.
    pub fn trainable_parameters(&self) -> Vec<Vec<f32>> {
        self.runtime
            .workers()
            .replica(ReplicaId(0))
            .flat_map(|w| {
                pipetrain_engine::trainable_parameters(
                    &self.runtime.workers().whole_layers(w).to_vec(),
                )
            })
            .collect()
    }

    /// The layers of `stage` in replica 0 (empty for a stage the pipeline does not have, or
    /// one another process runs). Whole under ZeRO-3 too: the values replica 0 does not own
    /// come from the replicas that do ([`Workers::whole_layers`](crate::engine::Workers::whole_layers)).
    pub fn stage_layers(&self, stage: StageId) -> std::borrow::Cow<'_, [L]> {
        let workers = self.runtime.workers();
        workers
            .get(WorkerId::new(ReplicaId(0), stage))
            .map_or(std::borrow::Cow::Borrowed(&[]), |w| workers.whole_layers(w))
    }
}

/// What one worker holds of its stage's parameters ([`Pipeline::held_parameter_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldParameters {
    /// Which worker.
    pub worker: WorkerId,
    /// Bytes of float parameter values its layers hold now.
    pub held: u64,
    /// Under ZeRO-2/3, from its first step: bytes (f32) of the stage's trainable parameters it
    /// owns.
    pub owned: Option<u64>,
    /// Under ZeRO-2/3, from its first step: bytes (f32) of all the stage's trainable parameters.
    pub whole: Option<u64>,
}
