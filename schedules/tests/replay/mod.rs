//! The second implementation of a compute plan's timing, shared by the golden files' check
//! (tests/golden.rs) and the bubble's second opinion (tests/second_opinion.rs): written from the
//! definition of a pipeline step, apart from the generators and from `simulate`/`dataflow`.
//!
//! ```text
//!   F(s, k)  after F(s − 1, k)                   (the activation from the stage before)
//!   B(s, k)  after F(s, k) and B/I(s + 1, k)     (its own forward; the gradient from after)
//!   I(s, k)  as B(s, k)
//!   W(s, k)  after I(s, k)
//!   F(a, i) + B(b, j)   (an overlap) overlapped: after what F(a, i) and B(b, j) each need,
//!                       ending both max(F, B) later; in sequence: F(a, i), then B(b, j),
//!                       each by its own rule
//! ```

use std::collections::HashMap;

use pipetrain_schedules::{Action, ActionKind, Plan};

/// Replays each rank's compute program in order, starting every action when its rank is free
/// and its inputs exist (the rules above), with forward `forward`, full backward `backward`
/// and I = W = backward / 2, no transfer time, and each overlap in sequence (F + B). Returns
/// each rank's actions with their start and end.
///
/// # Panics
/// If the programs deadlock: names each rank's action whose inputs never come.
pub fn replay(plan: &Plan, forward: f64, backward: f64) -> Vec<Vec<(f64, f64, Action)>> {
    replay_with(plan, forward, backward, false)
}

#[allow(dead_code)] // tests/second_opinion.rs calls it, tests/golden.rs does not
/// [`replay`], with each overlap run at once where `overlaps` (from when both halves' inputs
/// exist, for max(F, B)); where not, as its forward, then its backward.
pub fn replay_with(
    plan: &Plan,
    forward: f64,
    backward: f64,
    overlaps: bool,
) -> Vec<Vec<(f64, f64, Action)>> {
    let last = plan.stages() - 1;
    let length = |a: &Action| match a.kind {
        ActionKind::Forward => forward,
        ActionKind::Backward => backward,
        ActionKind::Overlap => forward.max(backward),
        _ => backward / 2.0,
    };
    // The computations an action is, as (stage, micro-batch, kind): an overlap's forward (its
    // own stage and micro-batch) and backward (the ones it names).
    let parts = |a: &Action| -> Vec<(usize, Option<u32>, ActionKind)> {
        let own = (a.stage.index(), a.micro_batch.map(|m| m.0), a.kind);
        match (a.kind, a.backward) {
            (ActionKind::Overlap, Some((stage, mb))) => vec![
                (own.0, own.1, ActionKind::Forward),
                (stage.index(), Some(mb.0), ActionKind::Backward),
            ],
            (ActionKind::Overlap, None) => panic!("{a}: an overlap without its backward"),
            _ => vec![own],
        }
    };
    // In sequence, each overlap is its two halves, written out as actions.
    let programs: Vec<Vec<Action>> = plan
        .programs()
        .iter()
        .map(|program| {
            program
                .iter()
                .flat_map(|a| match (a.kind, a.backward) {
                    (ActionKind::Overlap, Some((stage, mb))) if !overlaps => vec![
                        Action::forward(a.stage, a.micro_batch.expect("a forward's")),
                        Action::backward(stage, mb),
                    ],
                    _ => vec![*a],
                })
                .collect()
        })
        .collect();
    let mut done: HashMap<(usize, Option<u32>, ActionKind), f64> = HashMap::new();
    let mut next = vec![0usize; plan.ranks()];
    let mut free = vec![0.0f64; plan.ranks()];
    let mut slots: Vec<Vec<(f64, f64, Action)>> = vec![Vec::new(); plan.ranks()];
    let backward_of = |stage: usize, mb: Option<u32>, done: &HashMap<_, f64>| {
        [ActionKind::Backward, ActionKind::BackwardInput]
            .iter()
            .find_map(|&k| done.get(&(stage, mb, k)).copied())
    };
    loop {
        let mut progressed = false;
        for (rank, program) in programs.iter().enumerate() {
            let Some(a) = program.get(next[rank]) else {
                continue;
            };
            let mut needs: Vec<Option<f64>> = Vec::new();
            for (s, mb, kind) in parts(a) {
                match kind {
                    ActionKind::Forward if s > 0 => {
                        needs.push(done.get(&(s - 1, mb, ActionKind::Forward)).copied());
                    }
                    ActionKind::Forward => {}
                    ActionKind::Backward | ActionKind::BackwardInput => {
                        needs.push(done.get(&(s, mb, ActionKind::Forward)).copied());
                        if s < last {
                            needs.push(backward_of(s + 1, mb, &done));
                        }
                    }
                    ActionKind::BackwardWeight => {
                        needs.push(done.get(&(s, mb, ActionKind::BackwardInput)).copied());
                    }
                    other => panic!("{a}: {other:?} in a compute program"),
                }
            }
            if needs.iter().any(Option::is_none) {
                continue;
            }
            let start = needs.into_iter().flatten().fold(free[rank], f64::max);
            let end = start + length(a);
            for part in parts(a) {
                done.insert(part, end);
            }
            slots[rank].push((start, end, *a));
            free[rank] = end;
            next[rank] += 1;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    let stuck: Vec<String> = (programs.iter().enumerate())
        .filter_map(|(r, p)| p.get(next[r]).map(|a| format!("rank {r} at {a}")))
        .collect();
    assert!(stuck.is_empty(), "deadlock: {}\n{plan}", stuck.join(", "));
    slots
}
