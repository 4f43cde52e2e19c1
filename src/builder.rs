//! `Pipeline::builder()`: every setting, validated in `build()` before any thread starts.

use crate::BuildError;
use std::sync::Arc;

use burn::prelude::*;
use pipetrain_engine::{
    Backward, Batch, CrossEntropy, DataParallel, Fabric, GemmLibrary, GradGuard, Handoff, Layer,
    Loss, MatmulPrecision, OptimizerConfig, Precision, Remat, RuntimeConfig, Tie, Timing, WarmUp,
    pool,
};
use pipetrain_partitioner::Partition;
use pipetrain_schedules::{Lowering, Plan, Schedule, ScheduleError, ScheduleKind, lower, validate};
use pipetrain_schedules::{WorkerId, Zero};

use crate::error::{Error, Result, invalid};
use crate::pipeline::Pipeline;
use crate::remedy::{Remedy, Setting, Value};

mod access;
mod checks;
mod chunks;

/// How the layers are split into stages (resolved by [`Setup`](crate::Setup)).
pub(crate) enum Split {
    /// Given (or trivial).
    Fixed(Partition),
    /// Balance-by-time on per-layer costs measured on the batch given to `build_with`.
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

/// The validated settings of a pipeline, stored once.
pub(crate) struct Config {
    pub split: Split,
    pub replicas: usize,
    /// What the engine's runtime runs.
    pub runtime: RuntimeConfig,
    pub optimizer: OptimizerConfig,
    /// One per worker, replica-major.
    pub devices: Vec<Device>,
    /// Compute threads per worker.
    pub threads: usize,
    /// The precision asked of every device's f32 matmuls (set on each GPU when built).
    pub matmul_precision: MatmulPrecision,
    /// Bytes each worker may hold ([`crate::memory`]); the split must fit.
    pub memory_budget: Option<u64>,
    /// Multi-process: the workers this process runs and what connects them to the others.
    pub distributed: Option<Distributed>,
}

/// A builder's settings, each checked against the others; the split may still need measuring.
pub(crate) struct Validated<L: Layer> {
    pub config: Config,
    /// The model, ties equalized.
    pub layers: Vec<L>,
    /// The schedule's lowered plan, validated (one program per rank).
    pub plan: Plan,
}

/// This process's share of a multi-process world.
pub(crate) struct Distributed {
    pub local: Vec<WorkerId>,
    pub fabric: Box<dyn Fabric>,
}

/// Builds a [`Pipeline`]. Defaults: 1 stage, 1 micro-batch, 1F1B, `Remat::ExceptLast`, split
/// backward for dense layers ([`Backward::Split`], weight gradients once per step), SGD at
/// learning rate 0.01, cross-entropy loss, CPU (`Device::flex()`), threads per worker =
/// cores / workers.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain::{Pipeline, ScheduleKind};
/// use pipetrain_models::MlpConfig;
///
/// let device = Device::flex();
/// let err = Pipeline::builder()
///     .layers(MlpConfig::new(8, 2, 3).init(&device))
///     .stages(5) // 3 layers only
///     .build()
///     .err()
///     .expect("5 stages for 3 layers is refused");
/// assert!(err.to_string().contains("5 stages"), "{err}");
///
/// let pipeline = Pipeline::builder()
///     .layers(MlpConfig::new(8, 2, 3).init(&device))
///     .balance([2, 1])
///     .micro_batches(4)
///     .schedule(ScheduleKind::GPipe)
///     .build()?;
/// assert_eq!(pipeline.stages(), 2);
/// # Ok::<(), pipetrain::Error>(())
/// ```
pub struct PipelineBuilder<L: Layer> {
    layers: Option<Vec<L>>,
    stages: Option<usize>,
    balance: Option<Vec<usize>>,
    micro_batches: usize,
    schedule: Schedule,
    remat: Remat,
    backward: Backward,
    optimizer: OptimizerConfig,
    learning_rate: f64,
    loss: Arc<dyn Loss>,
    devices: Vec<Device>,
    threads: Option<usize>,
    replicas: usize,
    accumulation: usize,
    zero: u8,
    bucket_bytes: usize,
    ties: Vec<Tie>,
    memory_budget: Option<u64>,
    distributed: Option<Distributed>,
    guard: GradGuard,
    timing: Timing,
    handoff: Handoff,
    matmul_precision: MatmulPrecision,
    gemm: Option<GemmLibrary>,
    warm_up: WarmUp,
    precision: Precision,
}

impl<L: Layer> Default for PipelineBuilder<L> {
    fn default() -> Self {
        Self {
            layers: None,
            stages: None,
            balance: None,
            micro_batches: 1,
            schedule: ScheduleKind::OneFOneB.into(),
            remat: Remat::ExceptLast,
            backward: Backward::default(),
            optimizer: OptimizerConfig::sgd(),
            learning_rate: 0.01,
            loss: Arc::new(CrossEntropy),
            devices: Vec::new(),
            threads: None,
            replicas: 1,
            accumulation: 1,
            zero: 0,
            bucket_bytes: DataParallel::default().bucket_bytes,
            ties: Vec::new(),
            memory_budget: None,
            distributed: None,
            guard: GradGuard::default(),
            timing: Timing::default(),
            handoff: Handoff::default(),
            matmul_precision: MatmulPrecision::default(),
            gemm: None,
            warm_up: WarmUp::default(),
            precision: Precision::default(),
        }
    }
}

impl<L: Layer> PipelineBuilder<L> {
    /// The model, as a sequence of layers in forward order.
    pub fn layers(mut self, layers: impl IntoIterator<Item = L>) -> Self {
        self.layers = Some(layers.into_iter().collect());
        self
    }

