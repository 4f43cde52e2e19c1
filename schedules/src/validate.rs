//! `validate(plan)`: the rules every plan must keep before a worker interprets it.
//!
//! Per stage: every action belongs to the stage whose program holds it; every micro-batch is
//! forwarded once and backwarded once (a full `B`, or a split `I` then `W`), forward first; at
//! most one all-reduce and one optimizer step, after the last backward. In a lowered plan every
//! forward on s > 0 is preceded by its receive and every forward on s < p − 1 followed by its
//! send (and the same for gradients, the other way), and every send has its receive on the
//! neighbour. A skip transfer (`SK`, `RK`, `SKB`, `RKB`) names a peer on the right side (a
//! later stage for `SK`/`RKB`, an earlier one for `RK`/`SKB`); skips are received before the
//! forward that pops them and sent after it, their gradients received before the backward that
//! needs them and sent after the one that makes them, every `RK` is answered by an `SKB` in
//! training, and each has its counterpart on the peer. Across stages: forward on s after s − 1, backward on s after s + 1, and no deadlock
//! when receives block — checked by a dry run (see [`crate::dataflow`]).
//!
//! A failure names the stage, the step (index in the stage's program), the action and the
//! reason, followed by the program grid with the failing step marked `>…<`.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::action::{Action, ActionKind};
use crate::dataflow;
use crate::error::{Result, ScheduleError};
use crate::id::{MicroBatchId, StageId};
use crate::plan::Plan;
use crate::render;
pub use crate::violation::Violation;

/// Where and why a plan is invalid, with the program grid marking the failing step: the facts
/// of [`ScheduleError::Invalid`] and [`ScheduleError::PlanFile`].
#[derive(Clone, Debug)]
pub struct InvalidPlan {
    /// The program (row) that breaks the rule: the stage's, or the rank's when ranks hold
    /// several stages.
    pub stage: StageId,
    /// Index of the failing action in that program (its length if the problem is at the end).
    pub step: usize,
    /// The failing action (or the missing one).
    pub action: Action,
    /// The rule broken.
    pub violation: Violation,
    /// The program grid with the failing step marked.
    pub grid: String,
}

impl std::fmt::Display for InvalidPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid plan: {}, step {} (`{}`): {}\n{}",
            self.stage, self.step, self.action, self.violation, self.grid
        )
    }
}

/// Checks every rule; the first failure is returned.
///
/// ```
/// use pipetrain_schedules::{lower, validate, Lowering, Plan, ScheduleKind};
/// let plan = lower(&ScheduleKind::OneFOneB.plan(4, 8).unwrap(), Lowering::default());
/// validate(&plan).unwrap();
///
/// let broken: Plan = "0: 0B0 0F0\n".parse().unwrap();
/// let err = validate(&broken).unwrap_err().to_string();
/// assert!(err.contains("stage 0, step 0 (`0B0`)"), "{err}");
/// ```
pub fn validate(plan: &Plan) -> Result<()> {
    report(plan, check(plan, Purpose::Training))
}

/// Checks an inference plan (see [`inference`](crate::inference)): forwards only, every
/// micro-batch forwarded on every stage, sends and receives matched, no deadlock. A backward,
/// all-reduce or optimizer step is a [`Violation::TrainingOnly`].
///
/// ```
/// use pipetrain_schedules::{inference, validate_inference};
/// validate_inference(&inference(3, 4).unwrap()).unwrap();
/// ```
pub fn validate_inference(plan: &Plan) -> Result<()> {
    report(plan, check(plan, Purpose::Inference))
}

/// What a plan is for: training needs every backward, inference allows none.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Training,
    Inference,
}

fn report(plan: &Plan, checked: std::result::Result<(), Failure>) -> Result<()> {
    checked.map_err(|(stage, step, action, violation)| {
        let grid = render::programs(plan, Some((stage, step)));
        ScheduleError::Invalid(Box::new(InvalidPlan {
            stage,
            step,
            action,
            violation,
            grid,
        }))
    })
}

type Failure = (StageId, usize, Action, Violation);

