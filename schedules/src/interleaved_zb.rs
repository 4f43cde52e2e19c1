//! Interleaved zero bubble (ZB-H1 over interleaved chunks: the "ZB1P" of Qi et al. 2023; torch's
//! `ScheduleInterleavedZeroBubble`).
//!
//! Chunks are placed and visited as under interleaved 1F1B ([`crate::interleaved`]: stage c on
//! rank c mod p, micro-batches in rounds of p, the k-th forward and backward of a rank on the
//! same chunk and micro-batch), and the backward is split as under ZB-H1 ([`crate::zb_h1`]):
//! each `B` becomes an `I`, and rank r holds back its first r `W`s, running the oldest pending
//! `W` after each `I` from its r-th on and the rest at the end. Since an `I` is shorter than a
//! `B`, the warm-up needs one forward less per hop than interleaved 1F1B's:
//! `(v − 1)·p + (p − r − 1)` forwards on rank r.
//!
//! ```text
//! p = 2, v = 2, m = 4, F = I = W per chunk (render::timeline; cells name stage and kind)
//! rank 0 | 0F0 0F1 2F0 2F1 .   2I0 2W0 0F2 2I1 2W1 0F3 0I0 0W0 2F2 0I1 0W1 2F3 2I2 2W2 2I3 2W3 0I2 0W2 0I3 0W3
//! rank 1 | .   1F0 1F1 3F0 3I0 3F1 3I1 3W0 1F2 1I0 3W1 1F3 1I1 1W0 3F2 3I2 1W1 3F3 3I3 3W2 1I2 3W3 1I3 1W2 1W3
//! ```
//! With F = I = W per chunk each rank idles p − 1 chunk-steps: the bubble is
//! (p − 1)/(3·v·m + p − 1), v times smaller than ZB-H1's. Each stage runs its `F`s, `I`s and
//! `W`s in ascending micro-batch order, so the weights are bitwise those of 1F1B at one weight
//! gradient per `W`. The number of micro-batches must be a multiple of p, as for interleaved
//! 1F1B; with v = 1 the programs are ZB-H1's.

use std::collections::VecDeque;

use crate::action::{Action, ActionKind};
use crate::interleaved;

/// The compute program of `rank` for `ranks` ranks of `virtual_stages` chunks each.
pub(crate) fn program(
    rank: usize,
    ranks: usize,
    virtual_stages: usize,
    micro_batches: usize,
) -> Vec<Action> {
    let (p, v, m) = (ranks, virtual_stages, micro_batches);
    let total = m * v;
    let warm_up = ((v - 1) * p + p - rank - 1).min(total);
    let at = |k: usize, kind| {
        let (stage, mb) = interleaved::nth(rank, p, v, k, kind == ActionKind::Forward);
        Action::new(stage, kind, mb)
    };
    let mut program = Vec::with_capacity(3 * total);
    program.extend((0..warm_up).map(|k| at(k, ActionKind::Forward)));
    let mut pending = VecDeque::new();
    for i in 0..total {
        if warm_up + i < total {
            program.push(at(warm_up + i, ActionKind::Forward));
        }
        let input = at(i, ActionKind::BackwardInput);
        program.push(input);
        pending.push_back(Action {
            kind: ActionKind::BackwardWeight,
            ..input
        });
        if i >= rank {
            program.extend(pending.pop_front());
        }
    }
    program.extend(pending);
    program
}

#[cfg(test)]
mod tests {
    use super::program;
    use crate::zb_h1;

    /// With one chunk per rank the programs are ZB-H1's.
    #[test]
    fn one_chunk_per_rank_is_zb_h1() {
        for p in 1..=6 {
            for m in 1..=12 {
                for r in 0..p {
                    let zb_h1 = zb_h1::program(r.into(), p, m);
                    assert_eq!(program(r, p, 1, m), zb_h1, "p={p} m={m} rank {r}");
                }
            }
        }
    }
}