    /// Number of stages; the split is measured (balance-by-time on the batch given to
    /// [`build_with`](Self::build_with)) unless [`balance`](Self::balance) fixes it. Under an
    /// interleaved schedule of v chunks per rank, the number of ranks: the model is cut into
    /// `stages × v` chunks.
    pub fn stages(mut self, stages: usize) -> Self {
        self.stages = Some(stages);
        self
    }

    /// Layers per stage, e.g. `[5, 3]`: fixes the number of stages and the split (under an
    /// interleaved schedule: layers per chunk, `ranks × v` of them).
    pub fn balance(mut self, balance: impl IntoIterator<Item = usize>) -> Self {
        self.balance = Some(balance.into_iter().collect());
        self
    }

    /// Micro-batches per step (m). The batch must divide by m.
    pub fn micro_batches(mut self, micro_batches: usize) -> Self {
        self.micro_batches = micro_batches;
        self
    }

    /// The schedule: a [`ScheduleKind`] to generate, or a compute plan to run as given
    /// (`Plan`, e.g. read with [`PlanFile`](crate::schedules::PlanFile)), which must have the
    /// pipeline's stages and micro-batches; `build` validates it (complete, deadlock-free).
    pub fn schedule(mut self, schedule: impl Into<Schedule>) -> Self {
        self.schedule = schedule.into();
        self
    }

    /// Activation re-materialization.
    pub fn remat(mut self, remat: Remat) -> Self {
        self.remat = remat;
        self
    }

    /// Fused or split backward. The default splits the backward of the layers that describe
    /// themselves as [`Dense`](crate::Dense) (the built-in MLP's): their input gradients go
    /// upstream at once and their weight gradients are computed once per step over all its
    /// micro-batches, which is what makes small micro-batches cheap.
    /// `Backward::Split { weight_group: k }` computes them every `k` micro-batches instead
    /// (less memory held), `Backward::Fused` runs every layer's backward through autodiff.
    pub fn backward(mut self, backward: Backward) -> Self {
        self.backward = backward;
        self
    }

    /// The optimizer (each stage runs its own instance).
    pub fn optimizer(mut self, optimizer: impl Into<OptimizerConfig>) -> Self {
        self.optimizer = optimizer.into();
        self
    }

