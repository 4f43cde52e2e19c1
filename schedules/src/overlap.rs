//! Overlaps on a worker that cannot overlap: [`Plan::sequential`].
//!
//! An overlap ([`ActionKind::Overlap`], `0F3+3B1`) asks for a forward and a backward of one
//! rank at once. Hardware that can (one on the compute units while the other communicates, or
//! two streams) takes the longer of the two; the dry run of the plan as written starts the
//! overlap once the inputs of both halves are there ([`crate::validate()`] proves that order
//! deadlock-free). A worker that cannot overlap — pipetrain's: a CPU worker, and a GPU one on
//! one stream — runs the forward, then the backward, each as soon as its own input is there:
//! the forward does not wait for the backward's gradient. [`Plan::sequential`] writes that down
//! as a plan, which [`crate::simulate()`] runs unless [`Costs::overlaps`](crate::Costs::overlaps).

use crate::action::{Action, ActionKind};
use crate::plan::Plan;

impl Plan {
    /// This plan as a worker that cannot overlap runs it: each overlap replaced by its forward,
    /// then its backward. In a lowered plan each half takes its own transfers along (those
    /// around the overlap: the receives just before it, the sends just after), so that the
    /// forward waits for its activation only: `aRFi bRBj aFi+bBj aSFi bSBj` becomes
    /// `aRFi aFi aSFi bRBj bBj bSBj`. A plan without overlaps is returned as it is.
    ///
    /// ```
    /// use pipetrain_schedules::{lower, Lowering, Plan};
    /// let plan: Plan = "0: 0F0 0F1 1F0+0B0 0B1\n".parse().unwrap();
    /// assert_eq!(plan.sequential().to_string(), "0: 0F0 0F1 1F0 0B0 0B1\n");
    /// let lowered: Plan = "0: 1RF3 0RB1 1F3+0B1 1SF3\n".parse().unwrap();
    /// assert_eq!(lowered.sequential().to_string(), "0: 1RF3 1F3 1SF3 0RB1 0B1\n");
    /// ```
    pub fn sequential(&self) -> Plan {
        if !self.actions().any(|a| a.kind == ActionKind::Overlap) {
            return self.clone();
        }
        let programs = self.programs().iter().map(|p| sequential(p)).collect();
        self.with_programs(programs)
    }
}

/// One program with its overlaps in sequence.
fn sequential(program: &[Action]) -> Vec<Action> {
    let mut out: Vec<Action> = Vec::with_capacity(program.len() + 8);
    let mut i = 0;
    while i < program.len() {
        let action = program[i];
        i += 1;
        let Some((forward, backward)) = action.halves() else {
            out.push(action);
            continue;
        };
        let ours = |t: &Action| belongs(t, &forward) || belongs(t, &backward);
        // The receives just before the overlap, and the sends just after it.
        let mut before = Vec::new();
        while let Some(last) = out.last().filter(|t| !t.kind.is_send() && ours(t)) {
            before.push(*last);
            out.pop();
        }
        before.reverse();
        let after: Vec<Action> = program[i..]
            .iter()
            .take_while(|t| t.kind.is_send() && ours(t))
            .copied()
            .collect();
        i += after.len();
        for half in [forward, backward] {
            out.extend(before.iter().filter(|t| belongs(t, &half)));
            out.push(half);
            out.extend(after.iter().filter(|t| belongs(t, &half)));
        }
    }
    out
}

/// Whether `transfer` moves an input or an output of the compute action `half`: a forward's
/// activation or skips, a backward's gradient or skip gradients, of its stage and micro-batch.
fn belongs(transfer: &Action, half: &Action) -> bool {
    use ActionKind::*;
    let of_forward = matches!(
        transfer.kind,
        RecvActivation | SendActivation | RecvSkip | SendSkip
    );
    let of_backward = matches!(
        transfer.kind,
        RecvGradient | SendGradient | RecvSkipGradient | SendSkipGradient
    );
    transfer.stage == half.stage
        && transfer.micro_batch == half.micro_batch
        && match half.kind {
            Forward => of_forward,
            _ => of_backward,
        }
}
