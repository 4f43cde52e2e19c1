//! Memory per worker: what a stage's layers hold, in bytes, and the accounting behind
//! [`PipelineBuilder::memory_budget`](crate::PipelineBuilder::memory_budget),
//! [`Setup::memory`](crate::Setup::memory) (predicted before any step) and
//! [`Pipeline::worker_memory`](crate::Pipeline::worker_memory) (after one).
//!
//! ## What is counted
//!
//! Per layer (master weights, gradients and optimizer state in f32 under every
//! [`Precision`]):
//! - **parameters**: 4 bytes per parameter;
//! - **gradients**: as many again (the gradient accumulated over a step's micro-batches);
//! - **optimizer state**: 0 for plain SGD, one parameter-sized slot for SGD with momentum, two
//!   for Adam and AdamW (first and second moments);
//! - **stash**: what the layer's training forward keeps in the autodiff graph for one
//!   micro-batch ([`LayerMemory::graph`], [`Layer::graph_bytes`]:
//!   its output, and for a layer with intermediates, a GPT's or a Llama's block, a ResNet block,
//!   what each op saved, from the layer's shapes and burn's per-op rules), times
//!   the micro-batches in flight, and the stage's input for each micro-batch in flight (a
//!   received copy on every stage but the first; on the first, its copy cast to bf16 under
//!   bf16). Without re-materialization the autodiff graph keeps every
//!   layer's output of every stashed micro-batch; with it, only the micro-batch being
//!   re-materialized keeps its outputs, so each layer is charged one micro-batch. The output
//!   is measured in the step's precision (2 bytes a float value in bf16; token ids at 4).
//!   Under bf16 each stashed micro-batch's graph also keeps the bf16 copy of the layer's
//!   weights that its forward used: 2 bytes per parameter it casts ([`LayerMemory::compute_copy`]).
//!   A dense ReLU layer on burn's autodiff path (the fused backward, bf16) is charged its
//!   output twice: the graph keeps the `Linear`'s output before the ReLU for the ReLU's
//!   backward beside the ReLU's output that the next product keeps.
//! - **deferred**: with the split backward, each dense layer's input and pre-activation gradient
//!   (its output's size) for every micro-batch of a weight-gradient group, held from its `I` to
//!   its group's `W` (stage 0's first layer's input too: rows of the caller's batch, which the
//!   engine allocates); under a schedule that places its `W`s (ZB-H1, ZB-V), every
//!   micro-batch between its `I` and its `W` in the plan, whose stash its `I` releases. The
//!   budget models it per layer, [`Pipeline::worker_memory`](crate::Pipeline::worker_memory)
//!   reports what the step measured. `Backward::Split { weight_group }` bounds it. The stash
//!   and the deferred bytes are held as they overlap ([`held_at_once`]): the larger of the two
//!   when the step's weight gradients wait for its end (the default), else both, less the
//!   micro-batch whose backward moved its stashed layer inputs into the deferred ones.
//! - **the backward's gradients** (the fused backward, bf16: the layers on burn's autodiff
//!   path): one micro-batch's backward holds its largest layer's output gradient and the input
//!   gradient it makes, in fp32 ([`WorkerMemory::backward`]).
//! - **`W`'s copies**: a group of several micro-batches is stacked into one GEMM, one copy of
//!   the larger of one `Linear` call's inputs and output gradients at a time
//!   ([`WorkerMemory::weight_copies`]); one weight-gradient pass at a time on a pipeline rank
//!   whose stages take turns (interleaved, ZB-V).
//! - **the all-reduce's sums** (replicas): each replica sums the gradients it owns, about 1/R
//!   of them, beside its gradients, after the activations are released
//!   ([`WorkerMemory::reduced`]).
//!
//! The budget (`budget_costs`, per layer: each layer's graph from the profiling pass,
//! [`LayerCost::activation_bytes`]) adds per stage what depends on the cut (the received
//! inputs, the outputs at the cut, and `W`'s copies: [`pipetrain_partitioner::CutBytes`]) and
//! keeps 1/32 headroom
//! ([`pipetrain_partitioner::with_headroom`]); `pipetrain tune` budgets with the same code.
//!
//! Measured against a counting allocator that tells the workers apart
//! (`tests/memory_measured.rs`, docs/memory.md): within ±15 % of a step's peak above the live
//! level between steps, where the process is one worker (0.85–1.13 on MLPs, GPipe, remat, SGD
//! and Adam, fp32 with the split backward in groups of one and of all and the fused one, bf16
//! where parameters dominate, two compute threads), and of each worker's own peak where several
//! share it (0.88–1.12: 2 stages under GPipe and 1F1B, remat, the fused backward, two compute
//! threads, replicas with and without ZeRO-1, 2 replicas × 2 stages), a worker's bytes being
//! those it holds (a message between stages its receiver's, a collective's sums their maker's).
//! Where messages are on the way between the stages at a worker's peak (groups of one, ZB-H1,
//! ZB-V, interleaved) who holds them is the workers' relative speed: each worker's model is
//! within ±15 % of what it alone held … everything it held at either end. Under the least
//! budget that fits, every worker peaked under it, the fullest at 0.93–0.98 of it (MLPs; a
//! GPT on 2 stages 0.96).
//!
//! Not counted: the host's per-thread caches (`gemm` 0.19, burn-flex's GEMM, keeps a buffer the
//! size of the core's L2 cache, 2 MiB on the test's Xeon, in every compute thread that has run a
//! large enough product, for the thread's life); the autodiff graph's bookkeeping per recorded
//! op (some hundred bytes an op, batch norm's 13 kB a call: a GPT block at d 64 on 8 × 16
//! tokens reads 1.05 of its charge, a Llama block 1.07, a ResNet block 1.07); the gradients a
//! micro-batch's backward holds beyond its largest layer's two (108 kB above an MLP-4x32
//! micro-batch's 275 kB graph, every layer's); what the last stage holds beyond them under
//! bf16 (its worker reads 0.83) and with the fused backward and re-materialization (0.78): the
//! loss's values and messages on the way, not accounted for (docs/memory.md); the allocator's
//! slack, burn's per-op temporaries. The numbers are a model of what the engine
//! holds, not a resident-set reading.

