//! Turns: the compute order of a rank that holds several stages (interleaved schedules).
//!
//! The engine runs every model stage on a worker of its own — its layers, optimizer state and
//! links to the neighbouring stages, exactly as with one stage per rank — so messages between
//! chunks never mix. What an interleaved plan adds is an order *across* the stages of one
//! rank: rank 0 runs `0F0 0F1 2F0 2F1 0F2 …`, one action at a time, as one device would. The
//! workers of a rank's stages pass a turn along that order: before each compute action a worker
//! waits for its turn, after it the turn goes to the stage of the rank's next compute action.
//! Receives and sends happen outside the turn, so a worker waiting for its input holds nobody
//! up; the order is a relaxation of the validated plan's (whose dry run treats each rank as one
//! sequence), which therefore cannot deadlock. Waiting for a turn watches the step's
//! [`Abort`], as every wait in the engine does.
//!
//! An overlap (`0F3+3B1`, DualPipeV's pairs) is two turns, the forward's then the backward's:
//! the two halves run on their stages' workers in sequence, as on a worker that cannot overlap,
//! and each starts as soon as its own input is there (what `Plan::sequential` models).

use std::collections::HashMap;

use crossbeam_channel::{Receiver, Sender, select, unbounded};
use pipetrain_schedules::{Action, Plan, ReplicaId};

use crate::comm::abort::Abort;

/// One step's turns, for a plan whose ranks hold several stages; each replica's ranks take
/// their turns apart.
pub(crate) struct Turns {
    /// Per rank, its compute actions in order.
    order: Vec<Vec<Action>>,
    /// Per compute action: its rank and its index in the rank's order.
    position: HashMap<Action, (usize, usize)>,
    /// Per replica and stage, where its turns arrive.
    senders: Vec<Vec<Sender<()>>>,
    receivers: Vec<Vec<Receiver<()>>>,
}

/// The step was aborted while a worker waited for its turn.
pub(crate) struct Aborted;

impl Turns {
    /// The turns of `plan` (per rank, stages named by its actions) for `replicas` replicas,
    /// each rank's first turn given.
    pub(crate) fn new(plan: &Plan, replicas: usize) -> Self {
        let (senders, receivers) = (0..replicas)
            .map(|_| (0..plan.stages()).map(|_| unbounded()).unzip())
            .unzip();
        let order: Vec<Vec<Action>> = plan
            .programs()
            .iter()
            .map(|p| {
                // An overlap's halves take their turns one after the other: the forward's
                // worker, then the backward's (a worker runs one stage; see
                // `Plan::sequential`).
                p.iter()
                    .flat_map(Action::in_sequence)
                    .filter(|a| a.kind.is_compute())
                    .collect()
            })
            .collect();
        let position = order
            .iter()
            .enumerate()
            .flat_map(|(r, actions)| actions.iter().enumerate().map(move |(i, &a)| (a, (r, i))))
            .collect();
        let turns = Self {
            order,
            position,
            senders,
            receivers,
        };
        for replica in ReplicaId::range(replicas) {
            for first in turns.order.iter().filter_map(|o| o.first()) {
                turns.give(replica, first);
            }
        }
        turns
    }

    fn give(&self, replica: ReplicaId, action: &Action) {
        // The receivers live as long as `self`: the send cannot fail.
        let _ = self.senders[replica.index()][action.stage.index()].send(());
    }

    /// Waits until it is `action`'s turn on its rank of `replica` (at once for an action the
    /// plan does not order).
    pub(crate) fn wait(
        &self,
        replica: ReplicaId,
        action: &Action,
        abort: &Abort,
    ) -> Result<(), Aborted> {
        if !self.position.contains_key(action) {
            return Ok(());
        }
        select! {
            recv(self.receivers[replica.index()][action.stage.index()]) -> _ => Ok(()),
            recv(abort.watch()) -> _ => Err(Aborted),
        }
    }

    /// `action` is done on `replica`: the turn goes to its rank's next compute action.
    pub(crate) fn done(&self, replica: ReplicaId, action: &Action) {
        if let Some(&(rank, i)) = self.position.get(action) {
            if let Some(next) = self.order[rank].get(i + 1) {
                self.give(replica, next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use pipetrain_schedules::{Action, ReplicaId, ScheduleKind};

    use super::*;

    #[test]
    fn an_overlap_is_two_turns_its_forward_then_its_backward() {
        let plan = ScheduleKind::DualPipeV.plan(2, 4).expect("a plan");
        let pair: Action = "0F3+3B1".parse().expect("an action");
        assert!(plan.programs()[0].contains(&pair));
        let turns = Turns::new(&plan, 1);
        let order: Vec<String> = turns.order[0].iter().map(ToString::to_string).collect();
        let at = order
            .iter()
            .position(|a| a == "0F3")
            .expect("the forward's turn");
        assert_eq!(order[at - 1..at + 3], ["3F1", "0F3", "3B1", "3F2"]);
        // Stage 3's worker waits for its turn at 3B1 until stage 0's has run 0F3.
        let (forward, backward) = pair.halves().expect("an overlap");
        let replica = ReplicaId(0);
        let abort = Abort::default();
        for a in &turns.order[0][..at] {
            turns.wait(replica, a, &abort).ok().expect("its turn");
            turns.done(replica, a);
        }
        assert!(turns.receivers[0][3].is_empty(), "3B1 must wait for 0F3");
        turns
            .wait(replica, &forward, &abort)
            .ok()
            .expect("0F3's turn");
        turns.done(replica, &forward);
        turns
            .wait(replica, &backward, &abort)
            .ok()
            .expect("3B1's turn");
    }
}
