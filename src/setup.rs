//! [`Setup`]: what a [`Pipeline`] runs, resolved in one place before any thread starts.
//!
//! ```text
//! PipelineBuilder ─► validated settings ─► the split: given (.balance), by time, or by memory
//!   budget (both measured on build_with's batch) ─► workers (layers, devices, optimizers)
//!   ─► pipetrain_engine::Prepared: every plan lowered and validated ─► Runtime::new (threads)
//!   └─► Setup (this, data only): split, plans, predicted bubbles and memory, workers
//! ```

use crate::BuildError;
use std::fmt;
use std::ops::Range;

use burn::prelude::Device;
use pipetrain_engine::{
    Activation, Batch, ChannelFabric, Fabric, Handoff, Layer, Layout, MatmulPrecision, Plans,
    Runtime, Workers, World,
};
use pipetrain_partitioner::{LayerCost, Partition};
use pipetrain_schedules::{
    Action, ActionKind, Costs, Plan, ReplicaId, StageId, WorkerId, simulate,
};

use crate::builder::{Config, Split, Validated};
use crate::error::{Error, Result};
use crate::memory::{self, Bytes, WorkerMemory};
use crate::pipeline::Pipeline;

mod split;

/// One worker's configuration.
#[derive(Clone, Debug)]
pub struct WorkerSetup {
    /// Which worker.
    pub worker: WorkerId,
    /// The layers it holds (full-model indices).
    pub layers: Range<usize>,
    /// Its device.
    pub device: Device,
    /// Its compute threads.
    pub threads: usize,
    /// The precision asked of its device's f32 matmuls: set on a GPU when the pipeline was
    /// built; a CPU has no TF32 and multiplies in IEEE fp32 whatever is asked
    /// (`pipetrain::engine::device::matmul_precision` tells what a device runs).
    pub matmul_precision: MatmulPrecision,
    /// How tensors cross from its thread to another worker's: the runtime's hand-off (on a CPU
    /// every mode passes the handle, and `Handoff::DeviceOnCpuToo` forces the GPU's copies).
    pub handoff: Handoff,
}

/// What a [`Pipeline`] runs, resolved when it is built and fixed for its life: the split, the
/// lowered plans of every mode, the bubbles and the memory the simulator and the memory model
/// predict, and each worker's configuration. Data only; [`Pipeline::setup`] shows it.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain::{Pipeline, ScheduleKind, StageId};
/// use pipetrain_models::{MlpConfig, synthetic};
///
/// let device = Device::flex();
/// let batch = synthetic::classification(0, 0, 32, 16, 4, &device);
/// let pipeline = Pipeline::builder()
///     .layers(MlpConfig::new(16, 3, 4).init(&device))
///     .stages(2) // split by time, measured on `batch`
///     .micro_batches(4)
///     .schedule(ScheduleKind::OneFOneB)
///     .build_with(&batch)?;
/// let setup = pipeline.setup();
/// assert_eq!(setup.partition().stages(), 2);
/// assert!(setup.measured());
/// assert_eq!(setup.workers().len(), 2);
/// assert_eq!(setup.layout().parts(), 4); // 1 replica × 4 micro-batches
/// assert_eq!(setup.memory()[0].stashed_micro_batches, 2); // 1F1B: p − s on stage s
/// assert!(setup.memory()[0].stash > 0);
/// assert_eq!(setup.plans().step().micro_batches(), 4);
/// println!("{setup}");
/// # Ok::<(), pipetrain::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Setup {
    layout: Layout,
    partition: Partition,
    plans: Plans,
    costs: Option<Vec<LayerCost>>,
    predicted_bubble: Vec<f64>,
    memory: Vec<WorkerMemory>,
    measured: bool,
    workers: Vec<WorkerSetup>,
}

impl Setup {
    /// Replicas, stages (pipeline ranks) and micro-batches per step, and what follows from them:
    /// workers, micro-batches per step over all replicas, rows per micro-batch.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The stage split.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// The lowered, validated plans of every mode: a training step, an accumulating step,
    /// inference, the rank order under interleaved schedules, and the stages that run fused
    /// backwards (see [`Plans`]).
    pub fn plans(&self) -> &Plans {
        &self.plans
    }

    /// The per-layer costs the split was measured with (a split by time or by memory budget);
    /// `None` for a given split.
    pub fn costs(&self) -> Option<&[LayerCost]> {
        self.costs.as_deref()
    }

    /// Per stage, the bubble fraction the simulator predicts for the schedule's plan with the
    /// split's measured layer costs (uniform costs when the split was given).
    pub fn predicted_bubble(&self) -> &[f64] {
        &self.predicted_bubble
    }