use std::fmt;
use std::str::FromStr;

use burn::prelude::Device;
use pipetrain_engine::{
    Activation, Backward, Layer, OptimizerConfig, Remat, Workers, owned_parameter_bytes,
};
use pipetrain_partitioner::{CutBytes, LayerCost, with_headroom};
use pipetrain_schedules::{ReplicaId, WorkerId, Zero};

use crate::Precision;
use crate::error::Result;
use crate::step_report::StepReport;

/// Bytes of one f32.
const F32: u64 = 4;

/// Parameter-sized state slots `optimizer` keeps per parameter: 0 (SGD), 1 (SGD with
/// momentum), 2 (Adam, AdamW).
///
/// ```
/// use pipetrain::{OptimizerConfig, memory::optimizer_slots};
/// assert_eq!(optimizer_slots(&OptimizerConfig::sgd()), 0);
/// assert_eq!(optimizer_slots(&OptimizerConfig::sgd_momentum(0.9)), 1);
/// assert_eq!(optimizer_slots(&OptimizerConfig::adam()), 2);
/// ```
pub fn optimizer_slots(optimizer: &OptimizerConfig) -> u64 {
    optimizer.state_slots()
}

/// What one layer holds, in bytes (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerMemory {
    /// Parameter bytes.
    pub parameters: u64,
    /// The layer's output for one micro-batch, in bytes.
    pub activation: u64,
    /// What its training forward leaves in burn's autodiff graph for one micro-batch: its
    /// output and every value its ops saved for their backward
    /// ([`Layer::graph_bytes`]: a GPT block keeps about
    /// 20 times its output, a Llama block 23, a ResNet block 6; an MLP's layers their output).
    pub graph: u64,
    /// The cast copy of its weights a stashed micro-batch keeps (bf16: 2 bytes per parameter
    /// its [compute copy](pipetrain_engine::Layer::compute_copy) casts, every one by default,
    /// the `Linear`s of a Llama; 0 in fp32). The budget's per-layer costs charge every
    /// parameter's copy (an upper bound for a layer that casts fewer).
    pub compute_copy: u64,
}

impl LayerMemory {
    /// The bytes one worker holding this layer needs: parameters, gradients, `slots`
    /// optimizer-state slots, and `stashed` micro-batches of its output.
    pub fn total(&self, slots: u64, stashed: u64) -> u64 {
        self.parameters
            .saturating_mul(2 + slots)
            .saturating_add(self.stashed().saturating_mul(stashed))
    }

    /// What one stashed micro-batch holds of this layer: its graph (its output and what its
    /// ops saved) and its weights' cast copy.
    pub fn stashed(&self) -> u64 {
        self.graph.saturating_add(self.compute_copy)
    }
}

/// One worker's memory at the peak of a step (see the module docs for what is counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerMemory {
    /// Which worker.
    pub worker: WorkerId,
    /// Parameter bytes of its layers.
    pub parameters: u64,
    /// Gradient bytes (as many as the parameters).
    pub gradients: u64,
    /// Optimizer-state bytes, as the optimizer serializes them (with ZeRO only its share).
    pub optimizer_state: u64,
    /// Parameter bytes kept between steps: all of [`parameters`](Self::parameters), or under
    /// ZeRO-3 the share this replica owns (whole tensors, balanced by size: about 1/R). Within
    /// a step the stage's parameters are whole at every level from its first computation to
    /// its last that reads them ([`weight_pass_parameters`](Self::weight_pass_parameters)).
    pub resting_parameters: u64,
    /// Parameter bytes held while the step makes most of its gradients: all of
    /// [`parameters`](Self::parameters), or under ZeRO-3 with the split backward whose
    /// weight gradients wait for the step's end, the owned share
    /// ([`resting_parameters`](Self::resting_parameters)): the plan reshards the stage after
    /// its last computation that reads the values, before that weight-gradient pass (`sI`,
    /// `sRS`, `sW`), so the whole values and the whole gradients are never held together.
    /// With the fused backward, or weight gradients made along the way (groups, ZB-H1, ZB-V),
    /// the gradients are made while the values are whole, and this is all of them.
    pub weight_pass_parameters: u64,
    /// Gradient bytes kept between the batches of an accumulation (`accumulation` > 1): all of
    /// [`gradients`](Self::gradients), or under ZeRO-2/3 the owned share; 0 without
    /// accumulation (the optimizer step frees them).
    pub resting_gradients: u64,
    /// Most micro-batches stashed at once in the step.
    pub stashed_micro_batches: usize,
    /// Bytes of those micro-batches' activations.
    pub stash: u64,
    /// Most bytes held at once for deferred weight gradients (split backward), as measured by
    /// the step ([`StageReport::peak_deferred_bytes`](crate::StageReport::peak_deferred_bytes)).
    pub deferred: u64,
    /// The copies a weight-gradient pass (`W`) makes of one layer's inputs, then gradients,
    /// over its group's micro-batches (the rows stacked for one GEMM): the larger of the two
    /// per micro-batch, of the stage's largest layer, times the group; 0 for a group of one
    /// micro-batch and with the fused backward.
    pub weight_copies: u64,
    /// The gradients one micro-batch's backward holds as they flow, where the stage's layers
    /// run on burn's autodiff path (the fused backward, bf16): its largest layer's output
    /// gradient and the input gradient it makes, in fp32, for one micro-batch. 0 with the
    /// split backward, whose dense layers' backward the engine runs by hand. Measured (issue
    /// 48): 2 stages of MLP-4x32 under the fused backward read 0.88 and 0.95 of the allocator
    /// without it, 0.93 and 1.00 with it; under bf16 0.80 and 0.76, then 0.88 and 0.83.
    pub backward: u64,
    /// Activation bytes held at once at the step's peak: `stash` and `deferred` as they
    /// overlap ([`held_at_once`]; when both are held, less the stashed layer inputs of the
    /// micro-batch whose backward moved them into the deferred bytes), plus `weight_copies`
    /// and `backward`.
    pub held: u64,
    /// With replicas, the sums the all-reduce (or ZeRO-1's reduce) makes beside the gradients:
    /// each replica sums the gradients it owns, about 1/R of them, after the step's last
    /// backward has released the activations, so the larger of this and `held` is counted. 0
    /// with one replica. Measured per replica by the bytes it holds (issue 48): 0.99 each of 2
    /// replicas of MLP-4x256 on 16 rows, where the sums outweigh the activations; 0.71 without
    /// this term.
    pub reduced: u64,
}

