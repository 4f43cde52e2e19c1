//! Property tests over every schedule for p ≤ 8, m ≤ 64.

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
    for kind in ScheduleKind::ALL {
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
    // Gradients accumulate in program order; equal orders make schedules bitwise equal.
    for kind in ScheduleKind::ALL {
        for (p, m) in shapes() {
            let plan = kind.plan(p, m).unwrap();
            for program in plan.programs() {
                let order: Vec<_> = program
                    .iter()
                    .filter(|a| a.kind == ActionKind::Backward)
                    .map(|a| a.mb())
                    .collect();
                assert_eq!(
                    order,
                    MicroBatchId::range(m).collect::<Vec<_>>(),
                    "{kind} p={p} m={m}"
                );
            }
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
    let e = ScheduleKind::GPipe.plan(0, 4).unwrap_err().to_string();
    assert!(e.contains("stages = 0") && e.contains(".stages(1)"), "{e}");
    let e = ScheduleKind::OneFOneB.plan(2, 0).unwrap_err().to_string();
    assert!(
        e.contains("micro_batches = 0") && e.contains(".micro_batches(1)"),
        "{e}"
    );
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
            if kind.has_micro_batch() {
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
    fn parsing_accepts_only_what_printing_produces(text in "[0-9]{0,3}[A-Z]{0,4}[0-9]{0,3}") {
        if let Ok(action) = text.parse::<Action>() {
            prop_assert_eq!(action.to_string(), text);
        }
    }
}
