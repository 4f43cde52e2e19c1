//! The validator rejects hand-broken plans with a readable error that names stage, step and
//! reason, and marks the step in the grid.

use pipetrain_schedules::{Plan, ScheduleError, Violation, validate};

fn reject(text: &str) -> (String, Violation) {
    let plan: Plan = text.parse().unwrap();
    match validate(&plan) {
        Err(ScheduleError::Invalid(e)) => (e.to_string(), e.violation.clone()),
        other => panic!("expected an invalid plan, got {other:?} for\n{text}"),
    }
}

#[test]
fn backward_before_forward() {
    let (msg, v) = reject("0: 0B0 0F0\n");
    assert!(matches!(v, Violation::Before { .. }));
    assert!(msg.contains("stage 0, step 0 (`0B0`)"), "{msg}");
    assert!(msg.contains("`0F0` (forward of micro-batch 0 on stage 0), which must come first"));
    assert!(msg.contains(">0B0<"), "grid marks the step:\n{msg}");
}

#[test]
fn missing_receive() {
    // Stage 0 sends micro-batch 0, stage 1 forwards it without receiving.
    let (msg, v) = reject("0: 0F0 0SF0 0RB0 0B0\n1: 1F0 1B0 1SB0\n");
    assert!(matches!(v, Violation::Before { .. }), "{msg}");
    assert!(
        msg.contains("stage 1, step 0 (`1F0`)") && msg.contains("`1RF0`"),
        "{msg}"
    );
}

#[test]
fn send_without_receive_on_the_neighbour() {
    let (msg, v) =
        reject("0: 0F0 0SF0 0SF1 0F1 0RB0 0B0 0RB1 0B1\n1: 1RF0 1F0 1B0 1SB0 1F1 1B1 1SB1\n");
    // 0SF1 before 0F1 is caught first as an ordering error.
    assert!(matches!(v, Violation::Before { .. }), "{msg}");
    let (msg, v) = reject("0: 0F0 0SF0 0RB0 0B0\n1: 1RF0 1F0 1B0\n");
    assert!(matches!(v, Violation::Missing { .. }), "{msg}");
    assert!(msg.contains("`1SB0`") && msg.contains("missing"), "{msg}");
}

#[test]
fn unmatched_send() {
    // Stage 1 receives gradient 0 from stage 2, but stage 2 never sends one.
    let (msg, v) = reject("0: 0F0 0SF0 0RB0 0B0\n1: 1RF0 1F0 1SF0 1RB0 1B0 1SB0\n2: 1RF0\n");
    // stage 2's program names stage 1: wrong stage
    assert!(matches!(v, Violation::WrongStage { .. }), "{msg}");
    let (msg, v) = reject("0: 0F0 0SF0 0RB0 0B0\n1: 1RF0 1F0 1RB0 1B0 1SB0\n");
    assert!(matches!(v, Violation::NoNeighbour), "{msg}");
    let (msg, v) = reject("0: 0F0 0SF0 0RB0 0B0\n1: 1RF0 1F0 1B0 1SB0\n2: 2F0 2B0\n");
    assert!(
        matches!(
            v,
            Violation::Missing { .. } | Violation::Unmatched { .. } | Violation::Before { .. }
        ),
        "{msg}"
    );
}

#[test]
fn crossed_send_and_receive_deadlocks() {
    // Stage 0 waits for the gradient of micro-batch 0 before sending its activation: stage 1
    // cannot forward, so never sends the gradient.
    let (msg, v) = reject("0: 0F0 0RB0 0SF0 0B0\n1: 1RF0 1F0 1B0 1SB0\n");
    assert!(matches!(v, Violation::Deadlock { .. }), "{msg}");
    assert!(msg.contains("stage 0, step 1 (`0RB0`)"), "{msg}");
    assert!(msg.contains("deadlock: waits for `1SB0`"), "{msg}");
    assert!(
        msg.contains("stage 1 is itself blocked at step 0 (`1RF0`)"),
        "{msg}"
    );
    assert!(msg.contains(">0RB0<"), "{msg}");
}

#[test]
fn compute_only_cross_stage_order_deadlock() {
    // Stage 1 wants micro-batch 1 first, stage 0 cannot backward 0 before stage 1 does.
    let (msg, v) = reject("0: 0F0 0B0 0F1 0B1\n1: 1F1 1B1 1F0 1B0\n");
    assert!(matches!(v, Violation::Deadlock { .. }), "{msg}");
}