impl WorkerMemory {
    /// Everything counted: the optimizer state, and the larger of the two halves of a step:
    /// while it computes, the parameters and the activations held
    /// ([`held`](Self::held)); while it makes its weight gradients, the parameters then held
    /// ([`weight_pass_parameters`](Self::weight_pass_parameters)) and the step's bytes
    /// ([`per_step`](Self::per_step)). Below ZeRO-3 the parameters are whole in both, and the
    /// second is the larger.
    pub fn total(&self) -> u64 {
        let computing = self.parameters + self.held;
        let weights = self.weight_pass_parameters + self.per_step();
        self.optimizer_state + computing.max(weights)
    }

    /// What a step holds beyond the parameters and the optimizer state: the gradients, and the
    /// larger of the activations held at once ([`held`](Self::held)) and the all-reduce's sums
    /// ([`reduced`](Self::reduced)), which are not held together.
    pub fn per_step(&self) -> u64 {
        self.gradients + self.held.max(self.reduced)
    }

    /// What stays allocated between steps: [`resting_parameters`](Self::resting_parameters),
    /// the optimizer state and [`resting_gradients`](Self::resting_gradients). ZeRO-3 lowers
    /// this; the step's peak ([`total`](Self::total)) holds the stage whole.
    pub fn resting(&self) -> u64 {
        self.resting_parameters + self.optimizer_state + self.resting_gradients
    }
}

/// The sums a worker's all-reduce makes beside its `gradients` with `replicas` replicas
/// ([`WorkerMemory::reduced`]).
fn reduced(gradients: u64, replicas: usize) -> u64 {
    match replicas {
        0 | 1 => 0,
        r => gradients.div_ceil(r as u64),
    }
}

/// Activation bytes held at once by a stash and deferred weight-gradient inputs (shared with
/// `pipetrain tune`: [`pipetrain_partitioner::held_at_once`]).
pub use pipetrain_partitioner::held_at_once;

/// Whether a weight-gradient group of `group` micro-batches ([`weight_group`]) waits for the
/// step's last backward: one group of all `m`.
pub(crate) fn deferred_to_end(group: u64, m: usize) -> bool {
    group > 0 && group >= m as u64
}

/// A byte count printed with a binary unit: `512 B`, `1.5 KiB`, `3.25 MiB`, `2.00 GiB`.
///
/// ```
/// use pipetrain::memory::Bytes;
/// assert_eq!(Bytes(512).to_string(), "512 B");
/// assert_eq!(Bytes(3 << 20).to_string(), "3.00 MiB");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.2} {}", UNITS[unit])
    }
}

/// Binary units, largest first (matched case-insensitively, after an optional space).
const PARSE_UNITS: [(&str, u64); 5] = [
    ("tib", 1 << 40),
    ("gib", 1 << 30),
    ("mib", 1 << 20),
    ("kib", 1 << 10),
    ("b", 1),
];

/// Parses a byte size as the command line and config files write it: a positive number of
/// bytes, or a number (decimals allowed) followed by KiB, MiB, GiB or TiB (`--memory-budget
/// 2GiB`, `512MiB`, `1.5GiB`, `1048576`).
///
/// ```
/// use pipetrain::memory::Bytes;
/// assert_eq!("2GiB".parse::<Bytes>(), Ok(Bytes(2 << 30)));
/// assert!("2GB".parse::<Bytes>().is_err()); // ambiguous: the binary units only
/// ```
impl FromStr for Bytes {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let lower = trimmed.to_ascii_lowercase();
        let (number, scale) = PARSE_UNITS
            .iter()
            .find_map(|(unit, scale)| Some((lower.strip_suffix(unit)?.trim_end(), *scale)))
            .unwrap_or((lower.as_str(), 1));
        let invalid = || {
            format!(
                "`{text}` is not a byte size; give bytes (e.g. 1073741824) or a number with KiB, \
                 MiB or GiB (e.g. 2GiB, 512MiB; KB/MB/GB are ambiguous: use the binary units)"
            )
        };
        let bytes = if let Ok(whole) = number.parse::<u64>() {
            whole.checked_mul(scale).ok_or_else(invalid)?
        } else {
            let value: f64 = number.parse().map_err(|_| invalid())?;
            let bytes = value * scale as f64;
            if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
                return Err(invalid());
            }
            bytes.round() as u64
        };
        if bytes == 0 {
            return Err(format!(
                "`{text}` is 0 bytes: no worker can hold a layer; give e.g. 2GiB"
            ));
        }
        Ok(Bytes(bytes))
    }
}