    /// The learning rate.
    pub fn learning_rate(mut self, learning_rate: f64) -> Self {
        self.learning_rate = learning_rate;
        self
    }

    /// Clip the global gradient norm (over every stage and replica) to `max_norm` before each
    /// optimizer step, as `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)` does
    /// on one device; [`StepReport::grad_norm`](crate::StepReport::grad_norm) reports the norm
    /// before clipping.
    pub fn clip_grad_norm(mut self, max_norm: f64) -> Self {
        self.guard.clip_norm = Some(max_norm);
        self
    }

    /// Skip (apply nothing, on every stage) a step with a NaN or infinite gradient instead of
    /// failing it ([`StepReport::skipped`](crate::StepReport::skipped) says so).
    pub fn skip_nonfinite(mut self) -> Self {
        self.guard.skip_nonfinite = true;
        self
    }

    /// What the step report's action times, the measured bubble and the profile spans measure
    /// on a GPU: [`Timing::Host`] (the default) does not synchronise the device after each
    /// action (the fastest run; they are then the host's enqueue times, and a step waits for
    /// its device once, at its end); [`Timing::Device`] synchronises after each action, so they
    /// are device times (for a profile). On a CPU both are the same.
    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// How tensors cross between worker threads on one GPU: [`Handoff::Device`] (the default:
    /// the sender copies into a fresh device buffer and sends that; no host round trip) or
    /// [`Handoff::Host`] (the receiver copies through host memory). On a CPU both pass the
    /// handle.
    /// docs/gpu.md gives the rules each keeps.
    pub fn handoff(mut self, handoff: Handoff) -> Self {
        self.handoff = handoff;
        self
    }

    /// What f32 matmuls compute in on the pipeline's GPUs: [`MatmulPrecision::Fp32`] (the
    /// default: IEEE fp32, as PyTorch's default) or [`MatmulPrecision::Tf32`] (tensor cores).
    /// A GPU fixes it when it is first used in the process, so a device that already ran with
    /// the other precision is refused at build
    /// ([`EngineError::MatmulPrecisionFixed`](pipetrain_engine::EngineError::MatmulPrecisionFixed));
    /// make the device with [`pipetrain_engine::device::cuda_with`] to choose it first. On a CPU
    /// the setting is accepted and changes nothing (no TF32 there).
    pub fn matmul_precision(mut self, precision: MatmulPrecision) -> Self {
        self.matmul_precision = precision;
        self
    }

    /// Which library runs the dense products on the pipeline's GPUs: [`GemmLibrary::Cublas`]
    /// (the default on CUDA) or [`GemmLibrary::Burn`] (burn's own kernels, for an A/B in one
    /// binary). Set on every device at build; on a CPU every product is burn's matmul whatever
    /// is chosen.
    pub fn gemm(mut self, library: GemmLibrary) -> Self {
        self.gemm = Some(library);
        self
    }

    /// When the first training step and the first inference run their compute actions one at a
    /// time: [`WarmUp::Auto`] (the default: on a GPU, so that autotune tunes every shape on one
    /// thread and every worker then runs the same kernel for it — bitwise equality and
    /// `--verify` hold from step 1), [`WarmUp::Always`] or [`WarmUp::Never`].
    pub fn warm_up(mut self, warm_up: WarmUp) -> Self {
        self.warm_up = warm_up;
        self
    }

    /// The dtype the layers compute in: [`Precision::Fp32`] (the default) or
    /// [`Precision::Bf16`] — forward and backward in bf16, the loss in fp32, and fp32 master
    /// weights, gradient accumulation, all-reduce, optimizer state and checkpoints (see
    /// [`Precision`] for where the casts sit, and the guide's "Mixed precision" for the table of
    /// ops and dtypes beside PyTorch autocast's). A layer that cannot compute in bf16 (one
    /// holding burn's `BatchNorm`) is refused at build, naming it.
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// The loss, computed on the last stage.
    pub fn loss(mut self, loss: impl Loss + 'static) -> Self {
        self.loss = Arc::new(loss);
        self
    }

