//! Property tests over every schedule for p ≤ 8, m ≤ 64.

use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};
use pipetrain_schedules::{
    Action, ActionKind, Costs, Lowering, MicroBatchId, Plan, ScheduleKind, StageId, lower,
    simulate, validate,
};
use proptest::prelude::*;

fn shapes() -> impl Iterator<Item = (usize, usize)> {
    (1..=8).flat_map(|p| (1..=64).map(move |m| (p, m)))
}

#[test]
fn every_plan_validates_compute_only_and_lowered() {
    for kind in ScheduleKind::ALL {
        for (p, m) in shapes() {
            let compute = kind.plan(p, m).unwrap();
            validate(&compute).unwrap_or_else(|e| panic!("{kind} p={p} m={m}: {e}"));
            let lowered = lower(&compute, Lowering::default());
            validate(&lowered).unwrap_or_else(|e| panic!("{kind} p={p} m={m} lowered: {e}"));
        }
    }
}

#[test]
fn uniform_bubble_is_p_minus_1_over_m_plus_p_minus_1() {
    for kind in [ScheduleKind::GPipe, ScheduleKind::OneFOneB] {
        for (p, m) in shapes() {
            let expected = (p - 1) as f64 / (m + p - 1) as f64;
            let costs = Costs::uniform(p, 1.0, 2.0);
            for plan in [
                kind.plan(p, m).unwrap(),
                lower(&kind.plan(p, m).unwrap(), Lowering::default()),
            ] {
                let sim = simulate(&plan, &costs).unwrap();
                assert!(
                    (sim.bubble_fraction - expected).abs() < 1e-9,
                    "{kind} p={p} m={m}: bubble {} != {expected}",
                    sim.bubble_fraction
                );
                assert!((sim.makespan - 3.0 * (m + p - 1) as f64).abs() < 1e-9);
            }
        }
    }
}

#[test]
fn gpipe_stashes_m_and_1f1b_at_most_p_minus_s() {
    for (p, m) in shapes() {
        let gpipe = simulate(
            &ScheduleKind::GPipe.plan(p, m).unwrap(),
            &Costs::uniform(p, 1.0, 2.0),
        )
        .unwrap();
        assert_eq!(gpipe.stages[0].peak_stash, m, "gpipe p={p} m={m}");
        let ofob = simulate(
            &ScheduleKind::OneFOneB.plan(p, m).unwrap(),
            &Costs::uniform(p, 1.0, 2.0),
        )
        .unwrap();
        for st in &ofob.stages {
            let s = st.stage.index();
            assert!(
                st.peak_stash <= p - s,
                "1f1b p={p} m={m} {}: {}",
                st.stage,
                st.peak_stash
            );
            assert_eq!(
                st.peak_stash,
                (p - s).min(m),
                "1f1b p={p} m={m} {}",
                st.stage
            );
        }
    }
}

#[test]
fn backwards_run_in_ascending_micro_batch_order_in_every_schedule() {
    // Gradients accumulate in program order; equal orders make schedules bitwise equal. A
    // schedule runs either full backwards or split ones, each kind in ascending order.
    for kind in ScheduleKind::ALL {
        for (p, m) in shapes() {
            let plan = kind.plan(p, m).unwrap();
            for program in plan.programs() {
                let order = |kinds: &[ActionKind]| -> Vec<MicroBatchId> {
                    program
                        .iter()
                        .filter(|a| kinds.contains(&a.kind))
                        .map(|a| a.mb())
                        .collect()
                };
                let all = MicroBatchId::range(m).collect::<Vec<_>>();
                if kind.splits_backward() {
                    assert!(
                        order(&[ActionKind::Backward]).is_empty(),
                        "{kind} p={p} m={m}"
                    );
                    assert_eq!(
                        order(&[ActionKind::BackwardInput]),
                        all,
                        "{kind} p={p} m={m}"
                    );
                    assert_eq!(
                        order(&[ActionKind::BackwardWeight]),
                        all,
                        "{kind} p={p} m={m}"
                    );
                } else {
                    assert_eq!(order(&[ActionKind::Backward]), all, "{kind} p={p} m={m}");
                }
            }
        }
    }
}