/// Per-layer memory of `layers` computing in `precision`: parameter bytes (the f32 masters),
/// output bytes measured by a forward pass (no autodiff) of `sample`, one micro-batch, through
/// the layers in order, cast as a step casts them, and the cast copy of the weights.
/// Each layer's graph is what it keeps with its `Linear`s as burn runs them (the fused
/// backward's); [`layer_memory_split`] for the split backward's.
pub fn layer_memory<L: Layer>(
    layers: &[L],
    sample: &Activation,
    precision: Precision,
) -> Result<Vec<LayerMemory>> {
    layer_memory_split(layers, sample, precision, false)
}

/// [`layer_memory`], with each layer's graph as the training forward keeps it when `split`,
/// the split backward's, splits the `Linear`s of the layers that say so
/// ([`Layer::splits_linears`]).
pub fn layer_memory_split<L: Layer>(
    layers: &[L],
    sample: &Activation,
    precision: Precision,
    split: bool,
) -> Result<Vec<LayerMemory>> {
    let mut x = precision.input(layers.first(), sample.clone().plain());
    let mut out = Vec::with_capacity(layers.len());
    for (layer, cast) in layers.iter().zip(precision.layers(layers)) {
        let input = x.clone();
        x = cast
            .forward(x)
            .map_err(pipetrain_engine::EngineError::bad_batch)?;
        let parameters = layer.num_params() as u64;
        out.push(LayerMemory {
            parameters: parameters * F32,
            activation: activation_bytes(&x),
            graph: cast.graph_bytes(&input, &x, split && layer.splits_linears()),
            // What the compute copy cast (every parameter by default, a Llama's `Linear`s).
            compute_copy: pipetrain_engine::cast_copy_bytes(&cast),
        });
    }
    Ok(out)
}

/// Bytes of one activation: float values at their dtype's width (4 in fp32, 2 in bf16), token
/// ids (stored as 32-bit or wider) at 4.
pub(crate) fn activation_bytes(a: &Activation) -> u64 {
    a.held_bytes()
}

/// Each layer's deferred weight-gradient bytes per micro-batch
/// ([`costs::split_bytes`](pipetrain_engine::costs::split_bytes)) when `sample` is one
/// micro-batch of its input. A dense first layer's input, rows of the caller's batch, is
/// counted too: the engine allocates it (without it a 1-stage step read 0.90 of the
/// measurement and a run under `--memory-budget` 1.12 of its budget).
pub(crate) fn split_bytes_held<L: Layer>(
    layers: &[L],
    sample: &Activation,
    device: &Device,
) -> Result<Vec<u64>> {
    pipetrain_engine::costs::split_bytes(layers, sample, device)
        .map_err(|e| pipetrain_engine::EngineError::bad_batch(e).into())
}

/// What [`per_stage`] measures of one stage.
struct StageMemory {
    /// Each layer's.
    layers: Vec<LayerMemory>,
    /// Per micro-batch, the most `W` stacks of one of its layers ([`Deferral::copies`]).
    stacked: u64,
    /// Per micro-batch, the deferred bytes that are the layers' inputs (the stashed outputs of
    /// the layers before).
    inputs: u64,
    /// Per micro-batch, what burn's autodiff graph keeps beyond the layers' outputs when they
    /// run on it (the fused backward, bf16): a dense layer's output before its ReLU, which
    /// the ReLU's backward keeps beside the output the next product keeps.
    pre_relu: u64,
    /// The stage's input for one micro-batch, as each stashed micro-batch keeps it: 0 on stage
    /// 0, whose input is rows of the caller's batch (a view), unless the stage casts it (bf16:
    /// its copy in the compute dtype); a received copy on the others.
    input: u64,
    /// Per micro-batch, on burn's autodiff path, the gradients a backward holds as they flow
    /// ([`WorkerMemory::backward`]); 0 with the split backward.
    backward: u64,
}

