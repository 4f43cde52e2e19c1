//! Lowering: from a schedule's compute-only plan to a plan a worker interprets as is.
//!
//! Schedules emit only forwards and backwards. This pass adds, per stage s:
//! - `sRFk` before every forward of k (s > 0) and `sSFk` after it (s < p − 1);
//! - `sRBk` before every backward (or backward-input) of k (s < p − 1) and `sSBk` after it
//!   (s > 0);
//! - `sAR` (gradient all-reduce across replicas) and `sOPT` (optimizer step) at the end.
//!
//! An overlap `aFi+bBj` gets both halves' transfers: `aRFi bRBj aFi+bBj aSFi bSBj`.
//!
//! ```
//! use pipetrain_schedules::{lower, Lowering, ScheduleKind};
//! let plan = lower(&ScheduleKind::GPipe.plan(2, 1).unwrap(), Lowering::default());
//! assert_eq!(plan.to_string(), "0: 0F0 0SF0 0RB0 0B0 0AR 0OPT\n1: 1RF0 1F0 1B0 1SB0 1AR 1OPT\n");
//! ```

use crate::action::{Action, ActionKind};
use crate::plan::Plan;

/// What [`lower`] appends after a stage's last backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lowering {
    /// Add `AR`: all-reduce gradients across replicas. Off for the non-final steps of gradient
    /// accumulation (DDP's `no_sync`).
    pub all_reduce: bool,
    /// Add `OPT`: one optimizer step per stage.
    pub optimizer_step: bool,
}

impl Default for Lowering {
    fn default() -> Self {
        Self {
            all_reduce: true,
            optimizer_step: true,
        }
    }
}

/// Lowers a compute-only plan. Actions that are not compute (already lowered) are copied through.
/// A rank that holds several stages gets each stage's all-reduce and optimizer step, in stage
/// order.
pub fn lower(plan: &Plan, options: Lowering) -> Plan {
    let last = plan.stages().saturating_sub(1);
    let programs = (0..plan.ranks())
        .map(|rank| {
            let program = &plan.programs()[rank];
            let mut out = Vec::with_capacity(program.len() * 2 + 2);
            for &action in program {
                // An overlap's halves: the receives of both before it, the sends after it.
                for half in action.in_sequence() {
                    out.extend(receive(half, last));
                }
                out.push(action);
                for half in action.in_sequence() {
                    out.extend(send(half, last));
                }
            }
            for stage in plan.stages_of(rank) {
                if options.all_reduce {
                    out.push(Action::all_reduce(stage));
                }
                if options.optimizer_step {
                    out.push(Action::optimizer_step(stage));
                }
            }
            out
        })
        .collect();
    plan.with_programs(programs)
}

/// The receive a compute action needs before it on a stage of a pipeline whose last stage is
/// `last`: a forward's activation (not on the first stage), a backward's gradient (not on the
/// last).
fn receive(action: Action, last: usize) -> Option<Action> {
    let s = action.stage.index();
    let kind = match action.kind {
        ActionKind::Forward if s > 0 => ActionKind::RecvActivation,
        ActionKind::Backward | ActionKind::BackwardInput if s < last => ActionKind::RecvGradient,
        _ => return None,
    };
    Some(Action { kind, ..action })
}

/// The send that follows a compute action: a forward's output (not on the last stage), a
/// backward's input gradient (not on the first).
fn send(action: Action, last: usize) -> Option<Action> {
    let s = action.stage.index();
    let kind = match action.kind {
        ActionKind::Forward if s < last => ActionKind::SendActivation,
        ActionKind::Backward | ActionKind::BackwardInput if s > 0 => ActionKind::SendGradient,
        _ => return None,
    };
    Some(Action { kind, ..action })
}