/// Total idle time over the stages.
fn idle(sim: &pipetrain_schedules::Simulation) -> f64 {
    sim.stages.iter().map(|s| s.idle).sum()
}

fn peak(sim: &pipetrain_schedules::Simulation) -> usize {
    sim.stages.iter().map(|s| s.peak_stash).max().unwrap_or(0)
}

#[test]
fn zb_h1_has_at_most_half_1f1b_bubble_at_1f1b_peak_stash() {
    // T_F = T_I = T_W = 1 (a full backward costs 2), free transfers: the paper's setting.
    for (p, m) in shapes() {
        let costs = Costs::uniform(p, 1.0, 2.0);
        let zb = lower(&ScheduleKind::ZbH1.plan(p, m).unwrap(), Lowering::default());
        let zb = simulate(&zb, &costs).unwrap();
        let ofob = simulate(&ScheduleKind::OneFOneB.plan(p, m).unwrap(), &costs).unwrap();
        let at = format!("p={p} m={m}: zb-h1 {zb:?}\n1f1b {ofob:?}");
        assert!(zb.bubble_fraction <= ofob.bubble_fraction + 1e-12, "{at}");
        assert!(peak(&zb) <= peak(&ofob), "peak stash {at}");
        assert_eq!(peak(&zb), p.min(m), "{at}");
        if m >= p {
            // The paper's claim, exactly: (p − 1)·T_F idle per stage, a third of 1F1B's.
            assert!(
                zb.bubble_fraction <= ofob.bubble_fraction / 2.0 + 1e-12,
                "{at}"
            );
            assert!((idle(&zb) * 3.0 - idle(&ofob)).abs() < 1e-9, "{at}");
            assert!((zb.makespan - (3 * m + p - 1) as f64).abs() < 1e-9, "{at}");
        } else {
            // Too few W's to fill the drain: at most two thirds of 1F1B's idle time.
            assert!(idle(&zb) * 3.0 <= idle(&ofob) * 2.0 + 1e-9, "{at}");
        }
    }
}

#[test]
fn zb_h1_stashes_at_most_p_on_every_stage_and_holds_back_s_weights_on_stage_s() {
    for (p, m) in shapes() {
        let plan = ScheduleKind::ZbH1.plan(p, m).unwrap();
        for (s, program) in plan.programs().iter().enumerate() {
            assert!(
                pipetrain_schedules::peak_stash(program) <= p.min(m),
                "p={p} m={m} s={s}"
            );
            let trailing = program
                .iter()
                .rev()
                .take_while(|a| a.kind == ActionKind::BackwardWeight)
                .count();
            assert_eq!(
                trailing,
                (s + 1).min(m),
                "p={p} m={m} stage {s}: {program:?}"
            );
        }
    }
}

#[test]
fn plan_text_round_trips() {
    for kind in ScheduleKind::ALL {
        for (p, m) in [(1, 1), (3, 2), (4, 8), (8, 64)] {
            let plan = lower(&kind.plan(p, m).unwrap(), Lowering::default());
            assert_eq!(plan.to_string().parse::<Plan>().unwrap(), plan);
        }
    }
}

#[test]
fn zero_stages_or_micro_batches_are_errors_with_a_remedy() {
    let count = |setting, n| Some(Remedy::set(setting, Value::Count(n)));
    let e = ScheduleKind::GPipe.plan(0, 4).unwrap_err();
    assert!(e.to_string().contains("stages = 0"), "{e}");
    assert_eq!(e.remedy(), count(Setting::Stages, 1));
    let e = ScheduleKind::OneFOneB.plan(2, 0).unwrap_err();
    assert!(e.to_string().contains("micro_batches = 0"), "{e}");
    assert_eq!(e.remedy(), count(Setting::MicroBatches, 1));
    let e = "zb".parse::<ScheduleKind>().unwrap_err().to_string();
    assert!(e.contains("`zb`") && e.contains("gpipe, 1f1b"), "{e}");
}