    /// Each worker's memory at the peak of a step, predicted (replica-major, counted as
    /// [`crate::memory`] describes): parameters, gradients, optimizer-state slots, the plan's
    /// peak stash and the split backward's deferred inputs. Activations are measured on the
    /// first micro-batch of the batch given to
    /// [`build_with`](crate::PipelineBuilder::build_with); without one, or in a multi-process
    /// run ([`measured`](Self::measured)
    /// is false) the stash and deferred bytes are 0.
    pub fn memory(&self) -> &[WorkerMemory] {
        &self.memory
    }

    /// Whether a sample batch measured the activations ([`memory`](Self::memory)).
    pub fn measured(&self) -> bool {
        self.measured
    }

    /// Each worker's configuration (of the workers this process runs), replica-major.
    pub fn workers(&self) -> &[WorkerSetup] {
        &self.workers
    }
}

impl fmt::Display for Setup {
    /// The split, then one line per worker of replica 0: its layers, device, predicted bubble
    /// and memory.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.costs.is_some() {
            "measured"
        } else {
            "given"
        };
        write!(
            f,
            "split {} (balance {:?}, {how})",
            self.partition,
            self.partition.balance()
        )?;
        let replica0 = self.workers.iter().zip(&self.memory);
        for (w, m) in replica0.filter(|(w, _)| w.worker.replica == ReplicaId(0)) {
            let stage = w.worker.stage;
            let bubble = self.predicted_bubble.get(stage.index()).copied();
            let bubble = 100.0 * bubble.unwrap_or(0.0);
            write!(f, "\n  {stage}  layers {:?} on {:?}", w.layers, w.device)?;
            write!(
                f,
                "  predicted bubble {bubble:5.1}%  memory {} ({} micro-batches stashed)",
                Bytes(m.total()),
                m.stashed_micro_batches
            )?;
            // ZeRO-3 (or accumulated gradients): what stays between steps is less.
            if m.resting_parameters < m.parameters || m.resting_gradients > 0 {
                write!(f, ", {} between steps", Bytes(m.resting()))?;
            }
        }
        Ok(())
    }
}

impl<L: Layer> Validated<L> {
    /// Whether the split is measured on a batch (by time or by memory budget), so that
    /// [`resolve`](Self::resolve) needs one.
    pub(crate) fn needs_batch(&self) -> bool {
        matches!(self.config.split, Split::Measured { .. })
    }

    /// Stages of the split, given or to measure.
    pub(crate) fn stages(&self) -> usize {
        self.config.split.stages()
    }

    /// The setup of these settings, measuring on `batch` when the split needs it; then the
    /// runtime that runs it (the threads start here, once everything is resolved).
    pub(crate) fn resolve(self, batch: Option<&Batch>) -> Result<Pipeline<L>> {
        let Validated {
            mut config,
            layers,
            plan,
        } = self;
        let (r, m) = (config.replicas, config.runtime.micro_batches);
        // A training batch splits into replicas × m; a smaller one measures on m micro-batches
        // or on itself.
        let sample = match batch {
            Some(b) => {
                let cut = Layout::new(r, config.split.stages(), m).fitting(b.len());
                Some(micro_batch(&b.inputs, cut.parts())?)
            }
            None => None,
        };
        let (partition, costs) = match (&config.split, &sample) {
            (Split::Fixed(partition), _) => (partition.clone(), None),
            (Split::Measured { stages }, Some(sample)) => {
                let (partition, costs) = split::measure(&config, &layers, sample, *stages)?;
                (partition, Some(costs))
            }
            (Split::Measured { stages }, None) => return needs_batch(&config, *stages),
        };
        let stages = partition.stages();
        let world = match &config.distributed {
            Some(d) => World::with_local(r, stages, d.local.clone())?,
            None => World::new(r, stages)?,
        };
        let workers = Workers::build(
            world,
            partition.clone(),
            &layers,
            &config.devices,
            &config.optimizer,
            config.threads,
        )?;
        let engine = pipetrain_engine::Prepared::new(workers, config.runtime.clone())?;
        let plans = engine.plans().clone();
        // Activations are measured through the whole model: where this process holds all of it.
        let whole = sample.as_ref().filter(|_| config.distributed.is_none());
        let memory = predict_memory(&config, &layers, engine.workers(), &plans, whole)?;
        let world = engine.workers().world();
        let setup = Setup {
            layout: Layout::new(world.replicas(), world.stages(), m),
            predicted_bubble: predict_bubble(&plan, &partition, costs.as_deref())?,
            workers: engine
                .workers()
                .iter()
                .map(|w| WorkerSetup {
                    worker: w.id(),
                    layers: partition.range(w.id().stage),
                    device: pipetrain_engine::plain_device(w.device()),
                    threads: config.threads,
                    matmul_precision: config.matmul_precision,
                    handoff: config.runtime.handoff,
                })
                .collect(),
            partition,
            plans,
            costs,
            memory,
            measured: whole.is_some(),
        };
        let fabric: Box<dyn Fabric> = match config.distributed.take() {
            Some(d) => d.fabric,
            None => Box::new(ChannelFabric {
                handoff: config.runtime.handoff,
            }),
        };
        let runtime = Runtime::new(engine, fabric)?;
        Ok(Pipeline::new(setup, runtime, config.devices))
    }
}

