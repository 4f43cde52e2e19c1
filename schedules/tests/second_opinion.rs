//! A second opinion on every schedule's program: the bubble derived from the plan's programs
//! alone, by the dependency replay written apart from the generators and from
//! `simulate`/`dataflow` ([`replay::replay`], which the golden files' check shares), with
//! F = I = W = 1 and B = 2 (the zero-bubble paper's T_F = T_B = T_W) and free transfers
//! (issue 36, item 5). Its makespan and bubble must equal `simulate`'s for every schedule over a
//! sweep of shapes, and the bubble must equal the closed forms the schedules are known for:
//!
//! | schedule       | bubble fraction (m ≥ p where it matters)        |
//! |----------------|-------------------------------------------------|
//! | GPipe, 1F1B    | (p − 1) / (m + p − 1)                           |
//! | interleaved v  | (p − 1) / (v·m + p − 1), m a multiple of p      |
//! | ZB-H1          | (p − 1) / (3m + p − 1): a third of 1F1B's idle  |
//! | ZB-V           | at most ZB-H1's (m ≥ p)                         |
//! | interleaved ZB v | (p − 1) / (3·v·m + p − 1), m a multiple of p  |
//! | looped BFS v   | 1 − v·m / ((v − 1)·max(m, p) + m + p − 1): interleaved's from m ≥ p |

mod replay;

use pipetrain_schedules::{Costs, Plan, ScheduleKind, simulate};

/// The second opinion: the makespan and the bubble fraction (idle over ranks × makespan) of
/// `plan`'s programs as [`replay::replay`] runs them.
///
/// # Panics
/// If the programs deadlock.
fn second_opinion(plan: &Plan) -> (f64, f64) {
    second_opinion_with(plan, false)
}

/// [`second_opinion`], each overlap run at once where `overlaps` (max(F, B)).
fn second_opinion_with(plan: &Plan, overlaps: bool) -> (f64, f64) {
    let slots = match overlaps {
        false => replay::replay(plan, 1.0, 2.0),
        true => replay::replay_with(plan, 1.0, 2.0, true),
    };
    let makespan = slots.iter().flatten().map(|s| s.1).fold(0.0, f64::max);
    let busy: f64 = slots
        .iter()
        .flatten()
        .map(|(start, end, _)| end - start)
        .sum();
    (makespan, 1.0 - busy / (slots.len() as f64 * makespan))
}

