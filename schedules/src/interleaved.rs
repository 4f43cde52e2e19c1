//! Interleaved 1F1B (Megatron-LM's virtual pipeline, Narayanan et al. 2021).
//!
//! The model is cut into p·v stages (*chunks*) and rank r holds the v chunks r, r + p, r + 2p, …
//! — stage c on rank c mod p. Micro-batches go round in groups of p: rank r forwards chunk 0 of
//! micro-batches 0…p−1, then chunk 1 of the same p, …, then chunk 0 of the next group, and
//! runs the backwards in the same pattern with the chunks reversed. Each rank warms up with
//! `2·(p − r − 1) + (v − 1)·p` forwards, then alternates one forward and one backward, then
//! drains. A chunk is 1/v of a stage, so with uniform costs the bubble shrinks v-fold:
//! (p − 1)/(v·m + p − 1) of the step.
//!
//! ```text
//! p = 2, v = 2, m = 4, F = 1, B = 2 per chunk (render::timeline; cells name stage and kind)
//! rank 0 | 0F0 0F1 2F0 2F1 0F2 .   2B0 2B0 0F3 2B1 2B1 2F2 0B0 0B0 2F3 0B1 0B1 .   2B2 2B2 .   2B3 2B3 0B2 0B2 0B3 0B3
//! rank 1 | .   1F0 1F1 3F0 3B0 3B0 3F1 3B1 3B1 1F2 1B0 1B0 1F3 1B1 1B1 3F2 3B2 3B2 3F3 3B3 3B3 1B2 1B2 1B3 1B3 .   .
//! ```
//! Each stage still runs its backwards in ascending micro-batch order. The price is memory: a
//! rank holds up to `(v − 1)·p + 2·(p − r − 1) + 1` chunk activations (each 1/v of a stage's)
//! and sends v times as many messages.
//!
//! The number of micro-batches must be a multiple of p (as Megatron requires), so that every
//! group of p is whole.

use crate::action::Action;
use crate::id::{MicroBatchId, StageId};

/// The compute program of `rank` for `ranks` ranks of `virtual_stages` chunks each.
pub(crate) fn program(
    rank: usize,
    ranks: usize,
    virtual_stages: usize,
    micro_batches: usize,
) -> Vec<Action> {
    let (p, v, m) = (ranks, virtual_stages, micro_batches);
    let total = m * v;
    let warm_up = (2 * (p - rank - 1) + (v - 1) * p).min(total);
    let at = |k: usize, forward: bool| {
        let (stage, mb) = nth(rank, p, v, k, forward);
        match forward {
            true => Action::forward(stage, mb),
            false => Action::backward(stage, mb),
        }
    };
    let mut program = Vec::with_capacity(2 * total);
    program.extend((0..warm_up).map(|k| at(k, true)));
    for i in 0..total - warm_up {
        program.push(at(warm_up + i, true));
        program.push(at(i, false));
    }
    program.extend((total - warm_up..total).map(|k| at(k, false)));
    program
}

/// The stage and micro-batch of `rank`'s k-th forward (or backward): micro-batches in rounds
/// of p, each round through every chunk in turn (the backwards through the chunks reversed).
pub(crate) fn nth(
    rank: usize,
    ranks: usize,
    virtual_stages: usize,
    k: usize,
    forward: bool,
) -> (StageId, MicroBatchId) {
    let (p, v) = (ranks, virtual_stages);
    let c = k % (p * v) / p;
    let chunk = if forward { c } else { v - 1 - c };
    let mb = k / (p * v) * p + k % p;
    (StageId::from(chunk * p + rank), MicroBatchId::from(mb))
}

/// Stage c is on rank c mod p.
pub(crate) fn placement(ranks: usize, virtual_stages: usize) -> Vec<usize> {
    (0..ranks * virtual_stages).map(|c| c % ranks).collect()
}
