//! ZeRO-2/3 in the IR: `lower` places the reduce (`RG`), unshard (`US`) and reshard (`RS`)
//! actions; `validate` checks their order; `simulate` charges their communication.

use pipetrain_schedules::{
    Action, ActionKind, Costs, Lowering, Plan, ScheduleError, ScheduleKind, StageId, Violation,
    Zero, inference_at, lower, simulate, validate, validate_inference,
};

/// Every schedule kind, one and several stages per rank.
fn kinds() -> Vec<ScheduleKind> {
    let mut kinds = ScheduleKind::ALL.to_vec();
    kinds.extend([
        ScheduleKind::Interleaved { virtual_stages: 2 },
        ScheduleKind::LoopedBfs { virtual_stages: 2 },
        ScheduleKind::InterleavedZb { virtual_stages: 2 },
        ScheduleKind::ZbV,
        ScheduleKind::DualPipeV,
        ScheduleKind::VMin,
        ScheduleKind::VHalf,
    ]);
    kinds
}

fn count(program: &[Action], stage: StageId, kind: ActionKind) -> usize {
    program
        .iter()
        .filter(|a| a.stage == stage && a.kind == kind)
        .count()
}

#[test]
fn every_schedule_lowers_to_a_valid_plan_at_every_level() {
    for kind in kinds() {
        for ranks in 1..=3 {
            for m in [ranks, 2 * ranks + 1] {
                let Ok(compute) = kind.plan(ranks, m) else {
                    continue;
                };
                for plan in [compute.clone(), compute.by_stage()] {
                    for zero in Zero::ALL {
                        for last in [true, false] {
                            let lowering = Lowering {
                                all_reduce: last,
                                optimizer_step: last,
                                zero,
                            };
                            let lowered = lower(&plan, lowering);
                            validate(&lowered).unwrap_or_else(|e| {
                                panic!("{kind} p={ranks} m={m} {zero} last={last}: {e}")
                            });
                            check_placement(&lowered, zero, last);
                        }
                    }
                }
            }
        }
    }
}

/// Each stage has one reduce at levels 2–3 (none at 0–1), one unshard and one reshard around
/// all its computation at level 3, an unshard after the optimizer step at level 2.
fn check_placement(plan: &Plan, zero: Zero, last: bool) {
    for program in plan.programs() {
        let stages: Vec<StageId> = StageId::range(plan.stages())
            .filter(|&s| program.iter().any(|a| a.stage == s))
            .collect();
        for s in stages {
            let n = |kind| count(program, s, kind);
            assert_eq!(
                n(ActionKind::ReduceGrad),
                usize::from(zero.shards_gradients())
            );
            let all_reduce = last && !zero.shards_gradients();
            assert_eq!(n(ActionKind::AllReduce), usize::from(all_reduce));
            let unshards = usize::from(zero.shards_parameters())
                + usize::from(zero == Zero::Gradients && last);
            assert_eq!(n(ActionKind::Unshard), unshards, "{s}: {program:?}");
            assert_eq!(
                n(ActionKind::Reshard),
                usize::from(zero.shards_parameters())
            );
            if zero.shards_parameters() {
                let at = |kind| {
                    program
                        .iter()
                        .position(|a| a.stage == s && a.kind == kind)
                        .unwrap()
                };
                let computes = |reads: bool| -> Vec<usize> {
                    program
                        .iter()
                        .enumerate()
                        .filter(|(_, a)| {
                            a.kind.is_compute()
                                && (a.kind == ActionKind::BackwardWeight) != reads
                                && a.in_sequence().any(|h| h.stage == s)
                        })
                        .map(|(i, _)| i)
                        .collect()
                };
                let (reading, weights) = (computes(true), computes(false));
                assert!(at(ActionKind::Unshard) < reading[0]);
                // The values go once the last computation that reads them is done; a stage
                // that trains makes at least its last weight gradients resharded.
                assert!(at(ActionKind::Reshard) > *reading.last().unwrap());
                if n(ActionKind::ReduceGrad) > 0 {
                    assert!(
                        at(ActionKind::Reshard) < *weights.last().unwrap(),
                        "{program:?}"
                    );
                    assert!(*weights.last().unwrap() < at(ActionKind::ReduceGrad));
                }
            }
        }
    }
}

#[test]
fn the_one_stage_plans_read_as_documented() {
    let compute = ScheduleKind::OneFOneB.plan(2, 2).unwrap();
    let at = |zero| {
        lower(
            &compute,
            Lowering {
                zero,
                ..Lowering::default()
            },
        )
        .to_string()
    };
    assert_eq!(
        at(Zero::Gradients),
        "0: 0F0 0SF0 0F1 0SF1 0RB0 0B0 0RB1 0B1 0RG 0OPT 0US\n\
         1: 1RF0 1F0 1B0 1SB0 1RF1 1F1 1B1 1SB1 1RG 1OPT 1US\n"
    );
    assert_eq!(
        at(Zero::Parameters),
        "0: 0US 0F0 0SF0 0F1 0SF1 0RB0 0B0 0RB1 0I1 0RS 0W1 0RG 0OPT\n\
         1: 1US 1RF0 1F0 1B0 1SB0 1RF1 1F1 1I1 1SB1 1RS 1W1 1RG 1OPT\n"
    );
    // Levels 0 and 1 lower alike: ZeRO-1 differs in what the worker's AR and OPT do.
    assert_eq!(at(Zero::Off), at(Zero::OptimizerState));
}

