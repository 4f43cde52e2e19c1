//! A second opinion on every schedule's program: a dependency simulator written apart from the
//! generators and from `simulate`/`dataflow`, which reads nothing but the plan's programs and
//! derives the makespan and the bubble from them (issue 36, item 5).
//!
//! Its rules, from the definition of a pipeline step and nothing else:
//!
//! ```text
//!   F(s, k)  after F(s − 1, k)                   (the activation from the stage before)
//!   B(s, k)  after F(s, k) and B/I(s + 1, k)     (its own forward; the gradient from after)
//!   I(s, k)  as B(s, k)
//!   W(s, k)  after I(s, k)
//! ```
//!
//! Each rank runs its program in order, an action starting when the rank is free and its inputs
//! are done; transfers are free, F = I = W = 1 and B = 2 (the zero-bubble paper's T_F = T_B =
//! T_W). Its makespan and bubble must equal `simulate`'s for every schedule over a sweep of
//! shapes, and the bubble must equal the closed forms the schedules are known for:
//!
//! | schedule       | bubble fraction (m ≥ p where it matters)        |
//! |----------------|-------------------------------------------------|
//! | GPipe, 1F1B    | (p − 1) / (m + p − 1)                           |
//! | interleaved v  | (p − 1) / (v·m + p − 1), m a multiple of p      |
//! | ZB-H1          | (p − 1) / (3m + p − 1): a third of 1F1B's idle  |
//! | ZB-V           | at most ZB-H1's (m ≥ p)                         |

use std::collections::HashMap;

use pipetrain_schedules::{ActionKind, Costs, Plan, ScheduleKind, simulate};

/// What an action computes: its kind, stage and micro-batch.
type Key = (ActionKind, usize, u32);

/// The second opinion: the makespan and the bubble fraction of `plan`'s programs.
///
/// # Panics
/// If the programs deadlock (an action whose inputs never come), naming each rank's stuck
/// action.
fn second_opinion(plan: &Plan) -> (f64, f64) {
    let stages = plan.stages();
    let duration = |kind: ActionKind| match kind {
        ActionKind::Backward => 2.0,
        _ => 1.0,
    };
    let mut ended: HashMap<Key, f64> = HashMap::new();
    let programs = plan.programs();
    let mut next = vec![0usize; programs.len()];
    let mut free = vec![0f64; programs.len()];
    let mut busy = 0.0;
    loop {
        let mut progressed = false;
        for (rank, program) in programs.iter().enumerate() {
            while let Some(a) = program.get(next[rank]) {
                let (s, k) = (a.stage.index(), a.micro_batch.expect("a compute action").0);
                let after = |kind, stage| ended.get(&(kind, stage, k)).copied();
                let inputs: Vec<Option<f64>> = match a.kind {
                    ActionKind::Forward if s == 0 => vec![],
                    ActionKind::Forward => vec![after(ActionKind::Forward, s - 1)],
                    ActionKind::Backward | ActionKind::BackwardInput => {
                        let own = after(ActionKind::Forward, s);
                        match s + 1 == stages {
                            true => vec![own],
                            false => {
                                let next = after(ActionKind::Backward, s + 1)
                                    .or(after(ActionKind::BackwardInput, s + 1));
                                vec![own, next]
                            }
                        }
                    }
                    ActionKind::BackwardWeight => vec![after(ActionKind::BackwardInput, s)],
                    other => panic!("a compute-only plan holds no {other:?}"),
                };
                let Some(ready) = inputs
                    .into_iter()
                    .try_fold(0f64, |t, input| input.map(|i| t.max(i)))
                else {
                    break;
                };
                let start = free[rank].max(ready);
                free[rank] = start + duration(a.kind);
                busy += duration(a.kind);
                ended.insert((a.kind, s, k), free[rank]);
                next[rank] += 1;
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    let stuck: Vec<String> = (programs.iter().enumerate())
        .filter_map(|(r, p)| p.get(next[r]).map(|a| format!("rank {r} at {a}")))
        .collect();
    assert!(stuck.is_empty(), "deadlock: {}\n{plan}", stuck.join(", "));
    let makespan = free.iter().copied().fold(0.0, f64::max);
    let ranks = programs.len() as f64;
    (makespan, 1.0 - busy / (ranks * makespan))
}

/// Every schedule over ranks p and micro-batches m (interleaved at v = 2 and 3 where m is a
/// multiple of p), with its plan.
fn sweep() -> Vec<(ScheduleKind, usize, usize, Plan)> {
    let mut kinds = vec![
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::ZbH1,
        ScheduleKind::ZbV,
    ];
    kinds.extend((2..=3).map(|v| ScheduleKind::Interleaved { virtual_stages: v }));
    let mut plans = Vec::new();
    for kind in kinds {
        for p in 1..=5 {
            for m in 1..=10 {
                let interleaved = matches!(kind, ScheduleKind::Interleaved { .. });
                if interleaved && m % p != 0 {
                    continue;
                }
                let plan = kind.plan(p, m).expect("a plan");
                assert_eq!(plan.ranks(), p);
                plans.push((kind, p, m, plan));
            }
        }
    }
    plans
}

#[test]
fn the_second_opinion_agrees_with_simulate_on_every_schedule() {
    for (kind, p, m, plan) in sweep() {
        let (makespan, bubble) = second_opinion(&plan);
        let sim = simulate(&plan, &Costs::uniform(plan.stages(), 1.0, 2.0)).unwrap();
        assert!(
            (sim.makespan - makespan).abs() < 1e-9 && (sim.bubble_fraction - bubble).abs() < 1e-9,
            "{kind} p={p} m={m}: simulate says makespan {} bubble {}, the second opinion {makespan} \
             {bubble}\n{plan}",
            sim.makespan,
            sim.bubble_fraction
        );
    }
}

#[test]
fn the_second_opinion_finds_each_schedules_known_bubble() {
    for (kind, p, m, plan) in sweep() {
        let (_, bubble) = second_opinion(&plan);
        let (p_, m_) = (p as f64, m as f64);
        let one_f_one_b = (p_ - 1.0) / (m_ + p_ - 1.0);
        let zb_h1 = (p_ - 1.0) / (3.0 * m_ + p_ - 1.0);
        let expected = match kind {
            ScheduleKind::GPipe | ScheduleKind::OneFOneB => Some(one_f_one_b),
            ScheduleKind::Interleaved { virtual_stages: v } => {
                Some((p_ - 1.0) / (v as f64 * m_ + p_ - 1.0))
            }
            // The closed form holds once every stage has a W to fill its cool-down with.
            ScheduleKind::ZbH1 if m >= p => Some(zb_h1),
            ScheduleKind::ZbH1 => None,
            ScheduleKind::ZbV => {
                if m >= p {
                    assert!(
                        bubble <= zb_h1 + 1e-9,
                        "{kind} p={p} m={m}: {bubble}\n{plan}"
                    );
                }
                None
            }
        };
        if let Some(expected) = expected {
            assert!(
                (bubble - expected).abs() < 1e-9,
                "{kind} p={p} m={m}: bubble {bubble}, expected {expected}\n{plan}"
            );
        }
    }
}

/// The checker itself: a plan whose backward on stage 0 comes before stage 1's produced the
/// gradient it needs would wait forever.
#[test]
#[should_panic(expected = "deadlock: rank 0 at 0B0")]
fn the_second_opinion_finds_a_deadlock() {
    let plan: Plan = "0: 0F0 0B0\n1: 1B0 1F0\n".parse().unwrap();
    second_opinion(&plan);
}
