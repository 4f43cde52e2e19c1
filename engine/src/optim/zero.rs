//! ZeRO: a stage's training state sharded across its replicas (levels in
//! [`pipetrain_schedules::Zero`]).
//!
//! Each trainable parameter has one owner replica (balanced by size, deterministic: see
//! `adapter::assign_owners`), a function of the stage's module alone, fixed while its values are
//! whole ([`Layout`]). The owner keeps the parameter's summed gradient and its optimizer state
//! (levels 1–3) and, at level 3, its value between the stage's computations.
//!
//! - **Level 1** ([`Sharded`]): the gradients are *reduced* rather than all-reduced (each owner
//!   gets the sums of its parameters), each replica steps only what it owns, and the owners then
//!   broadcast the updated values.
//! - **Levels 2 and 3** ([`ZeroState`]): the plan's `RG` reduces the gradients to their owners
//!   as soon as the stage's last weight gradient is done; the others drop theirs, and between
//!   accumulation steps each replica keeps only its shard. `US` hands each owner's value to every
//!   replica (an all-gather); at level 3 `RS` drops the values a replica does not own.
//!
//! Every sum is the same as plain data parallelism's, in the same rank order: one optimizer step
//! at any level is bitwise that of level 0. Accumulation steps are the exception at levels 2–3:
//! the owner adds each step's reduced sum to its shard (Σ_steps Σ_replicas) where level 0 sums
//! each replica's steps first (Σ_replicas Σ_steps), so the last bits may differ.

use burn::prelude::*;

use crate::adapter::{Grads, Slots};
use crate::comm::collective::Collective;
use crate::error::EngineError;

/// Who owns which of a stage's parameters, for one step.
pub(crate) struct Sharded {
    slots: Slots,
    /// Owner replica of each slot.
    owners: Vec<usize>,
}

impl Sharded {
    /// Reduces `tensors` (the stage's gradients, laid out by `slots`) so that each replica holds
    /// the sums of the parameters it owns; the others' gradients are left out, so the optimizer
    /// leaves those parameters (and their state) alone.
    pub(crate) fn reduce<M: Module>(
        module: &M,
        slots: Slots,
        tensors: Vec<Tensor<1>>,
        collective: &mut dyn Collective,
    ) -> Result<(Grads, Sharded), EngineError> {
        let owners = slots.owners(module, collective.size());
        let reduced = collective.reduce_tensors(tensors, &owners)?;
        let grads = slots.grads(module, reduced);
        Ok((grads, Sharded { slots, owners }))
    }

    /// After the optimizer step: every owner broadcasts its updated parameters, and each replica
    /// takes the values it does not own, bucket by bucket ([`gather`]).
    pub(crate) fn exchange<M: Module>(
        self,
        module: M,
        collective: &mut dyn Collective,
        device: &Device,
        bucket_elems: usize,
    ) -> Result<M, EngineError> {
        let me = collective.rank();
        let mine: Vec<bool> = self.owners.iter().map(|&o| o == me).collect();
        let values = self.slots.params(&module, &mine);
        let all = gather(
            &self.slots,
            values,
            &self.owners,
            collective,
            device,
            bucket_elems,
        )?;
        let theirs: Vec<bool> = mine.iter().map(|m| !m).collect();
        Ok(self.slots.load_params(module, all, &theirs))
    }
}

/// Every entry's value on every replica, each from its owner (`values` holds this replica's
/// own, `None` elsewhere), gathered in buckets of at most `bucket_elems` values (an entry
/// larger than a bucket is one of its own), so that a collective that gathers through one flat
/// buffer (MPI's) holds one bucket's at a time, not the stage's.
fn gather(
    slots: &Slots,
    values: Vec<Option<Tensor<1>>>,
    owners: &[usize],
    collective: &mut dyn Collective,
    device: &Device,
    bucket_elems: usize,
) -> Result<Vec<Tensor<1>>, EngineError> {
    let sizes = slots.sizes();
    let mut values = values.into_iter();
    let mut all = Vec::with_capacity(sizes.len());
    for bucket in slots.buckets(bucket_elems) {
        let part: Vec<Option<Tensor<1>>> = values.by_ref().take(bucket.len()).collect();
        all.extend(collective.broadcast_tensors(
            part,
            &owners[bucket.clone()],
            &sizes[bucket],
            device,
        )?);
    }
    Ok(all)
}

/// The ownership of a stage's trainable parameters among its replicas, taken while the values
/// are whole: every entry's full shape and owner.
pub(crate) struct Layout {
    slots: Slots,
    owners: Vec<usize>,
}

impl Layout {
    /// The layout of `module`'s trainable parameters among `replicas` (the owners ZeRO-1 and the
    /// checkpoint's optimizer state use: `adapter::owners_of`).
    pub(crate) fn of<M: Module>(module: &M, replicas: usize) -> Self {
        let slots = Slots::of_params(module);
        let owners = slots.owners(module, replicas);
        Self { slots, owners }
    }

