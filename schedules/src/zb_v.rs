//! ZB-V (Qi et al., *Pipeline Parallelism with Controllable Memory*, 2024; torch's
//! `ScheduleZBVZeroBubble`): two chunks per rank in a V.
//!
//! The model is cut into 2p stages; rank r holds stage r and stage 2p − 1 − r, so rank 0 holds
//! the first and the last stage and the activations turn around on rank p − 1. The backward is
//! split as in ZB-H1. The order is built by the greedy list scheduler of
//! [`crate::list_scheduler`] over unit time slots (F = I = W per chunk), each rank holding
//! fewer than 2p chunk activations (a chunk is half a stage: 1F1B's p stage activations), the
//! V's second chunk first on a tie.
//!
//! ```text
//! p = 2, m = 4, F = I = W per chunk (render::timeline; cells name stage and kind)
//! rank 0 | 0F0 0F1 0F2 3F0 3I0 3W0 3F1 0I0 3I1 0W0 0F3 0I1 3W1 3F2 3I2 0W1 3W2 0I2 0W2 3F3 3I3 3W3 .   0I3 0W3
//! rank 1 | .   1F0 2F0 1F1 2F1 2I0 1I0 2W0 1F2 2I1 1I1 1W0 2F2 2W1 1F3 2I2 1I2 1W1 2F3 2W2 1W2 2I3 1I3 2W3 1W3
//! ```

use crate::list_scheduler;
use crate::plan::Plan;

/// Stage c on rank c (first arm of the V) or 2p − 1 − c (second arm).
fn rank_of(stage: usize, ranks: usize) -> usize {
    if stage < ranks {
        stage
    } else {
        2 * ranks - 1 - stage
    }
}

/// The V: the rank of each of the 2p stages.
pub(crate) fn placement(ranks: usize) -> Vec<usize> {
    (0..2 * ranks).map(|c| rank_of(c, ranks)).collect()
}

/// The ZB-V plan for `ranks` ranks and `micro_batches` micro-batches.
pub(crate) fn plan(ranks: usize, micro_batches: usize) -> Plan {
    let p = ranks;
    // Second arm first; a chunk is half a stage, so 2p chunks are 1F1B's p stage activations.
    let own: Vec<Vec<usize>> = (0..p).map(|r| vec![2 * p - 1 - r, r]).collect();
    let programs = list_scheduler::programs(&own, micro_batches, 2 * p);
    Plan::with_placement(micro_batches, programs, placement(p))
}