    /// Data-parallel replicas of the whole pipeline (default 1): `replicas × stages` workers.
    /// Replica i trains on the i-th contiguous shard of every mini-batch; the stage-s workers
    /// sum their gradients with an all-reduce after their last backward. The mini-batch must
    /// split evenly into `replicas × micro_batches` parts.
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Gradient accumulation (default 1): gradients of `k` consecutive
    /// [`train_step`](Pipeline::train_step) calls are summed, with no all-reduce, and the
    /// optimizer steps on the k-th (PyTorch DDP's `no_sync`). k calls on batches b₁…b_k equal one
    /// step on their concatenation.
    pub fn accumulation(mut self, k: usize) -> Self {
        self.accumulation = k;
        self
    }

    /// ZeRO level ([`Zero`](crate::schedules::Zero)), sharding across the replicas of each
    /// stage:
    /// - 0 (default): nothing; every replica keeps everything.
    /// - 1: the optimizer state. Gradients are reduced to the replica that owns each parameter,
    ///   which updates it and broadcasts the new value.
    /// - 2: the gradients too: reduced (the plan's `RG`) as soon as the stage's last weight
    ///   gradient is done, each replica keeping only its shard, also between `--accumulate`
    ///   steps; the owners' updated values reach every replica by the plan's `US`.
    /// - 3: the parameters too: a stage's values are whole only between the plan's `US` before
    ///   its first computation of a step and `RS` after its last one that reads them (before the
    ///   weight-gradient pass, so the values and the gradients are never whole together);
    ///   between steps each replica holds what it owns.
    ///
    /// One optimizer step is bitwise that of level 0 at every level; accumulation steps at
    /// levels 2–3 sum in another order (docs/zero.md).
    pub fn zero(mut self, stage: u8) -> Self {
        self.zero = stage;
        self
    }

    /// Ties two parameters into one (DeepSpeed's `TiedLayerSpec`), e.g. a GPT's input embedding
    /// on the first stage and its output projection on the last
    /// ([`GptConfig::tie_embeddings`](../pipetrain_models/struct.GptConfig.html)). The second
    /// starts from the first's value; every step their gradients are summed between the
    /// stages that hold them. Names are full-model parameter names, as in checkpoints.
    pub fn tie(mut self, tie: Tie) -> Self {
        self.ties.push(tie);
        self
    }

    /// All-reduce bucket size in bytes (default 25 MiB, as PyTorch DDP).
    pub fn bucket_bytes(mut self, bytes: usize) -> Self {
        self.bucket_bytes = bytes;
        self
    }

    /// Devices: one per stage (shared by the replicas), one per worker (`replicas × stages`,
    /// replica-major), or a single one for all; with interleaved chunks, one per rank also
    /// works. Default: the CPU (burn's flex). Several workers may share a device.
    ///
    /// Each worker moves its layers to its device and every activation, gradient and input it
    /// receives to it before computing. On GPUs, each worker is its own persistent thread and
    /// cubecl gives each thread its own stream (its default `StreamPolicy::PerThread`, ids
    /// taken modulo `max_streams`, 128 by default), so stages sharing a GPU do not serialise
    /// on one stream; gradients from replicas on other devices are moved before they are summed.
    pub fn devices(mut self, devices: impl IntoIterator<Item = Device>) -> Self {
        self.devices = devices.into_iter().collect();
        self
    }

    /// Compute threads per worker (default: cores / workers, at least 1).
    pub fn threads_per_worker(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }

    /// The bytes each worker may hold: parameters, gradients, optimizer state, stashed
    /// activations and the split backward's deferred weight-gradient inputs, counted as [`crate::memory`] describes from the layers' parameter counts and
    /// their outputs measured on the batch given to [`build_with`](Self::build_with). The split
    /// is then the fastest one (balance by measured time) whose every stage fits; with one
    /// stage, the whole model must fit. If none fits, `build_with` fails with
    /// [`BuildError::MemoryBudget`](crate::BuildError::MemoryBudget),
    /// naming the least budget that would fit and the other remedies. Not with
    /// [`balance`](Self::balance), which fixes the split.
    pub fn memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = Some(bytes);
        self
    }

    /// Multi-process runs: this process runs only the workers `local` (ids in the
    /// `replicas × stages` world), connected to the other processes' by `fabric` (for example
    /// `pipetrain_engine::mpi::MpiFabric`, feature `mpi`). The split must be the same in every
    /// process, so it is never measured: [`balance`](Self::balance), or else the even split
    /// ([`Partition::even`](pipetrain_partitioner::Partition::even): the extra layers on the last
    /// stages), which the `pipetrain` binary uses too.
    pub fn distributed(mut self, local: Vec<WorkerId>, fabric: Box<dyn Fabric>) -> Self {
        self.distributed = Some(Distributed { local, fabric });
        self
    }

    /// Validates every setting, resolves the [`Setup`](crate::Setup) and starts the pipeline's
    /// workers. No thread runs before the setup is complete. A split measured by time
    /// (`.stages(p)` without [`balance`](Self::balance)) or by
    /// [`memory_budget`](Self::memory_budget) needs a sample batch: use
    /// [`build_with`](Self::build_with) for those (`build` refuses them, naming the remedy).
    pub fn build(self) -> Result<Pipeline<L>> {
        self.validated()?.resolve(None)
    }

    /// [`build`](Self::build), measuring on `batch` (a training batch, e.g. the first): the
    /// per-layer times of a split by time or by memory budget, profiled on its first
    /// micro-batch, and the activations the [`Setup`](crate::Setup) predicts the memory with.
    /// The split is then made before any thread starts.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain::Pipeline;
    /// use pipetrain_models::{MlpConfig, synthetic};
    ///
    /// let device = Device::flex();
    /// let batch = synthetic::classification(0, 0, 16, 8, 3, &device);
    /// let layers = MlpConfig::new(8, 2, 3).init(&device);
    /// let builder = || Pipeline::builder().layers(layers.clone()).stages(2).micro_batches(4);
    /// let err = builder().build().err().expect("a measured split needs a batch");
    /// assert!(err.to_string().contains("build_with(&batch)"), "{err}");
    /// let pipeline = builder().build_with(&batch)?;
    /// assert_eq!(pipeline.partition().stages(), 2); // split before the first step
    /// # Ok::<(), pipetrain::Error>(())
    /// ```
    pub fn build_with(self, batch: &Batch) -> Result<Pipeline<L>> {
        self.validated()?.resolve(Some(batch))
    }