fn any_action() -> impl Strategy<Value = Action> {
    (
        0u32..1000,
        prop::sample::select(ActionKind::ALL.to_vec()),
        0u32..100_000,
    )
        .prop_map(|(s, kind, mb)| {
            if kind.is_skip() {
                Action::skip(StageId(s), kind, MicroBatchId(mb), StageId(mb % 1000))
            } else if kind == ActionKind::Overlap {
                Action::overlap(
                    Action::forward(StageId(s), MicroBatchId(mb)),
                    Action::backward(StageId(mb % 1000), MicroBatchId(s)),
                )
            } else if kind.has_micro_batch() {
                Action::new(StageId(s), kind, MicroBatchId(mb))
            } else if kind == ActionKind::AllReduce {
                Action::all_reduce(StageId(s))
            } else {
                Action::optimizer_step(StageId(s))
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..ProptestConfig::default() })]

    #[test]
    fn action_text_round_trips(action in any_action()) {
        let text = action.to_string();
        prop_assert_eq!(text.parse::<Action>().unwrap(), action);
    }

    #[test]
    fn parsing_accepts_only_what_printing_produces(text in "[0-9]{0,3}[A-Z]{0,4}[0-9]{0,3}(\\+[0-9]{0,3}[A-Z]{0,2}[0-9]{0,3})?") {
        if let Ok(action) = text.parse::<Action>() {
            prop_assert_eq!(action.to_string(), text);
        }
    }
}

#[test]
fn interleaved_bubble_is_p_minus_1_over_v_m_plus_p_minus_1() {
    for v in 2..=4 {
        let kind = ScheduleKind::Interleaved { virtual_stages: v };
        for (p, m) in shapes().filter(|(p, m)| m % p == 0) {
            let compute = kind.plan(p, m).unwrap();
            assert_eq!((compute.ranks(), compute.stages()), (p, p * v));
            validate(&compute).unwrap_or_else(|e| panic!("{kind} p={p} m={m}: {e}"));
            let lowered = lower(&compute, Lowering::default());
            // Uniform costs per chunk; transfers free.
            let sim = simulate(&lowered, &Costs::uniform(p * v, 1.0, 2.0))
                .unwrap_or_else(|e| panic!("{kind} p={p} m={m} lowered: {e}"));
            let expected = (p - 1) as f64 / (v * m + p - 1) as f64;
            assert!(
                (sim.bubble_fraction - expected).abs() < 1e-9,
                "{kind} p={p} m={m}: bubble {} != {expected}",
                sim.bubble_fraction
            );
            for (r, st) in sim.stages.iter().enumerate() {
                let bound = ((v - 1) * p + 2 * (p - r - 1) + 1).min(m * v);
                assert!(st.peak_stash <= bound, "{kind} p={p} m={m} rank {r}");
            }
            for stage in StageId::range(p * v) {
                assert_eq!(compute.rank_of(stage), Some(stage.index() % p));
                let rank = &compute.programs()[stage.index() % p];
                let order: Vec<_> = rank
                    .iter()
                    .filter(|a| a.stage == stage && a.kind == ActionKind::Backward)
                    .map(|a| a.mb())
                    .collect();
                assert_eq!(order, MicroBatchId::range(m).collect::<Vec<_>>());
            }
        }
    }
}

#[test]
fn interleaved_refuses_one_chunk_and_ragged_rounds() {
    let kind = |v| ScheduleKind::Interleaved { virtual_stages: v };
    let e = kind(1).plan(4, 8).unwrap_err();
    assert!(e.to_string().contains("at least 2"), "{e}");
    // Not also `1f1b` (the facts say 1 chunk is 1f1b): beside the chunks given, the command
    // line refuses it with `--schedule interleaved`, which led back (tests/cli/remedies.rs).
    assert_eq!(
        e.remedy(),
        Some(Remedy::set(Setting::VirtualStages, Value::Count(2)))
    );
    let e = kind(2).plan(4, 6).unwrap_err();
    assert!(e.to_string().contains('6'), "{e}");
    let micro_batches = |n| Remedy::set(Setting::MicroBatches, Value::Count(n));
    assert_eq!(
        e.remedy(),
        Some(Remedy::one_of([micro_batches(4), micro_batches(8)]))
    );
    assert_eq!("interleaved".parse::<ScheduleKind>().unwrap(), kind(2));
    assert_eq!("interleaved-v3".parse::<ScheduleKind>().unwrap(), kind(3));
    assert_eq!(kind(3).to_string(), "interleaved-v3");
}