#[test]
fn duplicate_and_out_of_range() {
    let (msg, v) = reject("0: 0F0 0F0 0B0\n");
    assert_eq!(v, Violation::Duplicate, "{msg}");
    let plan = Plan::new(
        1,
        1,
        vec![vec!["0F3".parse().unwrap(), "0B3".parse().unwrap()]],
    );
    let msg = validate(&plan).unwrap_err().to_string();
    assert!(
        msg.contains("micro-batch out of range: the plan has 1"),
        "{msg}"
    );
}

#[test]
fn optimizer_step_before_last_backward() {
    let (msg, v) = reject("0: 0F0 0F1 0B0 0OPT 0B1\n");
    assert!(matches!(v, Violation::Before { .. }), "{msg}");
    assert!(msg.contains("`0B1`"), "{msg}");
}

#[test]
fn inference_plans_validate_for_any_shape_and_refuse_training_actions() {
    use pipetrain_schedules::{inference, validate_inference};
    for p in 1..=5 {
        for m in 1..=6 {
            let plan = inference(p, m).unwrap();
            validate_inference(&plan).unwrap();
            // A training plan is not an inference plan, and an inference plan not a training one.
            assert!(
                validate(&plan).is_err(),
                "p={p} m={m}: backwards are missing"
            );
        }
    }
    let training = pipetrain_schedules::lower(
        &pipetrain_schedules::ScheduleKind::GPipe.plan(2, 2).unwrap(),
        Default::default(),
    );
    let err = validate_inference(&training).unwrap_err().to_string();
    assert!(err.contains("an inference plan only forwards"), "{err}");
    // A missing send is named.
    let broken: pipetrain_schedules::Plan = "0: 0F0\n1: 1RF0 1F0\n".parse().unwrap();
    let err = validate_inference(&broken).unwrap_err().to_string();
    assert!(err.contains("0SF0"), "{err}");
}

#[test]
fn an_overlap_waits_for_its_backwards_gradient() {
    // DualPipeV's lowered plan with one overlap's gradient received after the overlap: the
    // backward half needs it before the overlap starts.
    let plan = pipetrain_schedules::lower(
        &pipetrain_schedules::ScheduleKind::DualPipeV
            .plan(2, 4)
            .unwrap(),
        Default::default(),
    );
    let text = plan.to_string();
    assert!(text.contains("0RB0 3F2+0B0"), "{text}");
    let (msg, v) = reject(&text.replace("0RB0 3F2+0B0", "3F2+0B0 0RB0"));
    assert!(matches!(v, Violation::Before { .. }), "{msg}");
    assert!(
        msg.contains("(`3F2+0B0`)") && msg.contains("`0RB0`"),
        "{msg}"
    );
    assert!(msg.contains(">3F2+0B0<"), "{msg}");
}

#[test]
fn an_overlap_whose_gradient_needs_its_own_forward_deadlocks() {
    // Rank 1 overlaps 2F1 with 2B0; 2B0's gradient comes from 3B0 on rank 0, which runs after
    // 3F1, which needs 2F1: in sequence (2F1, then 2B0) the plan runs, overlapped it cannot
    // start. The validator proves the plan as written, overlaps at once.
    let text = "0: 0F0 0F1 3F0 3F1 3B0 3B1 0B0 0B1\n1: 1F0 1F1 2F0 2F1+2B0 2B1 1B0 1B1\n";
    let (msg, v) = reject(text);
    assert!(matches!(v, Violation::Deadlock { .. }), "{msg}");
    assert!(msg.contains("waits for `2F1`"), "{msg}");
    assert!(msg.contains("blocked at step 3 (`2F1+2B0`)"), "{msg}");
    let plan: Plan = text.parse().unwrap();
    validate(&plan.sequential()).unwrap();
}

#[test]
fn an_overlaps_halves_are_checked_against_what_ran_before_it() {
    // The backward of micro-batch 0 cannot overlap its own forward.
    let (msg, v) = reject("0: 0F0+0B0\n");
    assert!(matches!(v, Violation::Before { .. }), "{msg}");
    assert!(msg.contains("stage 0, step 0 (`0F0+0B0`)"), "{msg}");
    assert!(
        msg.contains("`0F0` (forward of micro-batch 0 on stage 0)"),
        "{msg}"
    );
}