/// Replica 0's layers, stage by stage: `sample` (one micro-batch) is forwarded through them
/// (each stage's input is the previous stage's output, moved to that stage's device) to
/// measure every layer's output and, with `split`, from the bytes each layer's split backward
/// defers per micro-batch ([`costs::split_parts`](pipetrain_engine::costs::split_parts)), the
/// most `W` stacks of one of them.
fn per_stage<L: Layer>(
    workers: &Workers<L>,
    sample: &Activation,
    devices: &[Device],
    precision: Precision,
    split: bool,
) -> Result<Vec<StageMemory>> {
    let mut per_stage = Vec::new();
    let mut x = sample.clone();
    for (stage, worker) in workers.replica(ReplicaId(0)).enumerate() {
        let layers: Vec<L> = workers
            .whole_layers(worker)
            .iter()
            .map(pipetrain_engine::inference_copy)
            .collect();
        let arrived = x.to_device(&devices[stage]);
        let as_arrived = activation_bytes(&arrived.clone().plain());
        x = precision.input(layers.first(), arrived);
        let input = activation_bytes(&x.clone().plain());
        // Stage 0's input is rows of the caller's batch (a view), unless the stage casts it
        // (bf16): then each stashed micro-batch keeps its cast copy.
        let input = match stage == 0 && input == as_arrived {
            true => 0,
            false => input,
        };
        let held = layer_memory_split(&layers, &x, precision, split)?;
        let pre_relu = match split {
            true => 0,
            false => relu_layers(&layers)
                .into_iter()
                .zip(&held)
                .filter(|(relu, _)| *relu)
                .map(|(_, m)| m.activation)
                .sum(),
        };
        let (stacked, inputs) = match split {
            true => {
                let parts = pipetrain_engine::costs::split_parts(&layers, &x, &devices[stage])
                    .map_err(pipetrain_engine::EngineError::bad_batch)?;
                // W stacks one `Linear` call's inputs, then its output's gradients, at a time.
                let stacked = parts.iter().map(|p| p.stack).max().unwrap_or(0);
                let inputs = parts
                    .iter()
                    .zip(&held)
                    .map(|(p, l)| p.held.saturating_sub(l.activation))
                    .sum::<u64>();
                (stacked, inputs)
            }
            false => (0, 0),
        };
        // The largest layer's output gradient and the input gradient it makes, in fp32.
        let mut backward = 0u64;
        for layer in &precision.layers(&layers) {
            let input = x.elements() as u64;
            x = layer
                .forward(x)
                .map_err(pipetrain_engine::EngineError::bad_batch)?;
            backward = backward.max((input + x.elements() as u64) * F32);
        }
        let backward = if split { 0 } else { backward };
        per_stage.push(StageMemory {
            layers: held,
            stacked,
            inputs,
            pre_relu,
            input,
            backward,
        });
    }
    Ok(per_stage)
}

/// How a step defers its weight gradients: micro-batches per group ([`weight_group`]; 0 for
/// the fused backward) of the step's `micro_batches`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deferral {
    pub group: u64,
    pub micro_batches: usize,
}

impl Deferral {
    fn to_end(self) -> bool {
        deferred_to_end(self.group, self.micro_batches)
    }

    /// The copies `W` makes of one layer's group ([`WorkerMemory::weight_copies`]): it stacks
    /// the group's inputs into one tensor, frees them, then stacks their output gradients, so
    /// one copy of the larger of the two is held beyond the deferred bytes: `stacked` (that
    /// larger one per micro-batch, of the stage's largest layer) times the group. Nothing for
    /// a group of one micro-batch, which `W` uses as it is.
    fn copies(self, stacked: u64) -> u64 {
        pipetrain_partitioner::weight_copies(stacked, self.group)
    }
}

/// Each worker's memory at the peak of `report`'s step, replica-major: `sample` (one
/// micro-batch) is forwarded stage by stage through replica 0's layers to measure every
/// layer's output; the optimizer state is each worker's own serialized size.
pub(crate) fn of_workers<L: Layer>(
    workers: &Workers<L>,
    sample: &Activation,
    devices: &[Device],
    (remat, precision, deferral): (Remat, Precision, Deferral),
    report: &StepReport,
) -> Result<Vec<WorkerMemory>> {
    let per_stage = per_stage(workers, sample, devices, precision, deferral.group > 0)?;
    Ok(workers
        .iter()
        .map(|w| {
            let stage = &per_stage[w.id().stage.index()];
            let held = &stage.layers;
            let parameters: u64 = held.iter().map(|l| l.parameters).sum();
            let reported = report.workers.iter().find(|r| r.worker == w.id());
            let stashed = reported.map_or(0, |r| r.peak_stash);
            let charged = charged_micro_batches(remat, stashed).min(stashed as u64);
            let stash = stash_bytes(stage, charged, stashed as u64);
            let deferred = reported.map_or(0, |r| r.peak_deferred_bytes as u64);
            let weight_copies = deferral.copies(stage.stacked);
            // ZeRO-2/3: the share this replica owns (of the values, between steps at level 3;
            // of the gradients, between accumulation steps).
            let owned = w
                .owned_parameter_bytes()
                .map_or(parameters, |(owned, _)| owned);
            WorkerMemory {
                worker: w.id(),
                parameters,
                gradients: parameters,
                optimizer_state: w.optimizer_state_bytes() as u64,
                resting_parameters: if w.is_sharded() { owned } else { parameters },
                weight_pass_parameters: match w.is_sharded() && deferral.to_end() {
                    true => owned,
                    false => parameters,
                },
                resting_gradients: match w.pending_micro_batches() {
                    0 => 0,
                    _ => owned,
                },
                stashed_micro_batches: stashed,
                stash,
                deferred,
                weight_copies,
                backward: stage.backward,
                held: held_at_once(stash, deferred, deferral.to_end())
                    - overlap(stage, deferral).min(stash).min(deferred)
                    + weight_copies
                    + stage.backward,
                reduced: reduced(parameters, workers.world().replicas()),
            }
        })
        .collect())
}