fn check(plan: &Plan, purpose: Purpose) -> std::result::Result<(), Failure> {
    if plan.stages() == 0 || plan.ranks() == 0 || plan.micro_batches() == 0 {
        let a = Action::optimizer_step(StageId(0));
        return Err((StageId(0), 0, a, Violation::Empty));
    }
    for (rank, program) in plan.programs().iter().enumerate() {
        for (step, &a) in program.iter().enumerate() {
            // Both halves of an overlap are on this rank.
            if let Some(half) = a
                .in_sequence()
                .find(|h| plan.rank_of(h.stage) != Some(rank))
            {
                let v = Violation::WrongStage { named: half.stage };
                return Err((StageId::from(rank), step, a, v));
            }
        }
    }
    for stage in StageId::range(plan.stages()) {
        check_stage(plan, stage, purpose)?;
    }
    check_matching(plan)?;
    dataflow::run(plan, |_| 0.0, 0.0).map(|_| ()).map_err(|d| {
        let action = plan.programs()[d.stage.index()][d.step];
        let violation = Violation::Deadlock {
            waits_for: d.waits_for,
            producer_step: d.producer_step,
        };
        (d.stage, d.step, action, violation)
    })
}

/// One stage's share of the plan, as its rule groups read it.
struct StageView<'a> {
    stage: StageId,
    /// The row a failure names: the program of the rank that holds the stage.
    row: StageId,
    /// That rank's whole program (other stages' actions included: the steps are its indices).
    program: &'a [Action],
    stages: usize,
    micro_batches: usize,
    lowered: bool,
    purpose: Purpose,
}

/// The stage's actions checked so far, by (kind, micro-batch, peer), with their steps.
type Seen = HashMap<(ActionKind, Option<MicroBatchId>, Option<StageId>), usize>;

/// The step of the stage's `kind` action of `mb` (no peer), if it has been seen.
fn step_of(seen: &Seen, kind: ActionKind, mb: MicroBatchId) -> Option<usize> {
    seen.get(&(kind, Some(mb), None)).copied()
}

/// The rules of one stage, in program order: each action's place, no duplicate, its order
/// within the stage; then, at the end, the skips answered and every micro-batch complete.
fn check_stage(plan: &Plan, stage: StageId, purpose: Purpose) -> std::result::Result<(), Failure> {
    use ActionKind::*;
    let rank = plan.rank_of(stage).expect("a stage of the plan");
    let view = StageView {
        stage,
        row: StageId::from(rank),
        program: &plan.programs()[rank],
        stages: plan.stages(),
        micro_batches: plan.micro_batches(),
        lowered: plan.is_lowered(),
        purpose,
    };
    let mut seen = Seen::default();
    let mut last_backward = None;
    for (step, &whole) in view.program.iter().enumerate() {
        // An overlap is both its computations: each half keeps its rules, checked against what
        // ran before the overlap (so neither half may need the other); a failure names the
        // whole action.
        let halves = || whole.in_sequence().filter(|h| h.stage == stage);
        for a in halves() {
            let fail = |v| Err((view.row, step, whole, v));
            if let Some(v) = placement(&view, a) {
                return fail(v);
            }
            if seen.contains_key(&(a.kind, a.micro_batch, a.peer)) {
                return fail(Violation::Duplicate);
            }
            if let Some(v) = order(&view, &seen, a) {
                return fail(v);
            }
        }
        for a in halves() {
            seen.insert((a.kind, a.micro_batch, a.peer), step);
            if matches!(a.kind, Backward | BackwardWeight) {
                last_backward = Some(step);
            }
        }
    }
    skips_answered(&view, &seen)?;
    completeness(&view, &seen, last_backward)
}

/// Whether the action may be on this stage at all: its micro-batch in range, a neighbour on the
/// side it sends to or receives from, a skip's peer on the right side, and a kind the plan's
/// purpose allows.
fn placement(view: &StageView<'_>, a: Action) -> Option<Violation> {
    use ActionKind::*;
    let (stage, p, m) = (view.stage, view.stages, view.micro_batches);
    let s = stage.index();
    if a.micro_batch.is_some_and(|mb| mb.index() >= m) {
        return Some(Violation::MicroBatchOutOfRange { micro_batches: m });
    }
    let no_upstream = s == 0 && matches!(a.kind, RecvActivation | SendGradient);
    let no_downstream = s + 1 == p && matches!(a.kind, SendActivation | RecvGradient);
    if no_upstream || no_downstream {
        return Some(Violation::NoNeighbour);
    }
    let later = a.peer.is_some_and(|peer| peer > stage && peer.index() < p);
    let earlier = a.peer.is_some_and(|peer| peer < stage);
    let peer_ok = match a.kind {
        SendSkip | RecvSkipGradient => later,
        RecvSkip | SendSkipGradient => earlier,
        _ => a.peer.is_none(),
    };
    if !peer_ok {
        return Some(Violation::SkipPeer);
    }
    if view.purpose == Purpose::Inference
        && !matches!(
            a.kind,
            Forward | SendActivation | RecvActivation | SendSkip | RecvSkip | Unshard | Reshard
        )
    {
        return Some(Violation::TrainingOnly);
    }
    None
}

