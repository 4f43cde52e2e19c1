//! V-Half (Qi et al., *Pipeline Parallelism with Controllable Memory*, arXiv 2405.15362): the
//! V-shape building block with half of 1F1B's activation memory and a smaller bubble than
//! V-Min's.
//!
//! Chunks placed as ZB-V's (rank r: stages r and 2p − 1 − r), the backward split. The forward
//! of the first arm and the backward of the second take two slots per hop, the other two one
//! ([`crate::building_block`]), with waits of g₁ and g₃ slots at the two turns on rank p − 1:
//!
//! ```text
//! F(c0) = 2r    F(c1) = 3p − 2 + g₁ − r    I(c1) = 3p − 1 + g₁ + 2r    I(c0) = 6p − 3 + g₁ + g₃ − r
//! ```
//!
//! (g₁, g₃) = (1, 0) for odd p, (3, 4) for even p. Of the waits that keep the four slots apart
//! modulo 6 (at the first turn, at the loss on rank 0, at the second turn: each 0..6), these
//! give the least peak stash and, among those, the least bubble (a unit test repeats the
//! search). The paper's scheduler waits at the loss (3 slots for even p) and 1 at the second
//! turn: the same peak, a longer step.
//!
//! Peak stash: at most 2·⌊(p + 2)/2⌋ chunk activations on any rank, for every m (reached from
//! a few micro-batches on): ⌊(p + 2)/2⌋ stage activations, the paper's V-Half memory, against
//! 1F1B's p.

use crate::building_block::{self, Block};
use crate::plan::Plan;

/// The waits at the first and the second turn, in slots.
fn waits(ranks: usize) -> (usize, usize) {
    if ranks % 2 == 0 { (3, 4) } else { (1, 0) }
}

/// Rank `rank`'s block of `ranks`.
pub(crate) fn block(rank: usize, ranks: usize) -> Block {
    let (p, r, (g1, g3)) = (ranks, rank, waits(ranks));
    Block {
        forward: [2 * r, 3 * p - 2 + g1 - r],
        input: [6 * p - 3 + g1 + g3 - r, 3 * p - 1 + g1 + 2 * r],
    }
}

/// The V-Half plan for `ranks` ranks and `micro_batches` micro-batches.
pub(crate) fn plan(ranks: usize, micro_batches: usize) -> Plan {
    building_block::plan(ranks, micro_batches, |r| block(r, ranks))
}