/// What [`predicted`] models a step with.
pub(crate) struct Model<'a> {
    pub remat: Remat,
    pub precision: Precision,
    /// Parameter-sized optimizer-state slots ([`optimizer_slots`]).
    pub slots: u64,
    /// The ZeRO level.
    pub zero: Zero,
    /// Replicas of each stage: from ZeRO-1 on, each worker is charged an even share of the
    /// optimizer state, rounded up (the shards follow tensor bounds, so about that), and its
    /// owned share of the gradients and parameters ([`WorkerMemory::resting_parameters`]).
    pub replicas: usize,
    /// Batches per optimizer step (`--accumulate`).
    pub accumulation: usize,
    /// Per stage: the most micro-batches the plan stashes at once.
    pub peak_stash: &'a [usize],
    /// Per stage: the deferred weight-gradient bytes of a group ([`deferred_bytes`], summed).
    pub deferred: &'a [u64],
    /// The weight-gradient groups.
    pub deferral: Deferral,
}

/// Each worker's memory at the peak of a step, predicted before any step, replica-major:
/// parameters and gradients from the layers, the optimizer state from its slots (its share
/// under ZeRO-1), the stash from the plan's peak and, with a `sample`, every layer's output
/// measured on it (as [`of_workers`]); without one the stash and the deferred bytes are 0.
pub(crate) fn predicted<L: Layer>(
    workers: &Workers<L>,
    sample: Option<&Activation>,
    devices: &[Device],
    model: &Model<'_>,
) -> Result<Vec<WorkerMemory>> {
    let measured = sample
        .map(|sample| {
            let split = model.deferral.group > 0;
            per_stage(workers, sample, devices, model.precision, split)
        })
        .transpose()?;
    Ok(workers
        .iter()
        .map(|w| {
            let stage = w.id().stage.index();
            let parameters = w.layers().iter().map(|l| l.num_params() as u64 * F32).sum();
            let state = parameters * model.slots;
            let replicas = model.replicas.max(1);
            let sharded = model.zero.shards_optimizer_state() && replicas > 1;
            let owned = match sharded {
                true => owned_parameter_bytes(w.layers(), replicas, w.id().replica.index()),
                false => parameters,
            };
            let resting_parameters = match model.zero.shards_parameters() {
                true => owned,
                false => parameters,
            };
            let resting_gradients = match (model.accumulation > 1, model.zero.shards_gradients()) {
                (false, _) => 0,
                (true, true) => owned,
                (true, false) => parameters,
            };
            let stashed = model.peak_stash.get(stage).copied().unwrap_or(0);
            let charged = charged_micro_batches(model.remat, stashed).min(stashed as u64);
            let measured = measured.as_ref().map(|m| &m[stage]);
            let stash = measured.map_or(0, |m| stash_bytes(m, charged, stashed as u64));
            let deferred = measured.map_or(0, |_| model.deferred.get(stage).copied().unwrap_or(0));
            let weight_copies = measured.map_or(0, |m| model.deferral.copies(m.stacked));
            let to_end = model.deferral.to_end();
            WorkerMemory {
                worker: w.id(),
                parameters,
                gradients: parameters,
                optimizer_state: match sharded {
                    true => state.div_ceil(replicas as u64),
                    false => state,
                },
                resting_parameters,
                weight_pass_parameters: match model.zero.shards_parameters() && to_end {
                    true => owned,
                    false => parameters,
                },
                resting_gradients,
                stashed_micro_batches: stashed,
                stash,
                deferred,
                weight_copies,
                backward: measured.map_or(0, |m| m.backward),
                held: held_at_once(stash, deferred, to_end)
                    - measured.map_or(0, |m| overlap(m, model.deferral).min(stash).min(deferred))
                    + weight_copies
                    + measured.map_or(0, |m| m.backward),
                reduced: reduced(parameters, workers.world().replicas()),
            }
        })
        .collect())
}

/// Keeps `W`'s copies ([`WorkerMemory::weight_copies`]) on one worker of each pipeline rank
/// (`rank_of` a stage; the stage itself where the plan places none): a rank's stages take
/// turns, so one stage's weight-gradient pass runs at a time and its copies are freed before
/// the next one's. The stage with the most keeps them; the others' `held` drops them
/// (interleaved 1F1B v 2 read 1.28 of the measured step with every chunk's counted).
pub(crate) fn one_weight_pass_per_rank(
    workers: &mut [WorkerMemory],
    rank_of: impl Fn(pipetrain_schedules::StageId) -> Option<usize>,
) {
    let key = |w: &WorkerMemory| (w.worker.replica, rank_of(w.worker.stage));
    for i in 0..workers.len() {
        let first_largest = workers
            .iter()
            .enumerate()
            .filter(|(_, w)| rank_of(w.worker.stage).is_some() && key(w) == key(&workers[i]))
            .max_by_key(|(j, w)| (w.weight_copies, std::cmp::Reverse(*j)))
            .map(|(j, _)| j);
        if first_largest.is_some_and(|j| j != i) {
            let w = &mut workers[i];
            w.held -= w.weight_copies;
            w.weight_copies = 0;
        }
    }
}

/// What [`held_at_once`] counts twice when it adds the stash and the deferred bytes (groups that
/// do not wait for the step's end): the micro-batch whose backward is running has moved its
/// stashed layer inputs into the deferred ones. One micro-batch's deferred inputs; nothing
/// when the larger of the two is taken.
fn overlap(stage: &StageMemory, deferral: Deferral) -> u64 {
    match deferral.group > 0 && !deferral.to_end() {
        true => stage.inputs,
        false => 0,
    }
}

/// A stage's stash: `charged` micro-batches of every layer's output ([`charged_micro_batches`])
/// and the stage's input for each of the `stashed` micro-batches in flight.
fn stash_bytes(stage: &StageMemory, charged: u64, stashed: u64) -> u64 {
    let outputs: u64 = stage.layers.iter().map(|l| l.stashed() * charged).sum();
    outputs
        .saturating_add(stage.pre_relu.saturating_mul(charged))
        .saturating_add(stage.input.saturating_mul(stashed))
}

