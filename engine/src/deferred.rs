//! Deferred weight gradients: what each micro-batch's input-gradient pass (`I`) leaves for the
//! weight-gradient pass (`W`) of the [dense](crate::dense) layers, and the groups of micro-batches
//! whose weight gradients are computed together.
//!
//! Micro-batch `j` belongs to group `j / g` (`g` micro-batches per group, the last group may be
//! smaller). A group's weight gradients are computed when `W` has run for each of its
//! micro-batches, over their rows in micro-batch order: the same groups, the same order, the
//! same bits whatever the schedule.

use std::collections::{BTreeMap, BTreeSet};

use burn::prelude::*;
use pipetrain_schedules::MicroBatchId;

/// One dense layer's share of one micro-batch: its input and the gradient before its activation.
struct Pending {
    layer: usize,
    input: Tensor<2>,
    grad: Tensor<2>,
}

/// A complete group: per dense layer (stage order), the inputs and gradients of its
/// micro-batches in micro-batch order.
pub(crate) struct Group {
    pub layers: Vec<(usize, Vec<Tensor<2>>, Vec<Tensor<2>>)>,
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

    /// Keeps dense layer `layer`'s input and pre-activation gradient of micro-batch `mb`.
    pub(crate) fn put(
        &mut self,
        mb: MicroBatchId,
        layer: usize,
        input: Tensor<2>,
        grad: Tensor<2>,
    ) {
        self.bytes += bytes(&input) + bytes(&grad);
        self.peak_bytes = self.peak_bytes.max(self.bytes);
        self.pending
            .entry(mb)
            .or_default()
            .push(Pending { layer, input, grad });
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
        let mut by_layer: BTreeMap<usize, (Vec<Tensor<2>>, Vec<Tensor<2>>)> = BTreeMap::new();
        for m in members {
            self.released.remove(&m);
            for p in self.pending.remove(&m).unwrap_or_default() {
                self.bytes -= bytes(&p.input) + bytes(&p.grad);
                let entry = by_layer.entry(p.layer).or_default();
                entry.0.push(p.input);
                entry.1.push(p.grad);
            }
        }
        Some(Group {
            layers: by_layer
                .into_iter()
                .map(|(layer, (inputs, grads))| (layer, inputs, grads))
                .collect(),
        })
    }

    /// The most bytes held at once.
    pub(crate) fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }
}
