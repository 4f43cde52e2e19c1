//! The greedy list scheduler behind ZB-V and ZB-2P: unit time slots (F = I = W per stage),
//! the backward split, a cap on the stage activations each rank holds.
//!
//! Each slot, every rank runs the first of
//! 1. an `I` whose inputs are ready (the older micro-batch first; on a tie, the stage listed
//!    first in the rank's own stages),
//! 2. an `F` whose input is ready, while the rank holds fewer than `limit` activations (its
//!    stages in the order listed),
//! 3. the oldest pending `W`,
//!
//! and idles otherwise. Each stage runs its `F`s, `I`s and `W`s in ascending micro-batch order.
//! Nothing waits for an action that is not scheduled, so the plan is deadlock-free by
//! construction (and [`crate::validate`] checks it like any other).

use std::collections::VecDeque;

use crate::action::{Action, ActionKind};
use crate::id::{MicroBatchId, StageId};

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

/// The programs of the ranks whose stages are `own[rank]` (stage s feeding stage s + 1, the
/// stages of all ranks together numbered 0..n), each rank holding at most `limit` stage
/// activations, over `micro_batches` micro-batches.
pub(crate) fn programs(own: &[Vec<usize>], micro_batches: usize, limit: usize) -> Vec<Vec<Action>> {
    let m = micro_batches;
    let n: usize = own.iter().map(Vec::len).sum();
    let mut stages: Vec<Stage> = (0..n)
        .map(|_| Stage {
            forward_done: vec![None; m],
            input_done: vec![None; m],
            ..Stage::default()
        })
        .collect();
    let mut programs: Vec<Vec<Action>> = vec![Vec::new(); own.len()];
    let mut held = vec![0usize; own.len()];
    let total = 3 * m * n;
    let mut scheduled = 0;
    let mut slot = 0;
    while scheduled < total {
        let before = scheduled;
        for (rank, own) in own.iter().enumerate() {
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
                .iter()
                .copied()
                .filter(|&c| input_ready(c))
                .min_by_key(|&c| stages[c].next_input);
            let forward = own
                .iter()
                .copied()
                .find(|&c| held[rank] < limit && forward_ready(c));
            let weight = own
                .iter()
                .copied()
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
    programs
}
