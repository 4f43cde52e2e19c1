//! What a [`Runtime`](super::Runtime) runs: the schedule, the step's settings, data
//! parallelism and ties.

use std::sync::Arc;

use pipetrain_schedules::{Schedule, Zero};

use crate::model::loss::Loss;
use crate::optim::tie::Tie;
use crate::worker::remat::Remat;
pub use crate::worker::timing::Timing;

/// How replicas combine their gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataParallel {
    /// Bytes per all-reduce bucket (PyTorch DDP's default: 25 MiB). The gradients of a stage
    /// are reduced bucket by bucket, in a fixed order.
    pub bucket_bytes: usize,
    /// The ZeRO level: what the replicas of each stage shard (optimizer state from 1,
    /// gradients from 2, parameters at 3).
    pub zero: Zero,
    /// Batches whose gradients are summed before one optimizer step (DDP's `no_sync`).
    pub accumulation: usize,
}

impl Default for DataParallel {
    fn default() -> Self {
        Self {
            bucket_bytes: 25 << 20,
            zero: Zero::Off,
            accumulation: 1,
        }
    }
}

/// How a step's backward runs.
///
/// ```
/// use pipetrain_engine::Backward;
/// assert_eq!(Backward::default(), Backward::Split { weight_group: 0 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backward {
    /// One backward (`B`) per micro-batch: autodiff computes input and weight gradients
    /// together, for every layer. A schedule that places split backwards (ZB-H1) runs `B`
    /// where it has `I` (see [`Runtime::fused_stages`](crate::Runtime::fused_stages)).
    Fused,
    /// The [dense](crate::dense) layers run by hand with a split backward: `I` computes the
    /// input gradient at once, `W` the weight gradients, deferred and computed together for
    /// each group of `weight_group` micro-batches (`0`: all of the step's, the fastest; smaller
    /// groups hold fewer inputs and gradients, see
    /// [`WorkerReport::peak_deferred_bytes`](crate::WorkerReport::peak_deferred_bytes)). Other
    /// layers keep the autodiff path; a stage without dense layers keeps `B`.
    ///
    /// Under a schedule that places the `W`s itself (ZB-H1), `weight_group: 0` means 1: each
    /// `W` computes its own micro-batch's weight gradients where the schedule put it.
    Split {
        /// Micro-batches per weight-gradient pass; `0` for all of the step's (1 under a
        /// schedule that places the `W`s).
        weight_group: usize,
    },
}

impl Default for Backward {
    fn default() -> Self {
        Backward::Split { weight_group: 0 }
    }
}

/// What the runtime runs: the schedule, the step's settings and the tied parameters.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// The schedule of every step: generated, or a given compute plan.
    pub schedule: Schedule,
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
    /// Fused or split backward.
    pub backward: Backward,
    /// Non-finite gradient checks and gradient clipping before each optimizer step.
    pub guard: crate::worker::grad_guard::GradGuard,
    /// What the action times measure on an asynchronous device.
    pub timing: Timing,
    /// How tensors cross between worker threads on one GPU (activations, gradients, the
    /// in-process all-reduce's buckets).
    pub handoff: crate::Handoff,
    /// The dtype the layers compute in: fp32, or bf16 with fp32 master weights.
    pub precision: crate::Precision,
    /// When the first steps' compute actions run one at a time, so that autotune tunes every
    /// shape on one thread ([`WarmUp`](crate::WarmUp)).
    pub warm_up: crate::WarmUp,
}