/// `build()` of a split that is measured: the error naming the remedy.
fn needs_batch<T>(c: &Config, stages: usize) -> Result<T> {
    Err(Error::Build(BuildError::NeedsBatch {
        stages,
        budget: c.memory_budget,
    }))
}

/// The first of `parts` row slices of `inputs` (the longest).
pub(crate) fn micro_batch(inputs: &Activation, parts: usize) -> Result<Activation> {
    Ok(inputs
        .clone()
        .split(parts)
        .map_err(pipetrain_engine::EngineError::bad_batch)?
        .swap_remove(0))
}

/// Per stage, the bubble the simulator predicts for `plan` (the schedule's, one program per
/// rank) with the split's layer costs (uniform when none were measured); a stage has its rank's.
fn predict_bubble(
    plan: &Plan,
    partition: &Partition,
    costs: Option<&[LayerCost]>,
) -> Result<Vec<f64>> {
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
    let simulated = simulate(plan, &sim_costs)?;
    let rank = |s: StageId| plan.rank_of(s).unwrap_or(s.index());
    let bubble = |r: usize| simulated.stages.get(r).map_or(0.0, |r| r.bubble_fraction);
    Ok(StageId::range(stages).map(|s| bubble(rank(s))).collect())
}

/// Each worker's predicted memory (see [`Setup::memory`]).
fn predict_memory<L: Layer>(
    c: &Config,
    layers: &[L],
    workers: &Workers<L>,
    plans: &Plans,
    sample: Option<&Activation>,
) -> Result<Vec<WorkerMemory>> {
    let rt = &c.runtime;
    let group = memory::weight_group(
        rt.backward,
        rt.precision,
        rt.micro_batches,
        rt.schedule.splits_backward(),
    );
    let partition = workers.partition();
    let step = plans.step();
    let deferred: Vec<u64> = match (sample, group) {
        (Some(sample), 1..) => {
            let split = memory::split_bytes_held(layers, sample, &c.devices[0])?;
            partition
                .iter()
                .map(|(s, r)| {
                    // A schedule that places its `W`s holds every micro-batch between its `I`
                    // and its `W` (ZB-H1 defers several), not one group.
                    let held = match rt.schedule.splits_backward() && group == 1 {
                        true => peak_deferred(step.program(s)).max(1) as u64,
                        false => group,
                    };
                    split[r].iter().sum::<u64>().saturating_mul(held)
                })
                .collect()
        }
        _ => vec![0; partition.stages()],
    };
    let peak: Vec<usize> = StageId::range(partition.stages())
        .map(|s| peak_stash_held(step.program(s)))
        .collect();
    let model = memory::Model {
        remat: rt.remat,
        precision: rt.precision,
        slots: memory::optimizer_slots(&c.optimizer),
        zero: rt.data_parallel.zero,
        replicas: workers.world().replicas(),
        accumulation: rt.data_parallel.accumulation,
        peak_stash: &peak,
        deferred: &deferred,
        deferral: memory::Deferral {
            group,
            micro_batches: rt.micro_batches,
        },
    };
    let mut predicted = memory::predicted(workers, sample, &c.devices, &model)?;
    let ranks = plans.ranks();
    memory::one_weight_pass_per_rank(&mut predicted, |s| ranks.and_then(|p| p.rank_of(s)));
    Ok(predicted)
}

/// Most micro-batches a stage's `program` stashes at once, as the engine holds them: a
/// micro-batch's stash is released by its backward, or by its input-gradient backward (`I`),
/// which moves what its weight gradients need into the deferred bytes ([`peak_deferred`]).
/// The plan's `peak_stash` keeps it to the `W` (ZB-H1's prediction read 1.14 of the step
/// with it).
fn peak_stash_held(program: &[Action]) -> usize {
    peak_between(
        program,
        ActionKind::Forward,
        &[ActionKind::Backward, ActionKind::BackwardInput],
    )
}

/// Most micro-batches a stage's `program` holds between their input-gradient backward (`I`) and
/// their weight-gradient backward (`W`): the deferred weight-gradient inputs of a schedule that
/// places its `W`s.
fn peak_deferred(program: &[Action]) -> usize {
    peak_between(
        program,
        ActionKind::BackwardInput,
        &[ActionKind::BackwardWeight],
    )
}

/// Most micro-batches at once between an `open` action and one of `close` (an overlap's
/// forward before its backward).
fn peak_between(program: &[Action], open: ActionKind, close: &[ActionKind]) -> usize {
    let (mut live, mut peak) = (0usize, 0usize);
    for a in program.iter().flat_map(Action::in_sequence) {
        if a.kind == open {
            live += 1;
            peak = peak.max(live);
        } else if close.contains(&a.kind) {
            live = live.saturating_sub(1);
        }
    }
    peak
}
