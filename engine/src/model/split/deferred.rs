//! Deferred weight gradients: what each micro-batch's input-gradient pass (`I`) leaves for the
//! weight-gradient pass (`W`) — of the [dense](crate::dense) layers and of the split
//! [`Linear` calls](crate::linears) inside other layers — and the groups of micro-batches whose
//! weight gradients are computed together.
//!
//! Micro-batch `j` belongs to group `j / g` (`g` micro-batches per group, the last group may be
//! smaller). A group's weight gradients are computed when `W` has run for each of its
//! micro-batches, over their rows in micro-batch order: the same groups, the same order, the
//! same bits whatever the schedule.

use std::collections::{BTreeMap, BTreeSet};

use burn::prelude::*;
use pipetrain_schedules::MicroBatchId;

use crate::adapter::LinearParams;

/// Whose weight gradient: a dense layer, or the `call`-th split `Linear` call of a layer's
/// forward (ordered by layer, then call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Owner {
    /// The stage's dense layer of this index.
    Dense { layer: usize },
    /// A `Linear` called inside the stage's layer of this index.
    Linear { layer: usize, call: usize },
}

/// One owner's share of one micro-batch: the input of its product and the gradient of the
/// product's output (for a dense layer: before its activation).
struct Pending {
    owner: Owner,
    params: LinearParams,
    input: Tensor<2>,
    /// `input` is the buffer of the call put before it, counted there.
    shared_input: bool,
    grad: Tensor<2>,
}

impl Pending {
    /// What it adds to the held bytes: its gradient, and its input unless shared.
    fn held_bytes(&self) -> usize {
        let input = if self.shared_input {
            0
        } else {
            bytes(&self.input)
        };
        input + bytes(&self.grad)
    }
}

/// One owner's inputs and gradients over a complete group's micro-batches, in micro-batch
/// order.
pub(crate) struct Weighted {
    /// Where the weight gradients go.
    pub params: LinearParams,
    pub inputs: Vec<Tensor<2>>,
    pub grads: Vec<Tensor<2>>,
}

/// A complete group: per owner (stage order), what its weight gradient needs.
pub(crate) struct Group {
    pub owners: Vec<Weighted>,
}

/// The weight-gradient work waiting for its `W`, with the bytes it holds.
pub(crate) struct Deferred {
    group: usize,
    micro_batches: usize,
    pending: BTreeMap<MicroBatchId, Vec<Pending>>,
    released: BTreeSet<MicroBatchId>,
    bytes: usize,
    peak_bytes: usize,
}

fn bytes(t: &Tensor<2>) -> usize {
    t.dims().iter().product::<usize>() * t.dtype().size()
}

impl Deferred {
    /// Groups of `group` micro-batches (`0` or more than `micro_batches`: one group, the step).
    pub(crate) fn new(group: usize, micro_batches: usize) -> Self {
        let group = if group == 0 {
            micro_batches
        } else {
            group.min(micro_batches)
        };
        Self {
            group: group.max(1),
            micro_batches,
            pending: BTreeMap::new(),
            released: BTreeSet::new(),
            bytes: 0,
            peak_bytes: 0,
        }
    }

    /// Keeps `owner`'s input and output gradient of micro-batch `mb` (`params`: where its weight
    /// gradients go). `shared_input`: the input is the buffer of the call put before it (the
    /// same micro-batch's), held once and so counted once.
    pub(crate) fn put(
        &mut self,
        mb: MicroBatchId,
        owner: Owner,
        params: LinearParams,
        (input, shared_input): (Tensor<2>, bool),
        grad: Tensor<2>,
    ) {
        let pending = Pending {
            owner,
            params,
            input,
            shared_input,
            grad,
        };
        self.bytes += pending.held_bytes();
        self.peak_bytes = self.peak_bytes.max(self.bytes);
        self.pending.entry(mb).or_default().push(pending);
    }

    /// `W` ran for `mb`: its group, if that completes it.
    pub(crate) fn release(&mut self, mb: MicroBatchId) -> Option<Group> {
        self.released.insert(mb);
        let first = mb.index() / self.group * self.group;
        let members: Vec<MicroBatchId> = (first..(first + self.group).min(self.micro_batches))
            .map(MicroBatchId::from)
            .collect();
        if !members.iter().all(|m| self.released.contains(m)) {
            return None;
        }
        let mut by_owner: BTreeMap<Owner, Weighted> = BTreeMap::new();
        for m in members {
            self.released.remove(&m);
            for p in self.pending.remove(&m).unwrap_or_default() {
                self.bytes -= p.held_bytes();
                let entry = by_owner.entry(p.owner).or_insert_with(|| Weighted {
                    params: p.params,
                    inputs: Vec::new(),
                    grads: Vec::new(),
                });
                entry.inputs.push(p.input);
                entry.grads.push(p.grad);
            }
        }
        Some(Group {
            owners: by_owner.into_values().collect(),
        })
    }

    /// The most bytes held at once.
    pub(crate) fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }
}