#[test]
fn the_validator_catches_an_interleaved_plan_that_deadlocks() {
    // Rank 0 holds stages 0 and 2, rank 1 stages 1 and 3. Rank 0 forwards stage 2 before
    // stage 0 has sent anything downstream: stage 2 waits for stage 1, which waits for stage 0.
    let plan: Plan = "0: 2F0 0F0 0B0 2B0\n1: 1F0 3F0 3B0 1B0\n".parse().unwrap();
    assert_eq!(plan.rank_of(StageId(2)), Some(0));
    let e = validate(&plan).unwrap_err().to_string();
    assert!(e.contains("deadlock") && e.contains(">2F0<"), "{e}");
    // An action on a stage another rank holds.
    let plan: Plan = "0: 0F0 2F0 2B0 0B0\n1: 1F0 2B0\n".parse().unwrap();
    let e = validate(&plan).unwrap_err().to_string();
    assert!(e.contains("which this program's rank does not hold"), "{e}");
}

#[test]
fn looped_bfs_validates_stashes_every_chunk_and_runs_each_stages_backwards_oldest_first() {
    for v in 2..=3 {
        let kind = ScheduleKind::LoopedBfs { virtual_stages: v };
        for (p, m) in shapes().filter(|&(p, m)| p <= 5 && m <= 16) {
            let what = format!("{kind} p={p} m={m}");
            let compute = kind.plan(p, m).unwrap();
            assert_eq!((compute.ranks(), compute.stages()), (p, p * v), "{what}");
            let lowered = lower(&compute, Lowering::default());
            validate(&lowered).unwrap_or_else(|e| panic!("{what} lowered: {e}"));
            let sim = simulate(&lowered, &Costs::uniform(p * v, 1.0, 2.0)).unwrap();
            for (r, st) in sim.stages.iter().enumerate() {
                assert_eq!(st.peak_stash, v * m, "{what} rank {r}: GPipe's memory");
            }
            for stage in StageId::range(p * v) {
                assert_eq!(compute.rank_of(stage), Some(stage.index() % p), "{what}");
                let rank = &compute.programs()[stage.index() % p];
                let of = |kind| -> Vec<MicroBatchId> {
                    let on = |a: &&Action| a.stage == stage && a.kind == kind;
                    rank.iter().filter(on).map(|a| a.mb()).collect()
                };
                let all: Vec<_> = MicroBatchId::range(m).collect();
                assert_eq!(of(ActionKind::Forward), all, "{what} {stage}");
                assert_eq!(of(ActionKind::Backward), all, "{what} {stage}");
            }
        }
    }
    let e = ScheduleKind::LoopedBfs { virtual_stages: 1 }
        .plan(2, 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("looped-bfs") && e.contains("it is gpipe"), "{e}");
    let parsed = |name: &str| name.parse::<ScheduleKind>().unwrap();
    assert_eq!(
        parsed("looped-bfs"),
        ScheduleKind::LoopedBfs { virtual_stages: 2 }
    );
    assert_eq!(parsed("looped-bfs-v3").to_string(), "looped-bfs-v3");
}

