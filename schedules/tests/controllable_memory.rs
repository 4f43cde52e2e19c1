//! The controllable-memory schedules (issue 51): V-Min and V-Half hold the paper's fraction of
//! 1F1B's activations on every rank over a grid of p and m, ZB-2P at most twice 1F1B's, and
//! each stage runs its passes in ascending micro-batch order (what makes them bitwise equal to
//! the other split-backward schedules over the same chunks).

use pipetrain_schedules::{
    ActionKind, Costs, Lowering, MicroBatchId, ScheduleKind, StageId, lower, simulate, validate,
};

/// Each stage's F, I and W of every micro-batch, in ascending micro-batch order.
fn ascending(kind: ScheduleKind, p: usize, m: usize) {
    let plan = kind.plan(p, m).unwrap();
    for stage in StageId::range(plan.stages()) {
        let program = &plan.programs()[plan.rank_of(stage).unwrap()];
        for k in [
            ActionKind::Forward,
            ActionKind::BackwardInput,
            ActionKind::BackwardWeight,
        ] {
            let order: Vec<_> = program
                .iter()
                .filter(|a| a.stage == stage && a.kind == k)
                .map(|a| a.mb())
                .collect();
            let all: Vec<_> = MicroBatchId::range(m).collect();
            assert_eq!(order, all, "{kind} p={p} m={m} {stage:?} {k:?}");
        }
    }
}

#[test]
fn v_min_and_v_half_hold_the_papers_fraction_of_1f1b_on_every_rank() {
    for p in 1..=12 {
        for m in 1..=40 {
            for (kind, stages) in [
                (ScheduleKind::VMin, (p + 4) / 3),
                (ScheduleKind::VHalf, (p + 2) / 2),
            ] {
                let plan = kind.plan(p, m).unwrap();
                assert_eq!((plan.ranks(), plan.stages()), (p, 2 * p));
                for r in 0..p {
                    let held: Vec<StageId> = plan.stages_of(r).collect();
                    assert_eq!(held, [StageId::from(r), StageId::from(2 * p - 1 - r)]);
                }
                let lowered = lower(&plan, Lowering::default());
                validate(&lowered).unwrap_or_else(|e| panic!("{kind} p={p} m={m}: {e}"));
                let sim = simulate(&lowered, &Costs::uniform(2 * p, 0.5, 1.0)).unwrap();
                // Chunk activations: two a stage's. Never more than the bound, which is
                // reached once the micro-batches fill a block's lifespan.
                let most = sim.stages.iter().map(|s| s.peak_stash).max().unwrap();
                assert!(most <= 2 * stages, "{kind} p={p} m={m}: {most}");
                if m >= 2 * p + 2 {
                    assert_eq!(most, 2 * stages, "{kind} p={p} m={m}");
                }
                ascending(kind, p, m);
            }
        }
    }
}

/// Issue 51's bar: at 4 stages and 16 micro-batches V-Min's first rank holds at most half of
/// 1F1B's first stage's activations, and V-Half's ⌊(p + 2)/2⌋ = 3 of 1F1B's 4.
#[test]
fn at_4_stages_and_16_micro_batches_v_min_holds_half_of_1f1b_and_v_half_three_quarters() {
    let first = |kind: ScheduleKind| {
        let plan = lower(&kind.plan(4, 16).unwrap(), Lowering::default());
        let sim = simulate(&plan, &Costs::uniform(plan.stages(), 1.0, 2.0)).unwrap();
        sim.stages[0].peak_stash as f64 / kind.virtual_stages() as f64
    };
    let one_f_one_b = first(ScheduleKind::OneFOneB);
    assert_eq!(one_f_one_b, 4.0);
    assert!(first(ScheduleKind::VMin) <= one_f_one_b / 2.0);
    assert!(first(ScheduleKind::VHalf) <= one_f_one_b * 3.0 / 4.0);
}

/// ZB-2P holds min(m, 2p) micro-batches on every rank (1F1B's first stage holds min(m, p)),
/// and where an input gradient costs more than a weight gradient (here I = 2W = 2F, where
/// ZB-H1 idles (p − 1)·(F + I − W)) its step is shorter than ZB-H1's from m = 2p on.
#[test]
fn zb_2p_holds_at_most_twice_1f1b_and_beats_zb_h1_where_input_gradients_cost_more() {
    for p in 2..=6 {
        for m in 1..=4 * p {
            let plan = lower(&ScheduleKind::Zb2p.plan(p, m).unwrap(), Lowering::default());
            validate(&plan).unwrap_or_else(|e| panic!("zb-2p p={p} m={m}: {e}"));
            let costs = Costs {
                weight_fraction: 1.0 / 3.0,
                ..Costs::uniform(p, 1.0, 3.0)
            };
            let sim = simulate(&plan, &costs).unwrap();
            for st in &sim.stages {
                assert_eq!(st.peak_stash, m.min(2 * p), "zb-2p p={p} m={m}");
            }
            let zb_h1 = lower(&ScheduleKind::ZbH1.plan(p, m).unwrap(), Lowering::default());
            let zb_h1 = simulate(&zb_h1, &costs).unwrap();
            assert!(sim.makespan <= zb_h1.makespan + 1e-9, "p={p} m={m}");
            if m >= 2 * p {
                assert!(
                    sim.makespan < zb_h1.makespan,
                    "p={p} m={m}: zb-2p {} against zb-h1 {}",
                    sim.makespan,
                    zb_h1.makespan
                );
            }
            ascending(ScheduleKind::Zb2p, p, m);
        }
    }
}