#[test]
fn a_multi_chunk_rank_reshards_each_chunk_after_its_last_computation() {
    let compute = ScheduleKind::Interleaved { virtual_stages: 2 }
        .plan(2, 2)
        .unwrap();
    let plan = lower(
        &compute,
        Lowering {
            zero: Zero::Parameters,
            ..Lowering::default()
        },
    );
    let rank0: Vec<String> = plan.programs()[0].iter().map(ToString::to_string).collect();
    let at = |text: &str| rank0.iter().position(|a| a == text).unwrap();
    // Rank 0 holds stages 0 and 2. Stage 2 (the last) starts after stage 0's forwards and is
    // done before stage 0's backwards: it is whole only in between.
    assert!(at("0F1") < at("2US") && at("2US") < at("2F0"), "{rank0:?}");
    assert!(at("2I1") < at("2RS") && at("2RS") < at("2W1"), "{rank0:?}");
    assert!(at("2W1") < at("0B0"), "{rank0:?}");
    assert!(at("0US") < at("0F0") && at("0I1") < at("0RS"), "{rank0:?}");
    assert!(at("0RS") < at("0W1"), "{rank0:?}");
}

#[test]
fn inference_unshards_around_the_forwards_at_level_three_only() {
    for zero in Zero::ALL {
        let plan = inference_at(3, 4, zero).unwrap();
        validate_inference(&plan).unwrap();
        let unshards = plan
            .actions()
            .filter(|a| a.kind == ActionKind::Unshard)
            .count();
        assert_eq!(unshards, if zero.shards_parameters() { 3 } else { 0 });
    }
}

fn reject(text: &str) -> (String, Violation) {
    let plan: Plan = text.parse().unwrap();
    match validate(&plan) {
        Err(ScheduleError::Invalid(e)) => (e.to_string(), e.violation.clone()),
        other => panic!("expected an invalid plan, got {other:?} for\n{text}"),
    }
}

#[test]
fn the_validator_names_each_broken_rule() {
    let (msg, v) = reject("0: 0US 0F0 0RS 0B0 0RG 0OPT\n");
    assert_eq!(v, Violation::Resharded, "{msg}");
    assert!(
        msg.contains("step 3 (`0B0`)") && msg.contains("move the reshard"),
        "{msg}"
    );
    // `W` reads no values: it may follow the reshard, an `I` may not.
    let split: Plan = "0: 0US 0F0 0I0 0RS 0W0 0RG 0OPT\n".parse().unwrap();
    validate(&split).unwrap();
    let (msg, v) = reject("0: 0US 0F0 0RS 0I0 0W0 0RG 0OPT\n");
    assert_eq!(v, Violation::Resharded, "{msg}");
    let (msg, v) = reject("0: 0F0 0US 0B0 0RS 0RG 0OPT\n");
    assert!(
        matches!(v, Violation::Before { needs } if needs.to_string() == "0US"),
        "{msg}"
    );
    let (msg, v) = reject("0: 0RS 0US 0F0 0B0 0RG 0OPT\n");
    assert!(
        matches!(v, Violation::Duplicate | Violation::Before { .. }),
        "{msg}"
    );
    let (msg, v) = reject("0: 0F0 0B0 0OPT 0RG\n");
    assert!(
        matches!(v, Violation::Before { needs } if needs.to_string() == "0RG"),
        "{msg}"
    );
    let (msg, v) = reject("0: 0F0 0RG 0B0 0OPT\n");
    assert!(matches!(v, Violation::Before { .. }), "{msg}");
    let (msg, v) = reject("0: 0F0 0B0 0AR 0RG 0OPT\n");
    assert_eq!(v, Violation::TwoReductions, "{msg}");
    let (msg, v) = reject("0: 0US 0F0 0B0 0RS 0US 0RG 0OPT\n");
    assert_eq!(v, Violation::Duplicate, "{msg}");
}

#[test]
fn stage_wide_actions_parse_and_print() {
    for text in ["2RG", "0US", "11RS"] {
        let a: Action = text.parse().unwrap();
        assert!(a.kind.is_stage_wide() && a.micro_batch.is_none());
        assert_eq!(a.to_string(), text);
    }
    let err = "0US3".parse::<Action>().unwrap_err().to_string();
    assert!(err.contains("take no micro-batch"), "{err}");
}

#[test]
fn the_simulator_charges_half_an_all_reduce_for_each_reduce_and_unshard() {
    let compute = ScheduleKind::GPipe.plan(1, 1).unwrap();
    let costs = Costs {
        all_reduce: 4.0,
        ..Costs::uniform(1, 1.0, 2.0)
    };
    let makespan = |zero| {
        let plan = lower(
            &compute,
            Lowering {
                zero,
                ..Lowering::default()
            },
        );
        simulate(&plan, &costs).unwrap().makespan
    };
    assert_eq!(makespan(Zero::Off), 3.0 + 4.0);
    assert_eq!(makespan(Zero::Gradients), 3.0 + 2.0 + 2.0);
    assert_eq!(makespan(Zero::Parameters), 3.0 + 2.0 + 2.0);
}