/// Which of `layers` are dense layers followed by a ReLU ([`pipetrain_engine::Dense`]).
pub(crate) fn relu_layers<L: Layer>(layers: &[L]) -> Vec<bool> {
    layers
        .iter()
        .map(|l| {
            l.dense()
                .is_some_and(|d| d.activation() == pipetrain_engine::DenseActivation::Relu)
        })
        .collect()
}

/// Micro-batches whose outputs each layer is charged for (see the module docs).
pub(crate) fn charged_micro_batches(remat: Remat, in_flight: usize) -> u64 {
    match remat {
        Remat::Never => in_flight as u64,
        Remat::ExceptLast | Remat::Always => 1,
    }
}

/// `costs` (from the profiling pass, per layer: parameter bytes, what its training forward
/// keeps in the autodiff graph, [`Layer::graph_bytes`], and its output's bytes) with their
/// memory replaced by the whole per-layer accounting, as the partitioner's budget compares it:
/// `deferred[i]` (see [`deferred_bytes`]) and layer i's stash, its graph, held at once as
/// [`held_at_once`] (`to_end`: the step's weight gradients wait for its end,
/// [`deferred_to_end`]). The profile measures in fp32; under bf16 the graph is charged at the
/// activations' width (half), plus the weights' bf16 copy per stashed micro-batch. That halving
/// is exact for a layer whose kept values are all at the compute width (an MLP's, whose graph is
/// its output) and approximates the others from below: a GPT's norms and softmax and a Llama's
/// residual stream, norms, rotary embedding, gate and softmax keep fp32 values under bf16
/// ([`layer_memory`] states each at its width). The graph is the one with the `Linear`s as
/// burn runs them: under the split backward a split `Linear` without a bias also keeps a zeros
/// leaf of its output's size ([`pipetrain_engine::saved::split_leaf`]), not charged here. What depends on where the stages are cut, `W`'s copies of a stage's
/// largest layer ([`WorkerMemory::weight_copies`]) and each stage's received inputs, is the
/// budget's per-stage term ([`CutBytes`]), not these per-layer sums; where they add the stash
/// and the deferred bytes, the one micro-batch's layer inputs are counted in both. A
/// dense ReLU layer (`relu[i]`, [`relu_layers`]) that defers nothing runs on burn's autodiff
/// path, whose graph also keeps its output before the ReLU: twice its output per stashed
/// micro-batch. `sharers` replicas share each stage's optimizer state (ZeRO-1 and up), and
/// `holders` its values while the weight gradients are made (ZeRO-3 with the weight gradients
/// at the step's end: [`WorkerMemory::weight_pass_parameters`]); 1 where each replica holds all.
pub(crate) fn budget_costs(
    costs: &[LayerCost],
    (slots, sharers, holders): (u64, u64, u64),
    stashed: u64,
    (deferred, to_end): (&[u64], bool),
    precision: Precision,
    relu: &[bool],
) -> Vec<LayerCost> {
    let width = precision.activation_bytes() as u64;
    let copy = precision.compute_copy_bytes() as u64;
    costs
        .iter()
        .zip(deferred)
        .zip(relu.iter().chain(std::iter::repeat(&false)))
        .map(|((c, &d), &relu)| {
            let graph = c.activation_bytes * width / F32;
            let pre_relu = if relu && d == 0 {
                c.output_bytes * width / F32
            } else {
                0
            };
            let held = graph + pre_relu + c.param_bytes / F32 * copy;
            // Under ZeRO each of the stage's `sharers` replicas holds its share of the
            // optimizer state.
            let state = c.param_bytes.saturating_mul(slots).div_ceil(sharers.max(1));
            // The gradients, and the values held beside them.
            let values = c.param_bytes.div_ceil(holders.max(1));
            c.with_memory(
                c.param_bytes.saturating_add(values).saturating_add(state),
                held_at_once(held.saturating_mul(stashed), d, to_end),
            )
        })
        .collect()
}

/// [`budget_costs`] with the budget's headroom ([`with_headroom`]) on each layer's memory.
pub(crate) fn with_headrooms(costs: Vec<LayerCost>) -> Vec<LayerCost> {
    costs
        .into_iter()
        .map(|c| {
            let (params, held) = (c.param_bytes, c.activation_bytes);
            c.with_memory(with_headroom(params), with_headroom(held))
        })
        .collect()
}

/// The budget's per-stage term ([`pipetrain_partitioner::CutBytes`], shared with `pipetrain
/// tune`): what a stage holds beyond its layers' per-layer sums ([`budget_costs`]), which
/// depends on where it is cut, its received inputs for each of the `in_flight` micro-batches
/// and `W`'s copies ([`WorkerMemory::weight_copies`]) of its largest layer over a
/// weight-gradient group of `group`. From the profile's `costs` (their
/// [`output_bytes`](LayerCost::output_bytes), measured in fp32, charged at `precision`'s
/// width: a layer that keeps its input's dtype, the Llama's, sends fp32 under bf16, which this
/// charges half) and each layer's `W` stack per micro-batch (`stacked`:
/// [`SplitBytes::stack`](pipetrain_engine::costs::SplitBytes::stack); empty or zeros without a
/// split backward).
pub(crate) fn cut_bytes(
    costs: &[LayerCost],
    stacked: &[u64],
    precision: Precision,
    in_flight: usize,
    group: u64,
) -> CutBytes {
    let width = precision.activation_bytes() as u64;
    let outputs = costs.iter().map(|c| c.output_bytes * width / F32).collect();
    CutBytes::new(outputs, stacked, in_flight, group)
}

