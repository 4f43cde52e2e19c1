//! A worker's state that lives across steps: its layers, optimizer state, device and pool.

use std::sync::Arc;

use burn::prelude::*;
use pipetrain_schedules::WorkerId;
use rayon::ThreadPool;

use crate::adapter::{self, Accumulator, ModuleOptimizer};
use crate::device::handoff::Handoff;
use crate::device::pool;
use crate::model::layer::Layer;
use crate::optim::optimizer::OptimizerConfig;
use crate::optim::zero::ZeroState;

/// One worker's persistent state: stage `id.stage` of replica `id.replica`.
pub struct WorkerState<L: Layer> {
    pub(crate) id: WorkerId,
    pub(crate) layers: Vec<L>,
    pub(crate) optimizer: ModuleOptimizer,
    pub(crate) device: Device,
    pub(crate) pool: Arc<ThreadPool>,
    /// Gradients summed since the last optimizer step: over micro-batches, and over steps when
    /// accumulating (the plan of a non-final accumulation step has no all-reduce and no
    /// optimizer step).
    pub(crate) grads: Accumulator<Vec<L>>,
    /// ZeRO-2/3: the stage's ownership layout and whether its values are sharded now (made by
    /// the first `RG` or `US`, while the layers are whole).
    pub(crate) zero: Option<ZeroState>,
}

impl<L: Layer> WorkerState<L> {
    /// A worker holding `layers` on `device` (an autodiff device is made from it), with a fresh
    /// optimizer state and a pool of `threads` compute threads. Its weights may still share
    /// buffers with another replica's: `own_buffers` gives it its own
    /// where that matters (the runtime's preparation calls it, knowing the hand-off).
    pub fn new(
        id: WorkerId,
        layers: Vec<L>,
        device: &Device,
        optimizer: &OptimizerConfig,
        threads: usize,
    ) -> Self {
        let device = adapter::autodiff_device(device);
        let layers = layers
            .into_iter()
            .map(|l| adapter::trainable(l, &device))
            .collect();
        let name = format!("pipetrain-r{}s{}", id.replica.0, id.stage.0);
        Self {
            id,
            layers,
            optimizer: optimizer.init(),
            device,
            pool: Arc::new(pool::worker_pool(&name, threads)),
            grads: Accumulator::new(),
            zero: None,
        }
    }

    /// Whether this worker must hold its weights in buffers no other replica holds: a replica
    /// other than the first, on a GPU, or on a CPU when `handoff` forces the GPU's copies there
    /// ([`Handoff::DeviceOnCpuToo`], so that CPU tests reach this copy too).
    ///
    /// Replicas built from one model share its buffers until their first optimizer step. On a
    /// GPU the last replica to step could then update a shared weight in place, on its own
    /// stream, while another replica's kernels that read it are still queued on theirs
    /// (`adapter::own_buffers`).
    pub(crate) fn needs_own_buffers(&self, handoff: Handoff) -> bool {
        self.id.replica.0 > 0
            && (!crate::device::is_cpu(&self.device) || handoff == Handoff::DeviceOnCpuToo)
    }

    /// Copies every float parameter of the layers into a buffer of its own
    /// (`adapter::own_buffers`): values, ids and gradient requirements kept.
    pub(crate) fn own_buffers(&mut self) {
        self.layers = std::mem::take(&mut self.layers)
            .into_iter()
            .map(adapter::own_buffers)
            .collect();
    }

    /// Which worker this is.
    pub fn id(&self) -> WorkerId {
        self.id
    }

    /// The stage's layers. Under ZeRO-3 between a step's reshard and the next unshard, the
    /// parameters this replica does not own are empty ([`is_sharded`](Self::is_sharded)):
    /// [`Workers::model`](crate::Workers::model) puts a whole stage together.
    pub fn layers(&self) -> &[L] {
        &self.layers
    }

    /// Whether the layers hold only the parameters this replica owns (ZeRO-3, between steps).
    pub fn is_sharded(&self) -> bool {
        self.zero.as_ref().is_some_and(ZeroState::is_sharded)
    }

    /// Bytes (f32) of this stage's trainable parameters that this replica owns under ZeRO-2/3,
    /// and of all of them; `None` before the first ZeRO-2/3 step.
    pub fn owned_parameter_bytes(&self) -> Option<(u64, u64)> {
        let zero = self.zero.as_ref()?;
        Some(zero.layout().owned_bytes(self.id.replica.0 as usize))
    }

    /// Replaces the layers (moved to this worker's device, in training mode) and drops any
    /// accumulated gradients; the optimizer state is kept (see [`crate::checkpoint`]).
    pub fn set_layers(&mut self, layers: Vec<L>) {
        self.layers = layers
            .into_iter()
            .map(|l| adapter::trainable(l, &self.device))
            .collect();
        self.grads = Accumulator::new();
        self.zero = None;
    }

    /// Gives the layers back.
    pub fn into_layers(self) -> Vec<L> {
        self.layers
    }

    /// The device the stage computes on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes of optimizer state this worker holds (serialized size: e.g. Adam's two moments for
    /// each parameter it updates; with ZeRO-1 only its own share).
    pub fn optimizer_state_bytes(&self) -> usize {
        adapter::optimizer_state_bytes(&self.optimizer)
    }

    /// Micro-batches whose gradients are accumulated and not yet applied.
    pub fn pending_micro_batches(&self) -> usize {
        self.grads.micro_batches()
    }

    /// Threads in the worker's compute pool.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}