    /// Whether this replica (`rank`) owns each entry.
    fn mine(&self, rank: usize) -> Vec<bool> {
        self.owners.iter().map(|&o| o == rank).collect()
    }

    /// Bytes (f32) of the parameters replica `rank` owns, and of all of them.
    pub(crate) fn owned_bytes(&self, rank: usize) -> (u64, u64) {
        let owned = self.slots.f32_bytes(|i| self.owners[i] == rank);
        (owned, self.slots.f32_bytes(|_| true))
    }
}

/// Bytes (f32) of the trainable parameters of `layers` (one stage, as a worker holds them:
/// [`trainable`](crate::trainable)) that replica `replica` of `replicas` owns under ZeRO: the
/// share of the gradients (levels 2–3) and of the values (level 3) it keeps.
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::prelude::*;
/// use pipetrain_engine::trainable;
/// let device = Device::flex();
/// let big = trainable(LinearConfig::new(8, 8).init(&device), &device); // 64 + 8 values
/// let small = trainable(LinearConfig::new(2, 2).init(&device), &device); // 4 + 2
/// let layers = vec![big, small];
/// let owned: Vec<u64> = (0..2).map(|r| pipetrain_engine::owned_parameter_bytes(&layers, 2, r)).collect();
/// // Whole tensors, largest first to the least loaded: 64 to replica 0, the rest to 1.
/// assert_eq!(owned, vec![64 * 4, (8 + 4 + 2) * 4]);
/// ```
pub fn owned_parameter_bytes<M: Module>(layers: &[M], replicas: usize, replica: usize) -> u64 {
    Layout::of(&layers.to_vec(), replicas)
        .owned_bytes(replica)
        .0
}

/// A worker's ZeRO-2/3 state: the stage's layout, and whether its values are sharded now.
pub(crate) struct ZeroState {
    layout: Layout,
    /// Level 3, between an `RS` and the next `US`: the values this replica does not own are
    /// dropped.
    sharded: bool,
}

impl ZeroState {
    /// The state of a stage whose values are whole in `module`, among `replicas`.
    pub(crate) fn new<M: Module>(module: &M, replicas: usize) -> Self {
        Self {
            layout: Layout::of(module, replicas),
            sharded: false,
        }
    }

    /// Whether the values this replica does not own are dropped now.
    pub(crate) fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// The layout.
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// `RG`: `grads` (this replica's, of `module`) summed over the replicas, each sum kept by
    /// its owner only. Entries no replica has a gradient for stay out.
    pub(crate) fn reduce<M: Module>(
        &self,
        module: &M,
        grads: Grads,
        collective: &mut dyn Collective,
    ) -> Result<Grads, EngineError> {
        let (slots, tensors) = Slots::of_grads(module, &grads);
        // The tensors are the gradients' only holders now: the reduce frees each as it goes.
        drop(grads);
        let owners: Vec<usize> = (0..tensors.len())
            .map(|i| {
                let id = slots.id(i);
                self.layout
                    .slots
                    .position(id)
                    .map_or(0, |e| self.layout.owners[e])
            })
            .collect();
        let reduced = collective.reduce_tensors(tensors, &owners)?;
        Ok(slots.grads(module, reduced))
    }

    /// `US`: every replica takes each parameter's value from its owner (an all-gather, in
    /// buckets of at most `bucket_elems` values); the module is whole afterwards.
    pub(crate) fn unshard<M: Module>(
        &mut self,
        module: M,
        collective: &mut dyn Collective,
        device: &Device,
        bucket_elems: usize,
    ) -> Result<M, EngineError> {
        let slots = &self.layout.slots;
        let mine = self.layout.mine(collective.rank());
        let values = slots.params(&module, &mine);
        let owners = &self.layout.owners;
        let all = gather(slots, values, owners, collective, device, bucket_elems)?;
        let theirs: Vec<bool> = mine.iter().map(|m| !m).collect();
        self.sharded = false;
        Ok(slots.load_params(module, all, &theirs))
    }

    /// `RS`: the values replica `rank` does not own are dropped.
    pub(crate) fn reshard<M: Module>(&mut self, module: M, rank: usize) -> M {
        let theirs: Vec<bool> = self.layout.mine(rank).iter().map(|m| !m).collect();
        self.sharded = true;
        self.layout.slots.drop_params(module, &theirs)
    }

    /// `module` (this replica's, sharded) with the values of the parameters `owner`'s module
    /// (replica `owner_rank`'s) owns put back: how a process that runs every replica rebuilds a
    /// whole stage without a collective.
    pub(crate) fn fill_from<M: Module>(&self, module: M, owner: &M, owner_rank: usize) -> M {
        let select = self.layout.mine(owner_rank);
        let values = self.layout.slots.params(owner, &select);
        self.layout.slots.load_some(module, values)
    }
}