#[test]
fn interleaved_zb_splits_every_backward_and_cuts_zb_h1s_bubble_v_fold() {
    for v in 2..=3 {
        let kind = ScheduleKind::InterleavedZb { virtual_stages: v };
        assert!(kind.splits_backward());
        for (p, m) in shapes().filter(|&(p, m)| p <= 5 && m <= 20 && m % p == 0) {
            let what = format!("{kind} p={p} m={m}");
            let compute = kind.plan(p, m).unwrap();
            assert_eq!((compute.ranks(), compute.stages()), (p, p * v), "{what}");
            let lowered = lower(&compute, Lowering::default());
            let sim = simulate(&lowered, &Costs::uniform(p * v, 1.0, 2.0))
                .unwrap_or_else(|e| panic!("{what} lowered: {e}"));
            // F = I = W = 1 per chunk: p − 1 idle steps per rank, ZB-H1's over v times the work.
            let expected = (p - 1) as f64 / (3 * v * m + p - 1) as f64;
            assert!(
                (sim.bubble_fraction - expected).abs() < 1e-9,
                "{what}: bubble {} != {expected}",
                sim.bubble_fraction
            );
            // Rank r holds its warm-up forwards, one more, and the r W's it holds back.
            for (r, st) in sim.stages.iter().enumerate() {
                let bound = ((v - 1) * p + (p - r - 1) + 1 + r).min(m * v);
                assert!(st.peak_stash <= bound, "{what} rank {r}: {}", st.peak_stash);
            }
            for stage in StageId::range(p * v) {
                let rank = &compute.programs()[stage.index() % p];
                let of = |kind| -> Vec<MicroBatchId> {
                    let on = |a: &&Action| a.stage == stage && a.kind == kind;
                    rank.iter().filter(on).map(|a| a.mb()).collect()
                };
                let all: Vec<_> = MicroBatchId::range(m).collect();
                let split = [
                    ActionKind::Forward,
                    ActionKind::BackwardInput,
                    ActionKind::BackwardWeight,
                ];
                for kind in split {
                    assert_eq!(of(kind), all, "{what} {stage} {kind}");
                }
                assert!(of(ActionKind::Backward).is_empty(), "{what} {stage}");
            }
        }
    }
    let kind = |v| ScheduleKind::InterleavedZb { virtual_stages: v };
    let e = kind(1).plan(2, 4).unwrap_err().to_string();
    assert!(
        e.contains("interleaved-zb") && e.contains("it is zb-h1"),
        "{e}"
    );
    assert!(kind(2).plan(2, 3).is_err(), "3 micro-batches over 2 ranks");
    let parsed = |name: &str| name.parse::<ScheduleKind>().unwrap();
    assert_eq!(parsed("interleaved-zb"), kind(2));
    assert_eq!(parsed("interleaved-zb-v3").to_string(), "interleaved-zb-v3");
}

#[test]
fn dualpipev_validates_in_a_v_and_accumulates_each_stage_in_micro_batch_order() {
    let kind = ScheduleKind::DualPipeV;
    assert!(kind.splits_backward());
    for (p, m) in shapes().filter(|&(p, m)| p <= 5 && m <= 24 && m >= 2 * p) {
        let what = format!("{kind} p={p} m={m}");
        let compute = kind.plan(p, m).unwrap();
        assert_eq!((compute.ranks(), compute.stages()), (p, 2 * p), "{what}");
        for r in 0..p {
            let held: Vec<StageId> = compute.stages_of(r).collect();
            assert_eq!(
                held,
                [StageId::from(r), StageId::from(2 * p - 1 - r)],
                "{what}"
            );
        }
        let lowered = lower(&compute, Lowering::default());
        validate(&lowered).unwrap_or_else(|e| panic!("{what} lowered: {e}"));
        for stage in StageId::range(2 * p) {
            let rank = &compute.programs()[compute.rank_of(stage).unwrap()];
            let of = |kinds: &[ActionKind]| -> Vec<MicroBatchId> {
                // An overlap is its forward and its backward.
                let on = |a: &Action| a.stage == stage && kinds.contains(&a.kind);
                let halves = rank.iter().flat_map(Action::in_sequence);
                halves.filter(on).map(|a| a.mb()).collect()
            };
            let all: Vec<_> = MicroBatchId::range(m).collect();
            use ActionKind::{Backward, BackwardInput, BackwardWeight, Forward};
            assert_eq!(of(&[Forward]), all, "{what} {stage}");
            assert_eq!(of(&[Backward, BackwardInput]), all, "{what} {stage}");
            // Weight gradients (a full backward's or a W's) in ascending order: 1F1B's.
            assert_eq!(of(&[Backward, BackwardWeight]), all, "{what} {stage}");
        }
    }
    let e = kind.plan(3, 5).unwrap_err();
    assert!(
        e.to_string()
            .contains("at least as many micro-batches as its 6"),
        "{e}"
    );
    let micro_batches = Remedy::set(Setting::MicroBatches, Value::Count(6));
    assert_eq!(e.remedy(), Some(micro_batches));
    assert_eq!("dualpipev".parse::<ScheduleKind>().unwrap(), kind);
}