/// Every schedule over ranks p and micro-batches m (interleaved 1F1B and zero bubble at v = 2
/// and 3 where m is a multiple of p, looped BFS at v = 2 and 3), with its plan.
fn sweep() -> Vec<(ScheduleKind, usize, usize, Plan)> {
    let mut kinds = vec![
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::ZbH1,
        ScheduleKind::ZbV,
    ];
    kinds.extend((2..=3).map(|v| ScheduleKind::Interleaved { virtual_stages: v }));
    kinds.extend((2..=3).map(|v| ScheduleKind::LoopedBfs { virtual_stages: v }));
    kinds.extend((2..=3).map(|v| ScheduleKind::InterleavedZb { virtual_stages: v }));
    kinds.extend([
        ScheduleKind::DualPipeV,
        ScheduleKind::VMin,
        ScheduleKind::VHalf,
        ScheduleKind::Zb2p,
    ]);
    let mut plans = Vec::new();
    for kind in kinds {
        for p in 1..=5 {
            for m in 1..=10 {
                let interleaved = matches!(
                    kind,
                    ScheduleKind::Interleaved { .. } | ScheduleKind::InterleavedZb { .. }
                );
                if interleaved && m % p != 0 {
                    continue;
                }
                if kind == ScheduleKind::DualPipeV && m < 2 * p {
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
            // ZB-H1's idle, p − 1 chunk-steps, over v times the work.
            ScheduleKind::InterleavedZb { virtual_stages: v } => {
                Some((p_ - 1.0) / (3.0 * v as f64 * m_ + p_ - 1.0))
            }
            // GPipe looped v times: each loop but the last takes max(m, p) steps on rank 0.
            ScheduleKind::LoopedBfs { virtual_stages: v } => {
                let v = v as f64;
                let steps = (v - 1.0) * m_.max(p_) + m_ + p_ - 1.0;
                if m >= p {
                    let interleaved = (p_ - 1.0) / (v * m_ + p_ - 1.0);
                    assert!((1.0 - v * m_ / steps - interleaved).abs() < 1e-9);
                }
                Some(1.0 - v * m_ / steps)
            }
            // The closed form holds once every stage has a W to fill its cool-down with.
            ScheduleKind::ZbH1 if m >= p => Some(zb_h1),
            ScheduleKind::ZbH1 => None,
            // No closed form; tests/torch_orders.rs holds the order to PyTorch's.
            ScheduleKind::DualPipeV => None,
            // The controllable-memory paper's rates (F = I = W, its Table 1): about 2p/(3m) for
            // V-Min and p/(2m) for V-Half. The squeezed plans stay within them on every shape,
            // and within 1F1B's bubble.
            ScheduleKind::VMin | ScheduleKind::VHalf => {
                let rate = match kind {
                    ScheduleKind::VMin => 2.0 * p_ / (3.0 * m_),
                    _ => p_ / (2.0 * m_),
                };
                assert!(
                    bubble <= rate.min(one_f_one_b) + 1e-9,
                    "{kind} p={p} m={m}: {bubble} > {rate}, 1f1b {one_f_one_b}\n{plan}"
                );
                None
            }
            // Under a synchronous step no schedule of one stage per rank beats ZB-H1's
            // (p − 1)/(3m + p − 1) at F = I = W (the last rank starts p − 1 steps late and has
            // 3m to do); ZB-2P reaches it with any m ≥ p. Its gain is at other costs (tests in
            // controllable_memory.rs).
            ScheduleKind::Zb2p if m >= p => Some(zb_h1),
            ScheduleKind::Zb2p => None,
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

/// DualPipeV's overlaps: the second opinion runs each pair at once (max(F, B)) as
/// `simulate` under `Costs::overlaps` does, and in sequence (F + B, each half when its own
/// input is there) as it does by default; at once is never slower, and strictly faster on
/// every shape swept (each pair saves F = 1 where it does not wait).
#[test]
fn the_second_opinion_agrees_with_simulate_on_overlaps() {
    let mut shapes = 0;
    for (kind, p, m, plan) in sweep() {
        if kind != ScheduleKind::DualPipeV {
            continue;
        }
        let costs = Costs::uniform(plan.stages(), 1.0, 2.0);
        let mut makespans = Vec::new();
        for overlaps in [false, true] {
            let (makespan, bubble) = second_opinion_with(&plan, overlaps);
            let sim = simulate(&plan, &costs.clone().with_overlaps(overlaps)).unwrap();
            assert!(
                (sim.makespan - makespan).abs() < 1e-9
                    && (sim.bubble_fraction - bubble).abs() < 1e-9,
                "{kind} p={p} m={m} overlaps={overlaps}: simulate says makespan {} bubble {}, \
                 the second opinion {makespan} {bubble}\n{plan}",
                sim.makespan,
                sim.bubble_fraction
            );
            makespans.push(makespan);
        }
        assert!(
            makespans[1] < makespans[0],
            "{kind} p={p} m={m}: {makespans:?}"
        );
        shapes += 1;
    }
    assert!(shapes >= 5, "only {shapes} DualPipeV shapes");
}

/// The checker itself: a plan whose backward on stage 0 comes before stage 1's produced the
/// gradient it needs would wait forever.
#[test]
#[should_panic(expected = "deadlock: rank 0 at 0B0")]
fn the_second_opinion_finds_a_deadlock() {
    let plan: Plan = "0: 0F0 0B0\n1: 1B0 1F0\n".parse().unwrap();
    second_opinion(&plan);
}
