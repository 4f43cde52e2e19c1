//! ZeRO stage 1: the optimizer state of a stage is sharded across its replicas.
//!
//! Each parameter has one owner replica (balanced by size, deterministic: see
//! `adapter::assign_owners`). The gradients are *reduced* rather than all-reduced — each owner
//! gets the sums of its parameters — each replica steps only what it owns (so holds only that
//! optimizer state), and the owners then broadcast the updated values. The result is bitwise
//! that of plain data parallelism: the same sums, in the same rank order, the same updates.

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
    /// takes the values it does not own.
    pub(crate) fn exchange<M: Module>(
        self,
        module: M,
        collective: &mut dyn Collective,
        device: &Device,
    ) -> Result<M, EngineError> {
        let me = collective.rank();
        let mine: Vec<bool> = self.owners.iter().map(|&o| o == me).collect();
        let values = self.slots.params(&module, &mine);
        let all =
            collective.broadcast_tensors(values, &self.owners, &self.slots.sizes(), device)?;
        let theirs: Vec<bool> = mine.iter().map(|m| !m).collect();
        Ok(self.slots.load_params(module, all, &theirs))
    }
}