    /// Every setting checked against the others: what [`Setup`](crate::Setup) resolves.
    pub(crate) fn validated(self) -> Result<Validated<L>> {
        self.check_settings()?;
        let Some(layers) = self.layers else {
            return Err(Error::Build(BuildError::NoLayers));
        };
        if layers.is_empty() {
            return Err(Error::Build(BuildError::EmptyModel));
        }
        pipetrain_engine::check_skips(&layers)?;
        if let Some(i) = layers.iter().position(Layer::batch_statistics) {
            if self.remat != Remat::Never {
                return Err(Error::Build(BuildError::RematWithBatchNorm {
                    remat: self.remat,
                    layer: i,
                }));
            }
        }
        let n = layers.len();
        // Interleaved schedules hold v chunks per rank: `.stages(p)` cuts p·v model stages, and a
        // balance lists the chunks.
        let v = self.schedule.virtual_stages();
        let shape = chunks::Shape {
            schedule: &self.schedule,
            layers: n,
            micro_batches: self.micro_batches,
        };
        let split = match (&self.balance, self.stages.map(|p| p * v)) {
            (Some(balance), _) => {
                if let Some(p) = self.stages.filter(|&p| p * v != balance.len()) {
                    return Err(shape.stages_and_balance(p, balance));
                }
                if balance.len() % v != 0 {
                    return Err(shape.uneven_balance(balance));
                }
                Split::Fixed(Partition::from_balance(balance, n)?)
            }
            (None, None) | (None, Some(1)) if self.memory_budget.is_some() => {
                Split::Measured { stages: 1 }
            }
            (None, None) | (None, Some(1)) => Split::Fixed(Partition::from_balance(&[n], n)?),
            (None, Some(0)) => {
                return Err(ScheduleError::ZeroStages.into());
            }
            (None, Some(p)) if p > n => {
                return Err(shape.more_stages_than_layers(p / v));
            }
            // Every process must agree on the split: even, never measured.
            (None, Some(p)) if self.distributed.is_some() && self.memory_budget.is_none() => {
                Split::Fixed(Partition::even(n, p)?)
            }
            (None, Some(p)) => Split::Measured { stages: p },
        };
        let stages = split.stages();
        match (self.memory_budget, &self.balance) {
            (Some(0), _) => {
                return invalid(
                    Setting::MemoryBudget,
                    0,
                    "no worker can hold a layer in 0 bytes",
                    Some(Remedy::set(Setting::MemoryBudget, Value::Bytes(1 << 30))),
                );
            }
            (Some(budget), Some(balance)) => {
                return Err(Error::Build(BuildError::BudgetAndBalance {
                    budget,
                    balance: balance.clone(),
                }));
            }
            _ => {}
        }
        if self.distributed.is_some() && matches!(split, Split::Measured { .. }) {
            return Err(Error::Build(BuildError::MeasuredSplitAcrossProcesses {
                stages,
            }));
        }
        let workers = stages * self.replicas;
        let devices = match self.devices.len() {
            0 => vec![Device::flex(); workers],
            1 => vec![self.devices[0].clone(); workers],
            k if k == stages => (0..workers)
                .map(|w| self.devices[w % stages].clone())
                .collect(),
            // One device per rank: stage c on rank c mod p.
            k if v > 1 && k * v == stages => (0..workers)
                .map(|w| self.devices[w % stages % k].clone())
                .collect(),
            k if k == workers => self.devices,
            k => {
                return Err(Error::Build(BuildError::DeviceCount {
                    devices: k,
                    replicas: self.replicas,
                    stages,
                }));
            }
        };
        for device in &devices {
            pipetrain_engine::device::require_matmul_precision(device, self.matmul_precision)?;
            if let Some(library) = self.gemm {
                pipetrain_engine::device::use_gemm_library(device, library);
            }
        }
        let unlowered = self.schedule.plan(stages, self.micro_batches)?;
        let plan = lower(&unlowered, Lowering::default());
        validate(&plan)?;
        let ties = self.ties;
        let layers = pipetrain_engine::equalize(layers, &ties)?;
        let config = Config {
            split,
            replicas: self.replicas,
            runtime: RuntimeConfig {
                schedule: self.schedule.clone(),
                micro_batches: self.micro_batches,
                learning_rate: self.learning_rate,
                remat: self.remat,
                loss: self.loss,
                data_parallel: DataParallel {
                    bucket_bytes: self.bucket_bytes,
                    zero: Zero::from_level(self.zero).unwrap_or_default(),
                    accumulation: self.accumulation,
                },
                ties,
                backward: self.backward,
                guard: self.guard,
                timing: self.timing,
                handoff: self.handoff,
                precision: self.precision,
                warm_up: self.warm_up,
            },
            optimizer: self.optimizer,
            devices,
            threads: self
                .threads
                .unwrap_or_else(|| pool::threads_per_worker(workers)),
            matmul_precision: self.matmul_precision,
            memory_budget: self.memory_budget,
            distributed: self.distributed,
        };
        Ok(Validated {
            config,
            layers,
            plan,
        })
    }
}
