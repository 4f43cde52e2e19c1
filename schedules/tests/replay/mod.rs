//! The second implementation of a compute plan's timing, shared by the golden files' check
//! (tests/golden.rs) and the bubble's second opinion (tests/second_opinion.rs): written from the
//! definition of a pipeline step, apart from the generators and from `simulate`/`dataflow`.
//!
//! ```text
//!   F(s, k)  after F(s − 1, k)                   (the activation from the stage before)
//!   B(s, k)  after F(s, k) and B/I(s + 1, k)     (its own forward; the gradient from after)
//!   I(s, k)  as B(s, k)
//!   W(s, k)  after I(s, k)
//! ```

use std::collections::HashMap;

use pipetrain_schedules::{Action, ActionKind, Plan};

/// Replays each rank's compute program in order, starting every action when its rank is free
/// and its inputs exist (the rules above), with forward `forward`, full backward `backward`
/// and I = W = backward / 2, no transfer time. Returns each rank's actions with their start and
/// end.
///
/// # Panics
/// If the programs deadlock: names each rank's action whose inputs never come.
pub fn replay(plan: &Plan, forward: f64, backward: f64) -> Vec<Vec<(f64, f64, Action)>> {
    let last = plan.stages() - 1;
    let length = |a: &Action| match a.kind {
        ActionKind::Forward => forward,
        ActionKind::Backward => backward,
        _ => backward / 2.0,
    };
    let key = |a: &Action| (a.stage.index(), a.micro_batch.map(|m| m.0), a.kind);
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
        for (rank, program) in plan.programs().iter().enumerate() {
            let Some(a) = program.get(next[rank]) else {
                continue;
            };
            let (s, mb) = (a.stage.index(), a.micro_batch.map(|m| m.0));
            let needs: Vec<Option<f64>> = match a.kind {
                ActionKind::Forward if s > 0 => {
                    vec![done.get(&(s - 1, mb, ActionKind::Forward)).copied()]
                }
                ActionKind::Forward => vec![],
                ActionKind::Backward | ActionKind::BackwardInput => {
                    let mut n = vec![done.get(&(s, mb, ActionKind::Forward)).copied()];
                    if s < last {
                        n.push(backward_of(s + 1, mb, &done));
                    }
                    n
                }
                ActionKind::BackwardWeight => {
                    vec![done.get(&(s, mb, ActionKind::BackwardInput)).copied()]
                }
                other => panic!("{a}: {other:?} in a compute program"),
            };
            if needs.iter().any(Option::is_none) {
                continue;
            }
            let start = needs.into_iter().flatten().fold(free[rank], f64::max);
            let end = start + length(a);
            done.insert(key(a), end);
            slots[rank].push((start, end, *a));
            free[rank] = end;
            next[rank] += 1;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    let stuck: Vec<String> = (plan.programs().iter().enumerate())
        .filter_map(|(r, p)| p.get(next[r]).map(|a| format!("rank {r} at {a}")))
        .collect();
    assert!(stuck.is_empty(), "deadlock: {}\n{plan}", stuck.join(", "));
    slots
}
