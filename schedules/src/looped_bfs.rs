//! Looped BFS (breadth-first pipeline parallelism, Lamy-Poirier 2022, arXiv 2211.05953; torch's
//! `ScheduleLoopedBFS`).
//!
//! The model is cut into p·v stages placed as interleaved 1F1B places them, stage c on rank
//! c mod p, but each rank runs its chunks breadth first: every micro-batch's forward through its
//! first chunk, then through its next chunk, …, then the backwards, last chunk first, every
//! micro-batch through each. It is GPipe looped v times around the ranks:
//!
//! ```text
//! program of rank r (p ranks, v chunks, m micro-batches; stage c·p + r is its chunk c)
//!   F(r, 0..m) F(p + r, 0..m) … F((v−1)·p + r, 0..m)  B((v−1)·p + r, 0..m) … B(r, 0..m)
//! ```
//!
//! With uniform costs per chunk the makespan is (F + B)·((v − 1)·max(m, p) + m + p − 1): each
//! loop keeps rank 0 busy only while micro-batches remain for it, so from m ≥ p on the bubble
//! is interleaved 1F1B's, (p − 1)/(v·m + p − 1), at GPipe's memory (every rank holds all v·m
//! chunk activations, m stages' worth). Fewer messages wait on each other than under interleaved
//! 1F1B (a rank sends a whole chunk's micro-batches in a row), and each chunk's parameters are
//! used in one run: the schedule the paper pairs with sharded data parallelism.
//!
//! PyTorch runs each chunk's backwards newest micro-batch first; ours run oldest first, as every
//! other schedule here does, so that each stage accumulates its micro-batches' gradients in the
//! same order and the weights are bitwise those of GPipe and 1F1B. Either way the simulated
//! makespan is the same (`schedules/tests/torch_orders.rs` checks both).

use crate::action::Action;
use crate::id::{MicroBatchId, StageId};

/// The compute program of `rank` for `ranks` ranks of `virtual_stages` chunks each.
pub(crate) fn program(
    rank: usize,
    ranks: usize,
    virtual_stages: usize,
    micro_batches: usize,
) -> Vec<Action> {
    let stage = move |chunk: usize| StageId::from(chunk * ranks + rank);
    let forwards = (0..virtual_stages).flat_map(move |c| {
        MicroBatchId::range(micro_batches).map(move |mb| Action::forward(stage(c), mb))
    });
    let backwards = (0..virtual_stages).rev().flat_map(move |c| {
        MicroBatchId::range(micro_batches).map(move |mb| Action::backward(stage(c), mb))
    });
    forwards.chain(backwards).collect()
}
