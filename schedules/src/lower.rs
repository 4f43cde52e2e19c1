//! Lowering: from a schedule's compute-only plan to a plan a worker interprets as is.
//!
//! Schedules emit only forwards and backwards. This pass adds, per stage s:
//! - `sRFk` before every forward of k (s > 0) and `sSFk` after it (s < p − 1);
//! - `sRBk` before every backward (or backward-input) of k (s < p − 1) and `sSBk` after it
//!   (s > 0);
//! - `sAR` (gradient all-reduce across replicas) and `sOPT` (optimizer step) at the end;
//! - under ZeRO-2/3 ([`Zero`]), `sRG` (gradients reduced to their owners) in place of `sAR`,
//!   in every training plan (accumulation steps too: between them each replica keeps only its
//!   shard); at level 2, `sUS` after `sOPT` (the owners' updated values to every replica); at
//!   level 3, `sUS` before the stage's first action and `sRS` after its last computation that
//!   reads the values (a last `B` split into `I`, `sRS`, `W`) and that computation's sends, so
//!   the stage's parameters are whole only in between (inference plans too).
//!
//! An overlap `aFi+bBj` gets both halves' transfers: `aRFi bRBj aFi+bBj aSFi bSBj`.
//!
//! ```
//! use pipetrain_schedules::{lower, Lowering, ScheduleKind};
//! let plan = lower(&ScheduleKind::GPipe.plan(2, 1).unwrap(), Lowering::default());
//! assert_eq!(plan.to_string(), "0: 0F0 0SF0 0RB0 0B0 0AR 0OPT\n1: 1RF0 1F0 1B0 1SB0 1AR 1OPT\n");
//! ```

use crate::action::{Action, ActionKind};
use crate::id::StageId;
use crate::plan::Plan;
use crate::zero::Zero;

/// What [`lower`] appends after a stage's last backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lowering {
    /// Add `AR`: all-reduce gradients across replicas. Off for the non-final steps of gradient
    /// accumulation (DDP's `no_sync`).
    pub all_reduce: bool,
    /// Add `OPT`: one optimizer step per stage.
    pub optimizer_step: bool,
    /// The ZeRO level: levels 2 and 3 add `RG`, `US` and `RS` ([`Zero`]).
    pub zero: Zero,
}

impl Default for Lowering {
    fn default() -> Self {
        Self {
            all_reduce: true,
            optimizer_step: true,
            zero: Zero::Off,
        }
    }
}

impl Lowering {
    /// The lowering of an inference plan: no all-reduce and no optimizer step (and, at ZeRO-3,
    /// the unshard and reshard around each stage's forwards).
    pub fn inference(zero: Zero) -> Self {
        Self {
            all_reduce: false,
            optimizer_step: false,
            zero,
        }
    }
}

/// Lowers a compute-only plan. Actions that are not compute (already lowered) are copied through.
/// A rank that holds several stages gets each stage's all-reduce and optimizer step, in stage
/// order.
///
/// ```
/// use pipetrain_schedules::{lower, Lowering, ScheduleKind, Zero};
/// let zero = Lowering { zero: Zero::Parameters, ..Lowering::default() };
/// let plan = lower(&ScheduleKind::GPipe.plan(2, 1).unwrap(), zero);
/// assert_eq!(
///     plan.to_string(),
///     "0: 0US 0F0 0SF0 0RB0 0I0 0RS 0W0 0RG 0OPT\n1: 1US 1RF0 1F0 1I0 1SB0 1RS 1W0 1RG 1OPT\n"
/// );
/// ```
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
            let zero = options.zero;
            if zero.shards_parameters() {
                for stage in plan.stages_of(rank) {
                    bracket(&mut out, stage);
                }
            }
            for stage in plan.stages_of(rank) {
                let trains = out.iter().any(|a| {
                    a.in_sequence().any(|h| {
                        h.stage == stage
                            && matches!(h.kind, ActionKind::Backward | ActionKind::BackwardWeight)
                    })
                });
                if zero.shards_gradients() && trains {
                    out.push(Action::stage_wide(stage, ActionKind::ReduceGrad));
                } else if options.all_reduce && !zero.shards_gradients() {
                    out.push(Action::all_reduce(stage));
                }
                if options.optimizer_step {
                    out.push(Action::optimizer_step(stage));
                    if zero == Zero::Gradients {
                        out.push(Action::stage_wide(stage, ActionKind::Unshard));
                    }
                }
            }
            out
        })
        .collect();
    plan.with_programs(programs)
}

/// ZeRO-3: `stageUS` before the stage's first action in `program`, `stageRS` after its last
/// computation that reads the parameters' values and the sends that follow it (none if the
/// program has no action of the stage).
///
/// A weight-gradient pass (`W`) reads the inputs and output gradients its micro-batches left,
/// not the values, so the stage's `W`s after its last `F`, `B` or `I` run resharded. Where that
/// last computation is a whole backward `B`, it is split into its two halves, `I` then `W` (a
/// worker runs `B` as exactly that), so the values are dropped before the gradients are made:
/// at the step's peak the worker holds its share of the values beside the whole gradients, not
/// both whole ([`Zero::Parameters`]).
fn bracket(program: &mut Vec<Action>, stage: StageId) {
    let of_stage = |a: &Action| a.in_sequence().any(|h| h.stage == stage);
    let reads_values =
        |a: &Action| a.kind.is_compute() && a.kind != ActionKind::BackwardWeight && of_stage(a);
    let Some(first) = program.iter().position(of_stage) else {
        return;
    };
    let Some(last) = program.iter().rposition(reads_values) else {
        return;
    };
    let weights = match program[last] {
        b if b.kind == ActionKind::Backward => {
            program[last].kind = ActionKind::BackwardInput;
            Some(Action {
                kind: ActionKind::BackwardWeight,
                ..b
            })
        }
        _ => None,
    };
    let mut end = last + 1;
    while program
        .get(end)
        .is_some_and(|a| a.kind.is_send() && a.stage == stage && !a.kind.is_stage_wide())
    {
        end += 1;
    }
    if let Some(w) = weights {
        program.insert(end, w);
    }
    program.insert(end, Action::stage_wide(stage, ActionKind::Reshard));
    program.insert(first, Action::stage_wide(stage, ActionKind::Unshard));
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
