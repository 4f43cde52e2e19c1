//! A V-shape building block repeated once per micro-batch (Qi et al., *Pipeline Parallelism
//! with Controllable Memory*, arXiv 2405.15362, §3–4): the frame of V-Min and V-Half.
//!
//! The model is cut into 2p stages placed as ZB-V's ([`crate::zb_v`]): rank r holds chunk
//! c0 = r (the V's first arm) and c1 = 2p − 1 − r (its second). Time runs in unit slots, one
//! per `F`, `I` or `W` of one chunk. A **block** gives, for rank r, the slot of micro-batch 0's
//! four passes there: `F` of c0 and of c1, `I` of c1 and of c0. Micro-batch k's passes come
//! [`INTERVAL`] = 6 slots after micro-batch k − 1's (the 6 passes a rank runs per micro-batch:
//! two `F`, two `I`, two `W`). A block is valid when
//! - its slots follow the data: each pass after the pass it needs (the previous rank's `F` of
//!   the same arm, the turn at rank p − 1, the loss at rank 0, the next rank's `I`), and
//! - its four slots differ modulo 6, so that repeated blocks never collide: each period of 6
//!   slots leaves two free slots per rank, where the `W`s go.
//!
//! A rank's program is its slots in time order: each free slot runs the `W` of the oldest
//! micro-batch whose `I` is done and whose `W` is not (none pending: the slot stays empty), and
//! the `W`s still pending at the end follow. The order is the plan; the simulator (like the
//! paper's "squeeze") runs each action as soon as its input is there, closing the gaps the
//! warm-up leaves.
//!
//! ## The memory bound
//! A chunk activation is held from its `F` to its `W`. Let L₀ (L₁) be the slots from c0's (c1's)
//! `F` to its `I`, inclusive of both, and D the most slots any `W` waits after its `I`'s slot
//! in the repeated block (fewer micro-batches leave more slots free, so a `W` never waits
//! longer). In any window of 6 consecutive slots a rank starts one micro-batch per chunk, so at
//! most
//! ⌈(L + D)/6⌉ micro-batches of a chunk are held at once, whatever m is: the peak stash of rank
//! r is at most ⌈(L₀ + D)/6⌉ + ⌈(L₁ + D)/6⌉ chunk activations. `peak_bound` (a test helper)
//! computes it from the block, with D measured on the repeated block itself; the tests check
//! every plan against it over a grid of p and m, and that the most any rank holds is the
//! closed form of [`crate::v_min`] and [`crate::v_half`] (the sum of ceilings can exceed it
//! by one chunk on some ranks).

use crate::action::{Action, ActionKind};
use crate::id::{MicroBatchId, StageId};
use crate::plan::Plan;
use crate::zb_v;

/// Slots between one micro-batch's block and the next's on a rank: two `F`, two `I` and two
/// `W` of one chunk each.
pub(crate) const INTERVAL: usize = 6;

/// Micro-batch 0's slots on one rank: `F` of the first and the second chunk, then `I` of the
/// second and the first (the backward returns down the second arm first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// `F` of c0 = r, and of c1 = 2p − 1 − r.
    pub forward: [usize; 2],
    /// `I` of c0 and of c1.
    pub input: [usize; 2],
}

/// The compute passes of one rank, each at its slot, micro-batches 0..m, before the `W`s.
fn passes(block: Block, rank: usize, ranks: usize, micro_batches: usize) -> Vec<(usize, Action)> {
    let chunks = [rank, 2 * ranks - 1 - rank];
    let mut out = Vec::with_capacity(4 * micro_batches);
    for k in 0..micro_batches {
        for (c, &chunk) in chunks.iter().enumerate() {
            let at = |slot: usize, kind| {
                (
                    slot + INTERVAL * k,
                    Action::new(StageId::from(chunk), kind, MicroBatchId::from(k)),
                )
            };
            out.push(at(block.forward[c], ActionKind::Forward));
            out.push(at(block.input[c], ActionKind::BackwardInput));
        }
    }
    out.sort_by_key(|&(slot, _)| slot);
    out
}

/// One rank's program with its slots: the block's passes at theirs, each `W` in the first free
/// slot after its `I` (oldest first), the rest after the last pass.
fn timed_program(
    block: Block,
    rank: usize,
    ranks: usize,
    micro_batches: usize,
) -> Vec<(usize, Action)> {
    let mut program = Vec::with_capacity(6 * micro_batches);
    let mut pending = std::collections::VecDeque::new();
    let mut slot = 0;
    for (at, action) in passes(block, rank, ranks, micro_batches) {
        while slot < at {
            if let Some(weight) = pending.pop_front() {
                program.push((slot, weight));
            }
            slot += 1;
        }
        if action.kind == ActionKind::BackwardInput {
            pending.push_back(Action::new(
                action.stage,
                ActionKind::BackwardWeight,
                action.mb(),
            ));
        }
        program.push((at, action));
        slot = at + 1;
    }
    for weight in pending {
        program.push((slot, weight));
        slot += 1;
    }
    program
}

/// The plan of `block` (a block per rank) repeated over `micro_batches` micro-batches.
pub(crate) fn plan(ranks: usize, micro_batches: usize, block: impl Fn(usize) -> Block) -> Plan {
    let programs = (0..ranks)
        .map(|r| {
            timed_program(block(r), r, ranks, micro_batches)
                .into_iter()
                .map(|(_, action)| action)
                .collect()
        })
        .collect();
    Plan::with_placement(micro_batches, programs, zb_v::placement(ranks))
}

/// The bound on rank `rank`'s peak stash (chunk activations) that the block gives, for any
/// number of micro-batches: ⌈(L₀ + D)/6⌉ + ⌈(L₁ + D)/6⌉ (module docs). D is the longest wait of a
/// `W` after its `I` with enough micro-batches to reach the steady state (it only shrinks with
/// fewer).
#[cfg(test)]
pub(crate) fn peak_bound(block: Block, rank: usize, ranks: usize) -> usize {
    // Enough periods for the steady state: every pass of micro-batch 0 is behind by then.
    let periods = block.input.iter().max().copied().unwrap_or(0) / INTERVAL + 3;
    let program = timed_program(block, rank, ranks, 2 * periods);
    let slot_of = |kind: ActionKind, action: &Action| {
        program
            .iter()
            .find(|(_, a)| a.kind == kind && a.stage == action.stage && a.mb() == action.mb())
            .map(|&(slot, _)| slot)
            .expect("every I has its W")
    };
    // Only the W's of micro-batches whose I falls before the drain (the pending ones flushed
    // at the end wait longer, but by then nothing new is stashed).
    let last_input = program
        .iter()
        .filter(|(_, a)| a.kind == ActionKind::BackwardInput)
        .map(|&(slot, _)| slot)
        .max()
        .unwrap_or(0);
    let wait = program
        .iter()
        .filter(|(slot, a)| a.kind == ActionKind::BackwardInput && *slot + INTERVAL <= last_input)
        .map(|(slot, a)| slot_of(ActionKind::BackwardWeight, a) - slot)
        .max()
        .unwrap_or(0);
    (0..2)
        .map(|c| (block.input[c] + 1 - block.forward[c] + wait).div_ceil(INTERVAL))
        .sum()
}