/// The action's order within the stage (`seen` holds the actions before it): what it
/// needs before it (its receive, its forward, its backward, every backward before the
/// all-reduce and the optimizer step, the all-reduce before the step), skips received in time,
/// and one kind of backward per micro-batch.
fn order(view: &StageView<'_>, seen: &Seen, a: Action) -> Option<Violation> {
    use ActionKind::*;
    let (stage, p, m) = (view.stage, view.stages, view.micro_batches);
    let s = stage.index();
    let lowered = view.lowered;
    let has = |kind| seen.contains_key(&(kind, a.micro_batch, None));
    let needs = |kind| Violation::Before {
        needs: Action {
            kind,
            peer: None,
            ..a
        },
    };
    let too_late = |kind| Violation::TooLate {
        consumer: Action {
            kind,
            peer: None,
            ..a
        },
    };
    // Stage-wide actions (no micro-batch) of this stage seen so far, or anywhere in its program.
    let done = |kind| seen.contains_key(&(kind, None, None));
    let planned = |kind| view.program.contains(&Action::stage_wide(stage, kind));
    if let Some(v) = window(a, done, planned) {
        return Some(v);
    }
    let needed = match a.kind {
        Forward if lowered && s > 0 && !has(RecvActivation) => Some(needs(RecvActivation)),
        SendActivation if !has(Forward) => Some(needs(Forward)),
        Backward | BackwardInput if !has(Forward) => Some(needs(Forward)),
        Backward | BackwardInput if lowered && s + 1 < p && !has(RecvGradient) => {
            Some(needs(RecvGradient))
        }
        SendGradient | SendSkipGradient if !has(Backward) && !has(BackwardInput) => {
            Some(needs(Backward))
        }
        SendSkip if !has(Forward) => Some(needs(Forward)),
        RecvSkip if has(Forward) => Some(too_late(Forward)),
        RecvSkipGradient if has(Backward) => Some(too_late(Backward)),
        RecvSkipGradient if has(BackwardInput) => Some(too_late(BackwardInput)),
        BackwardWeight if !has(BackwardInput) => Some(needs(BackwardInput)),
        ReduceGrad if planned(AllReduce) => Some(Violation::TwoReductions),
        AllReduce | OptimizerStep | ReduceGrad => {
            let pending = (0..m).map(MicroBatchId::from).find(|&mb| {
                !seen.contains_key(&(Backward, Some(mb), None))
                    && !seen.contains_key(&(BackwardWeight, Some(mb), None))
            });
            match pending {
                Some(mb) => Some(Violation::Before {
                    needs: Action::backward(stage, mb),
                }),
                None if a.kind == OptimizerStep
                    && view.program.contains(&Action::all_reduce(stage))
                    && !has(AllReduce) =>
                {
                    Some(Violation::Before {
                        needs: Action::all_reduce(stage),
                    })
                }
                None if a.kind == OptimizerStep && planned(ReduceGrad) && !done(ReduceGrad) => {
                    Some(Violation::Before {
                        needs: Action::stage_wide(stage, ReduceGrad),
                    })
                }
                None => None,
            }
        }
        _ => None,
    };
    if needed.is_some() {
        return needed;
    }
    if (a.kind == Backward && (has(BackwardInput) || has(BackwardWeight)))
        || (a.kind == BackwardInput && has(Backward))
    {
        return Some(Violation::MixedBackward);
    }
    None
}

/// ZeRO-3's window: where the stage's program reshards (`sRS`), every computation of the stage
/// that reads the parameters' values (all but `W`) runs between its unshard (`sUS`) and that
/// reshard, and the reshard follows the unshard.
/// `done(kind)`: the stage's stage-wide action of `kind` ran before `a`; `planned(kind)`: the
/// program has one.
fn window(
    a: Action,
    done: impl Fn(ActionKind) -> bool,
    planned: impl Fn(ActionKind) -> bool,
) -> Option<Violation> {
    use ActionKind::*;
    if !planned(Reshard) {
        return None;
    }
    let unshard = Action::stage_wide(a.stage, Unshard);
    match a.kind {
        Reshard if !done(Unshard) => Some(Violation::Before { needs: unshard }),
        _ if a.kind.is_compute() && !done(Unshard) => Some(Violation::Before { needs: unshard }),
        // `W` reads what its micro-batches' `I` left, not the values: it may follow the
        // reshard.
        _ if a.kind.is_compute() && a.kind != BackwardWeight && done(Reshard) => {
            Some(Violation::Resharded)
        }
        _ => None,
    }
}