/// Bytes each layer holds for deferred weight gradients with the split backward: what its split
/// keeps for one micro-batch (`split`, from
/// [`costs::split_bytes`](pipetrain_engine::costs::split_bytes): a dense layer's input and
/// pre-activation gradient, the input and output gradient of each split `Linear` call) for each
/// of the `group` micro-batches of a weight-gradient group; nothing with `group` 0 (fused
/// backward).
pub(crate) fn deferred_bytes(split: &[u64], group: u64) -> Vec<u64> {
    split.iter().map(|b| b.saturating_mul(group)).collect()
}

/// Micro-batches of a weight-gradient group under `backward` with `m` micro-batches per step;
/// 0 for the fused backward, and in a precision whose layers stay on the autodiff path
/// ([`Precision::splits_by_hand`]: bf16). A schedule that places its `W`s (`places_weights`)
/// computes each at its place unless a group is given.
pub(crate) fn weight_group(
    backward: Backward,
    precision: Precision,
    m: usize,
    places_weights: bool,
) -> u64 {
    if !precision.splits_by_hand() {
        return 0;
    }
    match backward {
        Backward::Fused => 0,
        Backward::Split { weight_group: 0 } if places_weights => 1,
        Backward::Split { weight_group: 0 } => m as u64,
        Backward::Split { weight_group } => weight_group.min(m) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_pick_the_largest_unit_below() {
        assert_eq!(Bytes(0).to_string(), "0 B");
        assert_eq!(Bytes(1023).to_string(), "1023 B");
        assert_eq!(Bytes(1536).to_string(), "1.50 KiB");
        assert_eq!(Bytes(2 << 30).to_string(), "2.00 GiB");
    }

    #[test]
    fn a_layer_holds_weights_gradients_state_and_stash() {
        let layer = LayerMemory {
            parameters: 100,
            activation: 10,
            graph: 10,
            compute_copy: 0,
        };
        assert_eq!(layer.total(0, 0), 200);
        assert_eq!(layer.total(2, 3), 430);
        // bf16: a 50-byte copy of the 25 parameters per stashed micro-batch.
        let bf16 = LayerMemory {
            compute_copy: 50,
            ..layer
        };
        assert_eq!(bf16.total(2, 3), 430 + 150);
        // 7 bytes of deferred weight-gradient inputs on top.
        let cost = [LayerCost::new(1.0, 2.0).with_memory(100, 10)];
        let costs = budget_costs(&cost, (2, 1, 1), 3, (&[7], false), Precision::Fp32, &[]);
        assert_eq!(costs[0].memory(), 437);
        // Deferred to the step's end: the larger of the stash and the deferred bytes.
        let costs = budget_costs(&cost, (2, 1, 1), 3, (&[70], true), Precision::Fp32, &[]);
        assert_eq!(costs[0].memory(), 400 + 70);
        let costs = budget_costs(&cost, (2, 1, 1), 3, (&[7], true), Precision::Fp32, &[]);
        assert_eq!(costs[0].memory(), 430);
        // bf16: the output at half (5), plus 2 bytes for each of the 25 parameters, per stashed
        // micro-batch.
        let costs = budget_costs(&cost, (2, 1, 1), 3, (&[7], false), Precision::Bf16, &[]);
        assert_eq!(costs[0].memory(), 400 + 3 * (5 + 50) + 7);
        assert_eq!((costs[0].forward, costs[0].backward), (1.0, 2.0));
        // A layer whose graph keeps more than its output (30 bytes against 10): its graph per
        // stashed micro-batch; a dense ReLU layer on the autodiff path its output before the
        // ReLU beside, at its output's size.
        let kept = [LayerCost::new(1.0, 2.0)
            .with_memory(100, 30)
            .with_output(10)];
        let costs = budget_costs(&kept, (2, 1, 1), 3, (&[0], false), Precision::Fp32, &[]);
        assert_eq!(costs[0].memory(), 400 + 3 * 30);
        let costs = budget_costs(&kept, (2, 1, 1), 3, (&[0], false), Precision::Fp32, &[true]);
        assert_eq!(costs[0].memory(), 400 + 3 * (30 + 10));
    }

    #[test]
    fn remat_charges_one_micro_batch() {
        assert_eq!(charged_micro_batches(Remat::Never, 8), 8);
        assert_eq!(charged_micro_batches(Remat::Always, 8), 1);
        assert_eq!(charged_micro_batches(Remat::ExceptLast, 8), 1);
    }
}

#[cfg(test)]
mod parse_tests {
    use super::Bytes;

    fn parse_bytes(text: &str) -> Result<u64, String> {
        text.parse::<Bytes>().map(|b| b.0)
    }

    #[test]
    fn plain_bytes_and_binary_units() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("64kib"), Ok(64 << 10));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("100B"), Ok(100));
    }

    #[test]
    fn bad_sizes_name_the_text_and_the_remedy() {
        for bad in ["", "GiB", "2GB", "-1MiB", "two", "1e400"] {
            let err = parse_bytes(bad).unwrap_err();
            assert!(
                err.contains(&format!("`{bad}`")) && err.contains("GiB"),
                "{bad}: {err}"
            );
        }
        assert!(parse_bytes("0").unwrap_err().contains("0 bytes"));
        assert!(parse_bytes("99999999999TiB").is_err());
    }
}
