//! The dry run shared by [`crate::validate`] (deadlock check) and [`crate::simulate`] (timing).
//!
//! Every stage runs its program in order. Sends never block (the transport's channels are
//! unbounded); a receive blocks until its matching send has happened, plus the transfer time
//! (a skip's receive, `RK`/`RKB`, until its peer's send naming this stage).
//! A compute-only plan has no receives, so its cross-stage edges are implicit: a forward of k on
//! stage s waits for the forward of k on s − 1, a backward waits for the backward on s + 1.
//! An overlap starts when the inputs of both its halves have arrived, and ends both.
//! The run reaches a fixed point; programs that are not finished then are deadlocked.

use rustc_hash::FxHashMap as HashMap;

use crate::action::{Action, ActionKind};
use crate::id::{MicroBatchId, StageId};
use crate::plan::Plan;

/// One executed action.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Slot {
    /// What ran.
    #[serde(serialize_with = "crate::dataflow::serialize_display")]
    pub action: Action,
    /// When it started.
    pub start: f64,
    /// When it ended.
    pub end: f64,
}

pub(crate) fn serialize_display<S: serde::Serializer>(a: &Action, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(a)
}

/// Why the dry run stopped short.
#[derive(Clone, Debug)]
pub(crate) struct Deadlock {
    /// The lowest blocked rank (as the id of its program), its step, and the action it waits
    /// on.
    pub stage: StageId,
    pub step: usize,
    pub waits_for: Action,
    /// Where the rank that should produce `waits_for` is stuck (None if it finished).
    pub producer_step: Option<(usize, Action)>,
}

type Key = (StageId, ActionKind, Option<MicroBatchId>, Option<StageId>);

/// Runs `plan` with per-action `duration` and per-edge `transfer` time.
pub(crate) fn run(
    plan: &Plan,
    duration: impl Fn(&Action) -> f64,
    transfer: f64,
) -> Result<Vec<Vec<Slot>>, Deadlock> {
    let p = plan.ranks();
    let stages = plan.stages();
    let lowered = plan.is_lowered();
    let actions: usize = plan.programs().iter().map(Vec::len).sum();
    let mut done: HashMap<Key, f64> =
        HashMap::with_capacity_and_hasher(actions, Default::default());
    let mut slots: Vec<Vec<Slot>> = vec![Vec::new(); p];
    let mut pc = vec![0usize; p];
    let mut clock = vec![0f64; p];
    loop {
        let mut progressed = false;
        for s in 0..p {
            let program = &plan.programs()[s];
            while let Some(action) = program.get(pc[s]) {
                // An overlap starts once the inputs of both its halves are there.
                let ready = action
                    .in_sequence()
                    .map(|half| ready_at(&half, stages, lowered, &done, transfer))
                    .try_fold(0f64, |at, half| Some(at.max(half?)));
                let Some(ready) = ready else {
                    break;
                };
                let start = clock[s].max(ready);
                let end = start + duration(action);
                for half in action.in_sequence() {
                    done.insert((half.stage, half.kind, half.micro_batch, half.peer), end);
                }
                slots[s].push(Slot {
                    action: *action,
                    start,
                    end,
                });
                clock[s] = end;
                pc[s] += 1;
                progressed = true;
            }
        }
        let blocked = (0..p).find(|&s| pc[s] < plan.programs()[s].len());
        let Some(s) = blocked else { return Ok(slots) };
        if !progressed {
            let action = plan.programs()[s][pc[s]];
            // Of an overlap, the first half whose input is missing.
            let blocked = action
                .in_sequence()
                .find(|half| ready_at(half, stages, lowered, &done, transfer).is_none())
                .unwrap_or(action);
            let waits_for = producer_of(&blocked, lowered, &done);
            let producer_step = plan.rank_of(waits_for.stage).and_then(|producer| {
                let program = plan.programs().get(producer)?;
                program.get(pc[producer]).map(|a| (pc[producer], *a))
            });
            return Err(Deadlock {
                stage: StageId::from(s),
                step: pc[s],
                waits_for,
                producer_step,
            });
        }
    }
}

/// The time at which `action`'s input is available, or `None` if it is not produced yet.
fn ready_at(
    action: &Action,
    stages: usize,
    lowered: bool,
    done: &HashMap<Key, f64>,
    transfer: f64,
) -> Option<f64> {
    let s = action.stage.index();
    let remote = |stage: usize, kinds: &[ActionKind]| {
        kinds
            .iter()
            .find_map(|&k| done.get(&(StageId::from(stage), k, action.micro_batch, None)))
            .map(|t| t + transfer)
    };
    // A skip's send on the peer, naming this stage as its peer.
    let skip = |kind| {
        let peer = action.peer?;
        let key = (peer, kind, action.micro_batch, Some(action.stage));
        done.get(&key).map(|t| t + transfer)
    };
    use ActionKind::*;
    match (lowered, action.kind) {
        (_, RecvSkip) => skip(SendSkip),
        (_, RecvSkipGradient) => skip(SendSkipGradient),
        (true, RecvActivation) if s > 0 => remote(s - 1, &[SendActivation]),
        (true, RecvGradient) => remote(s + 1, &[SendGradient]),
        (false, Forward) if s > 0 => remote(s - 1, &[Forward]),
        (false, Backward | BackwardInput) if s + 1 < stages => {
            remote(s + 1, &[Backward, BackwardInput])
        }
        (true, RecvActivation) => None, // stage 0 has no upstream: never satisfiable
        _ => Some(0.0),
    }
}

/// The action whose completion `blocked` waits for.
fn producer_of(blocked: &Action, lowered: bool, done: &HashMap<Key, f64>) -> Action {
    let s = blocked.stage.index();
    let mb = blocked.micro_batch;
    let at = |stage: usize, kind| Action {
        stage: StageId::from(stage),
        kind,
        micro_batch: mb,
        peer: None,
        backward: None,
    };
    let skip = |kind| Action {
        stage: blocked.peer.unwrap_or(blocked.stage),
        kind,
        micro_batch: mb,
        peer: Some(blocked.stage),
        backward: None,
    };
    use ActionKind::*;
    match (lowered, blocked.kind) {
        (_, RecvSkip) => skip(SendSkip),
        (_, RecvSkipGradient) => skip(SendSkipGradient),
        (true, RecvActivation) => at(s.saturating_sub(1), SendActivation),
        (true, RecvGradient) => at(s + 1, SendGradient),
        (false, Forward) => at(s - 1, Forward),
        _ => {
            // A compute-only backward: report the full backward unless a split one ran.
            let input = at(s + 1, BackwardInput);
            if done.contains_key(&(input.stage, input.kind, mb, None)) {
                input
            } else {
                at(s + 1, Backward)
            }
        }
    }
}
