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

#[cfg(test)]
mod tests {
    use crate::building_block::{Block, INTERVAL, peak_bound, plan};
    use crate::{Costs, Lowering, lower, simulate, v_min};

    /// Every rank's peak stash is within the block's lifespan bound, for every m, and the most
    /// any rank holds is the closed form docs/schedules.md states.
    #[test]
    fn peak_stash_is_within_the_blocks_lifespan_bound() {
        for p in 1..=10 {
            type Of = fn(usize, usize) -> Block;
            for (kind, block, closed) in [
                ("v-min", v_min::block as Of, 2 * ((p + 4) / 3)),
                ("v-half", super::block as Of, 2 * ((p + 2) / 2)),
            ] {
                let bounds: Vec<usize> = (0..p).map(|r| peak_bound(block(r, p), r, p)).collect();
                let mut most = 0;
                for m in 1..=3 * p + 6 {
                    let plan = plan(p, m, |r| block(r, p));
                    let sim = simulate(
                        &lower(&plan, Lowering::default()),
                        &Costs::uniform(2 * p, 0.5, 1.0),
                    )
                    .unwrap();
                    for (r, st) in sim.stages.iter().enumerate() {
                        assert!(
                            st.peak_stash <= bounds[r],
                            "{kind} p={p} m={m} rank {r}: {} > {}",
                            st.peak_stash,
                            bounds[r]
                        );
                        most = most.max(st.peak_stash);
                    }
                }
                assert_eq!(most, closed, "{kind} p={p}: the bound is reached");
            }
        }
    }

    /// The blocks V-Min and V-Half use are the best of their family: of the waits (at the
    /// first turn, at the loss, at the second turn; 0..6 each) that keep a block's slots apart
    /// modulo 6, none gives a smaller peak stash, or the same peak and a shorter step.
    #[test]
    fn the_chosen_waits_are_the_best_of_their_family() {
        type Family = fn(usize, usize, [usize; 3]) -> Block;
        let min_family: Family = |r, p, [g1, g2, g3]| Block {
            forward: [r, 2 * p - 1 + g1 - r],
            input: [4 * p - 1 + g1 + g2 + g3 - r, 2 * p + g1 + g2 + r],
        };
        let half_family: Family = |r, p, [g1, g2, g3]| Block {
            forward: [2 * r, 3 * p - 2 + g1 - r],
            input: [6 * p - 3 + g1 + g2 + g3 - r, 3 * p - 1 + g1 + g2 + 2 * r],
        };
        let score = |p: usize, block: &dyn Fn(usize) -> Block| {
            let apart = (0..p).all(|r| {
                let b = block(r);
                let s = [b.forward[0], b.forward[1], b.input[0], b.input[1]].map(|t| t % INTERVAL);
                (0..4).all(|i| (0..i).all(|j| s[i] != s[j]))
            });
            let lowered = lower(&plan(p, 4 * p, block), Lowering::default());
            if !apart || crate::validate(&lowered).is_err() {
                return None;
            }
            let sim = simulate(&lowered, &Costs::uniform(2 * p, 0.5, 1.0)).unwrap();
            let peak = sim.stages.iter().map(|s| s.peak_stash).max().unwrap();
            Some((peak, (sim.makespan * 2.0) as usize))
        };
        for p in 2..=8 {
            for (family, chosen) in [
                (min_family, v_min::block as fn(usize, usize) -> Block),
                (half_family, super::block),
            ] {
                let mut best = None;
                for g in 0..INTERVAL * INTERVAL * INTERVAL {
                    let gaps = [g / 36, g / 6 % 6, g % 6];
                    if let Some(s) = score(p, &|r| family(r, p, gaps)) {
                        best = best.min(Some(s)).or(Some(s));
                    }
                }
                assert_eq!(score(p, &|r| chosen(r, p)), best, "p={p}");
            }
        }
    }
}
