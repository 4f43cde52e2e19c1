//! ZB-2P (Qi et al., *Zero Bubble Pipeline Parallelism*, arXiv 2401.10241, §3): the zero-bubble
//! schedule that may hold up to twice 1F1B's activations, one stage per rank.
//!
//! The paper finds it with its automatic scheduler under a memory limit of 2p micro-batches'
//! activations; here the greedy list scheduler of [`crate::list_scheduler`] builds it under the
//! same limit (each rank at most 2p stage activations, against 1F1B's p − r on rank r). With
//! the room, each rank runs the `F`s of its warm-up back to back (rank r the 2(p − r) − 1
//! forwards before its first `I` can arrive, where 1F1B idles), and the `W`s it could not run
//! while `I`s and `F`s kept it busy are left for the drain, where they fill the waits for the
//! last `I`s.

use crate::list_scheduler;
use crate::plan::Plan;

/// The ZB-2P plan for `ranks` ranks and `micro_batches` micro-batches.
pub(crate) fn plan(ranks: usize, micro_batches: usize) -> Plan {
    let own: Vec<Vec<usize>> = (0..ranks).map(|r| vec![r]).collect();
    let programs = list_scheduler::programs(&own, micro_batches, 2 * ranks);
    Plan::new(ranks, micro_batches, programs)
}
