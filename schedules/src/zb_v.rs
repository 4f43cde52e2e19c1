//! ZB-V (Qi et al., *Pipeline Parallelism with Controllable Memory*, 2024; torch's
//! `ScheduleZBVZeroBubble`): two chunks per rank in a V.
//!
//! The model is cut into 2p stages; rank r holds stage r and stage 2p − 1 − r, so rank 0 holds
//! the first and the last stage and the activations turn around on rank p − 1. The backward is
//! split as in ZB-H1. The order is built by a greedy list scheduler over unit time slots
//! (F = I = W per chunk): each slot, every rank runs the first of
//! 1. an `I` whose inputs are ready (the older micro-batch first; the V's second chunk on a tie),
//! 2. an `F` whose input is ready, while the rank holds fewer than 2p chunk activations (a
//!    chunk is half a stage: 1F1B's p stage activations), the second chunk first,
//! 3. the oldest pending `W`,
//!
//! and idles otherwise. Each stage runs its `F`s, `I`s and `W`s in ascending micro-batch order.
//! Nothing waits for an action that is not scheduled, so the plan is deadlock-free by
//! construction (and [`crate::validate`] checks it like any other).
//!
//! ```text
//! p = 2, m = 4, F = I = W per chunk (render::timeline; cells name stage and kind)
//! rank 0 | 0F0 0F1 0F2 3F0 3I0 3W0 3F1 0I0 3I1 0W0 0F3 0I1 3W1 3F2 3I2 0W1 3W2 0I2 0W2 3F3 3I3 3W3 .   0I3 0W3
//! rank 1 | .   1F0 2F0 1F1 2F1 2I0 1I0 2W0 1F2 2I1 1I1 1W0 2F2 2W1 1F3 2I2 1I2 1W1 2F3 2W2 1W2 2I3 1I3 2W3 1W3
//! ```

use std::collections::VecDeque;

use crate::action::{Action, ActionKind};
use crate::id::{MicroBatchId, StageId};
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

/// Progress of one stage.
#[derive(Default)]
struct Stage {
    /// Slot after which each micro-batch's F (I) is done.
    forward_done: Vec<Option<usize>>,
    input_done: Vec<Option<usize>>,
    next_forward: usize,
    next_input: usize,
    weights: VecDeque<usize>,
}

/// The ZB-V plan for `ranks` ranks and `micro_batches` micro-batches.
pub(crate) fn plan(ranks: usize, micro_batches: usize) -> Plan {
    let (p, m) = (ranks, micro_batches);
    let n = 2 * p;
    let mut stages: Vec<Stage> = (0..n)
        .map(|_| Stage {
            forward_done: vec![None; m],
            input_done: vec![None; m],
            ..Stage::default()
        })
        .collect();
    let mut programs: Vec<Vec<Action>> = vec![Vec::new(); p];
    let mut held = vec![0usize; p];
    let limit = 2 * p;
    let total = 3 * m * n;
    let mut scheduled = 0;
    let mut slot = 0;
    while scheduled < total {
        let before = scheduled;
        for rank in 0..p {
            let own = [2 * p - 1 - rank, rank]; // second arm first
            let done_by = |t: Option<usize>| t.is_some_and(|t| t <= slot);
            let input_ready = |c: usize| {
                let st = &stages[c];
                let b = st.next_input;
                b < m
                    && done_by(st.forward_done[b])
                    && (c + 1 == n || done_by(stages[c + 1].input_done[b]))
            };
            let forward_ready = |c: usize| {
                let f = stages[c].next_forward;
                f < m && (c == 0 || done_by(stages[c - 1].forward_done[f]))
            };
            let input = own
                .into_iter()
                .filter(|&c| input_ready(c))
                .min_by_key(|&c| stages[c].next_input);
            let forward = own
                .into_iter()
                .find(|&c| held[rank] < limit && forward_ready(c));
            let weight = own
                .into_iter()
                .filter(|&c| !stages[c].weights.is_empty())
                .min_by_key(|&c| stages[c].weights[0]);
            let (c, kind) = match (input, forward, weight) {
                (Some(c), _, _) => (c, ActionKind::BackwardInput),
                (None, Some(c), _) => (c, ActionKind::Forward),
                (None, None, Some(c)) => (c, ActionKind::BackwardWeight),
                (None, None, None) => continue,
            };
            let st = &mut stages[c];
            let mb = match kind {
                ActionKind::Forward => {
                    st.forward_done[st.next_forward] = Some(slot + 1);
                    held[rank] += 1;
                    st.next_forward += 1;
                    st.next_forward - 1
                }
                ActionKind::BackwardInput => {
                    st.input_done[st.next_input] = Some(slot + 1);
                    st.weights.push_back(st.next_input);
                    st.next_input += 1;
                    st.next_input - 1
                }
                _ => {
                    held[rank] -= 1;
                    st.weights.pop_front().expect("a pending weight pass")
                }
            };
            programs[rank].push(Action::new(StageId::from(c), kind, MicroBatchId::from(mb)));
            scheduled += 1;
        }
        // Every action ends within its slot: a slot in which no rank could run anything means
        // none ever will. The rules above never get there; were they to, the plan would come
        // out incomplete and `validate` would name what is missing, rather than loop forever.
        if scheduled == before {
            break;
        }
        slot += 1;
    }
    Plan::with_placement(m, programs, placement(p))
}