/// In training, every skip received is popped, and its gradient goes back to the stashing
/// stage: an `RK` without its `SKB` is missing one, placed after the micro-batch's backward.
fn skips_answered(view: &StageView<'_>, seen: &Seen) -> std::result::Result<(), Failure> {
    use ActionKind::*;
    if view.purpose != Purpose::Training {
        return Ok(());
    }
    for &(kind, mb, peer) in seen.keys() {
        let (Some(mb), Some(peer)) = (mb, peer) else {
            continue;
        };
        if kind == RecvSkip && !seen.contains_key(&(SendSkipGradient, Some(mb), Some(peer))) {
            let skb = Action::skip(view.stage, SendSkipGradient, mb, peer);
            let at = step_of(seen, Backward, mb).or(step_of(seen, BackwardInput, mb));
            let v = Violation::Missing { missing: skb };
            return Err((view.row, at.map_or(view.program.len(), |b| b + 1), skb, v));
        }
    }
    Ok(())
}

/// Everything every micro-batch needs on this stage: its forward; in training its backward (a
/// full `B`, or `I` and `W`); in a lowered plan the send of its activation (not on the last
/// stage) and, in training, of its gradient (not on the first). `last_backward` places a
/// missing backward.
fn completeness(
    view: &StageView<'_>,
    seen: &Seen,
    last_backward: Option<usize>,
) -> std::result::Result<(), Failure> {
    use ActionKind::*;
    let (stage, s, p, lowered) = (view.stage, view.stage.index(), view.stages, view.lowered);
    let end = view.program.len();
    for mb in MicroBatchId::range(view.micro_batches) {
        let missing = |kind, step: Option<usize>| {
            let step = step.unwrap_or(end);
            Err((
                view.row,
                step,
                Action::new(stage, kind, mb),
                Violation::Missing {
                    missing: Action::new(stage, kind, mb),
                },
            ))
        };
        let at = |kind| step_of(seen, kind, mb);
        let Some(forward) = at(Forward) else {
            return missing(Forward, None);
        };
        if view.purpose == Purpose::Inference {
            if lowered && s + 1 < p && at(SendActivation).is_none() {
                return missing(SendActivation, Some(forward + 1));
            }
            continue;
        }
        let full = at(Backward);
        let split = at(BackwardInput);
        if full.is_none() && split.is_none() {
            return missing(Backward, last_backward.map(|s| s + 1));
        }
        if split.is_some() && at(BackwardWeight).is_none() {
            return missing(BackwardWeight, None);
        }
        if lowered && s + 1 < p && at(SendActivation).is_none() {
            return missing(SendActivation, Some(forward + 1));
        }
        if lowered && s > 0 && at(SendGradient).is_none() {
            return missing(SendGradient, full.or(split).map(|b| b + 1));
        }
    }
    Ok(())
}

/// The peer of a skip transfer (checked present by `placement`).
fn peer(a: Action) -> usize {
    a.peer.expect("a skip transfer names its peer").index()
}

/// Every send has its receive on the neighbour (a skip's on its peer), and every receive its
/// send. Looked up in a set
/// of every rank's actions: a search of the neighbour's program per message made `plan` take
/// O(p·m²) (p = 200, m = 2000: 9 s).
fn check_matching(plan: &Plan) -> std::result::Result<(), Failure> {
    use ActionKind::*;
    // Each action with the rank whose program holds it.
    let held: HashSet<(usize, Action)> = plan
        .programs()
        .iter()
        .enumerate()
        .flat_map(|(rank, program)| program.iter().map(move |&a| (rank, a)))
        .collect();
    for (rank, program) in plan.programs().iter().enumerate() {
        for (step, &a) in program.iter().enumerate() {
            let s = a.stage.index();
            let counterpart = match a.kind {
                SendActivation => (s + 1, RecvActivation),
                RecvActivation => (s - 1, SendActivation),
                SendGradient => (s - 1, RecvGradient),
                RecvGradient => (s + 1, SendGradient),
                SendSkip => (peer(a), RecvSkip),
                RecvSkip => (peer(a), SendSkip),
                SendSkipGradient => (peer(a), RecvSkipGradient),
                RecvSkipGradient => (peer(a), SendSkipGradient),
                _ => continue,
            };
            let c = Action {
                stage: StageId::from(counterpart.0),
                kind: counterpart.1,
                peer: a.peer.map(|_| a.stage),
                ..a
            };
            let there = plan.rank_of(c.stage);
            if !there.is_some_and(|r| held.contains(&(r, c))) {
                let v = Violation::Unmatched { counterpart: c };
                return Err((StageId::from(rank), step, a, v));
            }
        }
    }
    Ok(())
}