#[test]
fn zb_v_has_at_most_zb_h1_bubble_at_1f1b_activation_memory() {
    for (p, m) in shapes() {
        let plan = ScheduleKind::ZbV.plan(p, m).unwrap();
        assert_eq!((plan.ranks(), plan.stages()), (p, 2 * p));
        validate(&plan).unwrap_or_else(|e| panic!("zb-v p={p} m={m}: {e}"));
        // The V: rank r holds stages r and 2p − 1 − r.
        for r in 0..p {
            let held: Vec<StageId> = plan.stages_of(r).collect();
            assert_eq!(held, [StageId::from(r), StageId::from(2 * p - 1 - r)]);
        }
        // A chunk is half a stage: F = I = W = 1/2 against ZB-H1's 1.
        let zb_v = simulate(
            &lower(&plan, Lowering::default()),
            &Costs::uniform(2 * p, 0.5, 1.0),
        )
        .unwrap_or_else(|e| panic!("zb-v p={p} m={m} lowered: {e}"));
        let zb_h1 = simulate(
            &ScheduleKind::ZbH1.plan(p, m).unwrap(),
            &Costs::uniform(p, 1.0, 2.0),
        )
        .unwrap();
        assert!(
            zb_v.bubble_fraction <= zb_h1.bubble_fraction + 1e-12,
            "p={p} m={m}: zb-v {} > zb-h1 {}",
            zb_v.bubble_fraction,
            zb_h1.bubble_fraction
        );
        // Chunk activations per rank: at most twice 1F1B's stage activations (min(p, m)).
        for st in &zb_v.stages {
            assert!(st.peak_stash <= 2 * p.min(m), "p={p} m={m}: {st:?}");
        }
        for stage in StageId::range(2 * p) {
            let program = &plan.programs()[plan.rank_of(stage).unwrap()];
            for kind in [
                ActionKind::Forward,
                ActionKind::BackwardInput,
                ActionKind::BackwardWeight,
            ] {
                let order: Vec<_> = program
                    .iter()
                    .filter(|a| a.stage == stage && a.kind == kind)
                    .map(|a| a.mb())
                    .collect();
                assert_eq!(
                    order,
                    MicroBatchId::range(m).collect::<Vec<_>>(),
                    "p={p} m={m}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, rng_seed: proptest::test_runner::RngSeed::Fixed(11), ..ProptestConfig::default() })]

    /// A hand-edited plan (two neighbouring actions of a rank swapped) is either refused by
    /// the validator or runs to completion in the dry run: the check itself never hangs, and
    /// what it accepts cannot deadlock.
    #[test]
    fn a_swapped_plan_is_refused_or_runs_to_completion(
        which in 0usize..7,
        p in 1usize..=4,
        rounds in 1usize..=3,
        at in any::<prop::sample::Index>(),
    ) {
        let kinds = [
            ScheduleKind::OneFOneB,
            ScheduleKind::ZbH1,
            ScheduleKind::Interleaved { virtual_stages: 2 },
            ScheduleKind::ZbV,
            ScheduleKind::VMin,
            ScheduleKind::VHalf,
            ScheduleKind::Zb2p,
        ];
        let plan = kinds[which].plan(p, p * rounds).unwrap();
        let mut programs = plan.programs().to_vec();
        let rank = at.index(p);
        let steps = programs[rank].len();
        let i = at.index(steps - 1);
        programs[rank].swap(i, i + 1);
        let edited = Plan::from_programs(programs);
        let lowered = lower(&edited, Lowering::default());
        if validate(&lowered).is_ok() {
            let sim = simulate(&lowered, &Costs::uniform(edited.stages(), 1.0, 2.0)).unwrap();
            prop_assert!(sim.makespan.is_finite());
        }
    }
}
