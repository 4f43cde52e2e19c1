//! V-Min (Qi et al., *Pipeline Parallelism with Controllable Memory*, arXiv 2405.15362): the
//! V-shape building block of least lifespan, about a third of 1F1B's activation memory.
//!
//! Chunks placed as ZB-V's (rank r: stages r and 2p − 1 − r), the backward split. Both arms
//! run one slot per hop, the forward down the first arm and up the second, the backward back
//! down the second and up the first ([`crate::building_block`]), with a wait of g slots at
//! each turn on rank p − 1:
//!
//! ```text
//! F(c0) = r    F(c1) = 2p − 1 + g − r    I(c1) = 2p + g + r    I(c0) = 4p − 1 + 2g − r
//! ```
//!
//! g = 0, or 2 when 3 divides p (2p ≡ 0 mod 6 would put rank 0's `I(c1)` on its `F(c0)`). Of
//! the waits that keep the four slots apart modulo 6 (at the first turn, at the loss on rank
//! 0, at the second turn: each 0..6), these give the least peak stash and, among those, the
//! least bubble (a unit test repeats the search). The paper's scheduler waits 2 at the loss
//! instead: the same peak, a longer step where 3 divides p (the loss's wait lengthens both
//! lifespans' sum twice).
//!
//! Peak stash: at most 2·⌊(p + 4)/3⌋ chunk activations on any rank, for every m (reached from
//! a few micro-batches on): ⌊(p + 4)/3⌋ stage activations, the paper's V-Min memory, against
//! 1F1B's p.

use crate::building_block::{self, Block};
use crate::plan::Plan;

/// The wait at each turn, in slots.
fn wait(ranks: usize) -> usize {
    if ranks % 3 == 0 { 2 } else { 0 }
}

/// Rank `rank`'s block of `ranks`.
pub(crate) fn block(rank: usize, ranks: usize) -> Block {
    let (p, r, g) = (ranks, rank, wait(ranks));
    Block {
        forward: [r, 2 * p - 1 + g - r],
        input: [4 * p - 1 + 2 * g - r, 2 * p + g + r],
    }
}

/// The V-Min plan for `ranks` ranks and `micro_batches` micro-batches.
pub(crate) fn plan(ranks: usize, micro_batches: usize) -> Plan {
    building_block::plan(ranks, micro_batches, |r| block(r, ranks))
}
