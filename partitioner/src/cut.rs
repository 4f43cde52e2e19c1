//! What a stage holds beyond its layers' own bytes, which depends on where the stage is cut
//! ([`CutBytes`]), and the two rules of the memory accounting that every budget shares: the
//! stash and the deferred weight-gradient inputs held at once ([`held_at_once`]), and the
//! headroom kept for what the accounting leaves out ([`with_headroom`]).
//!
//! One accounting for `--memory-budget` (`pipetrain::memory`, which measures the bytes on real
//! layers) and for `pipetrain tune` (which reads them from a cost table): both build a
//! [`CutBytes`] and hand [`CutBytes::of`] to
//! [`partition_by_time_with`](crate::partition_by_time_with).

use std::ops::Range;

/// `bytes` and the budget's headroom for what the accounting leaves out (the modules' own
/// bookkeeping, the loss's and burn's per-op temporaries, the allocator's slack): 1/32 more.
/// Measured (`tests/memory_measured.rs`, one stage under the least budget that fits): the
/// step's peak read 1.01 of the accounting without it.
///
/// ```
/// use pipetrain_partitioner::with_headroom;
/// assert_eq!(with_headroom(3200), 3300);
/// ```
pub const fn with_headroom(bytes: u64) -> u64 {
    bytes.saturating_add(bytes / 32)
}

/// Activation bytes held at once by a worker whose stash peaks at `stash` bytes and whose
/// deferred weight gradients peak at `deferred` bytes. When the weight gradients of the whole
/// step wait for its end (`to_end`: one group of every micro-batch, the default split backward
/// under GPipe and 1F1B), a micro-batch's backward releases its stash as it keeps its deferred
/// inputs, so the deferred bytes grow as the stash empties: the larger of the two, measured
/// (1F1B holds as much at its peak as GPipe). Otherwise (groups of fewer micro-batches, or a
/// schedule that places its `W`s) both at once.
///
/// ```
/// use pipetrain_partitioner::held_at_once;
/// assert_eq!(held_at_once(100, 300, true), 300);
/// assert_eq!(held_at_once(100, 300, false), 400);
/// ```
pub fn held_at_once(stash: u64, deferred: u64, to_end: bool) -> u64 {
    match to_end {
        true => stash.max(deferred),
        false => stash.saturating_add(deferred),
    }
}

/// The copies a weight-gradient pass (`W`) makes of one layer over a group of `group`
/// micro-batches: it stacks the group's inputs into one tensor for one GEMM, frees them, then
/// stacks their output gradients, so one copy of the larger of the two is held beyond the
/// deferred bytes: `stacked` (that larger one per micro-batch) times the group. Nothing for a
/// group of one micro-batch, which `W` uses as it is, nor for the fused backward (0).
///
/// ```
/// use pipetrain_partitioner::weight_copies;
/// assert_eq!(weight_copies(100, 8), 800);
/// assert_eq!(weight_copies(100, 1), 0);
/// ```
pub const fn weight_copies(stacked: u64, group: u64) -> u64 {
    match group {
        0 | 1 => 0,
        group => stacked.saturating_mul(group),
    }
}

/// What a stage holds beyond its layers' per-layer sums, which depends on where it is cut:
/// - **its received input**, for each micro-batch in flight: the output of the layer before it
///   (none for the stage that begins the model, whose input is rows of the caller's batch);
/// - **`W`'s copies** ([`weight_copies`]) of the stage's largest layer, for weight-gradient
///   groups of more than one micro-batch.
///
/// ```
/// use pipetrain_partitioner::CutBytes;
/// // Three layers' outputs per micro-batch; the second stacks 40 bytes for `W`.
/// let cut = CutBytes::new(vec![10, 20, 30], &[0, 40, 0], 4, 8);
/// assert_eq!(cut.bytes(0..1, 4), 0); // stage 0: no received input, no stack
/// assert_eq!(cut.bytes(1..3, 4), 10 * 4 + 40 * 8); // layer 0's output × 4, one stack × 8
/// assert_eq!(cut.of(1..3), 360 + 360 / 32); // with the headroom
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutBytes {
    /// Each layer's output for one micro-batch.
    outputs: Vec<u64>,
    /// Each layer's `W` stack for one micro-batch (0 for a layer that defers nothing).
    stacked: Vec<u64>,
    /// Micro-batches in flight at the stash's peak: the received inputs held.
    in_flight: u64,
    /// Micro-batches of a weight-gradient group (0: the fused backward).
    group: u64,
}

impl CutBytes {
    /// From each layer's output for one micro-batch (`outputs`, in the step's precision), each
    /// layer's `W` stack per micro-batch (`stacked`: the larger of one `Linear` call's input and
    /// output gradient; missing entries are 0, as without a split backward), `in_flight`
    /// micro-batches and a weight-gradient group of `group` micro-batches.
    pub fn new(outputs: Vec<u64>, stacked: &[u64], in_flight: usize, group: u64) -> Self {
        let stacked = (0..outputs.len())
            .map(|i| stacked.get(i).copied().unwrap_or(0))
            .collect();
        Self {
            outputs,
            stacked,
            in_flight: in_flight as u64,
            group,
        }
    }

    /// What a stage of layers `range` holds beyond its layers' sums with `in_flight` of its
    /// micro-batches stashed: its received inputs and `W`'s copies, without headroom.
    pub fn bytes(&self, range: Range<usize>, in_flight: usize) -> u64 {
        let input = match range.start {
            0 => 0,
            start => self.outputs[start - 1].saturating_mul(in_flight as u64),
        };
        let largest = self.stacked[range].iter().copied().max().unwrap_or(0);
        input.saturating_add(weight_copies(largest, self.group))
    }

    /// [`bytes`](Self::bytes) at the micro-batches in flight it was made with, with the budget's
    /// headroom ([`with_headroom`]): the per-stage term a budget hands the partitioner.
    pub fn of(&self, range: Range<usize>) -> u64 {
        with_headroom(self.bytes(range, self.in_flight as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_after_the_first_holds_its_received_inputs_and_one_layer_s_copies() {
        let cut = CutBytes::new(vec![10, 20, 30, 40], &[5, 50, 7], 3, 4);
        // The stack of the largest layer only, the group's micro-batches of it.
        assert_eq!(cut.bytes(0..2, 3), 50 * 4);
        assert_eq!(cut.bytes(2..4, 3), 20 * 3 + 7 * 4);
        assert_eq!(cut.bytes(2..4, 1), 20 + 7 * 4);
        // A group of one micro-batch (or the fused backward) copies nothing.
        let one = CutBytes::new(vec![10, 20], &[5, 50], 3, 1);
        assert_eq!(one.bytes(1..2, 3), 30);
        assert_eq!(with_headroom(one.bytes(1..2, 3)), one.of(1..2));
    }
}
