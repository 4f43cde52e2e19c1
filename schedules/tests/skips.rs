//! Skip routes: every schedule keeps a skip's gradient in reach of the stashing stage's
//! backward (the dry run finds no deadlock), the plan knows its routes, and broken skip
//! transfers are named.

use pipetrain_schedules::{
    ActionKind, Lowering, Plan, ScheduleKind, SkipRoute, StageId, inference, lower, render,
    route_skips, validate, validate_inference,
};

fn kinds() -> Vec<ScheduleKind> {
    vec![
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::ZbH1,
        ScheduleKind::Interleaved { virtual_stages: 2 },
        ScheduleKind::ZbV,
        // Overlaps: both halves' skips received before the pair, sent after it.
        ScheduleKind::DualPipeV,
    ]
}

/// Every pair (s, t), t > s + 1, plus neighbours: the skips of any U-Net cut.
fn all_routes(stages: usize) -> Vec<SkipRoute> {
    let mut routes = Vec::new();
    for s in 0..stages {
        for t in s + 1..stages {
            routes.push(SkipRoute {
                stash: StageId::from(s),
                pop: StageId::from(t),
            });
        }
    }
    routes
}

#[test]
fn every_schedule_with_every_route_validates_and_knows_its_routes() {
    for kind in kinds() {
        for p in 2..=4 {
            for m in [p, 2 * p, 3] {
                let Ok(compute) = kind.plan(p, m) else {
                    continue; // interleaved: m a multiple of p
                };
                let routes = all_routes(compute.stages());
                let routed = route_skips(&compute, &routes).unwrap();
                // Ranks holding several stages run in rank order; and stage by stage.
                for plan in [routed.clone(), routed.by_stage()] {
                    let lowered = lower(&plan, Lowering::default());
                    validate(&lowered).unwrap_or_else(|e| panic!("{kind:?} p={p} m={m}: {e}"));
                    assert_eq!(lowered.skip_routes(), routes);
                    let sends = lowered
                        .actions()
                        .filter(|a| a.kind == ActionKind::SendSkip)
                        .count();
                    assert_eq!(sends, routes.len() * m, "{kind:?} p={p} m={m}");
                }
            }
        }
    }
}

#[test]
fn the_stages_between_carry_nothing_of_a_skip() {
    let compute = ScheduleKind::OneFOneB.plan(4, 4).unwrap();
    let route: SkipRoute = "0:3".parse().unwrap();
    let plan = lower(
        &route_skips(&compute, &[route]).unwrap(),
        Lowering::default(),
    );
    for stage in [1, 2] {
        assert!(
            plan.program(StageId(stage))
                .iter()
                .all(|a| !a.kind.is_skip()),
            "{}",
            plan
        );
    }
    assert_eq!(plan.count(StageId(0), ActionKind::SendSkip), 4);
    assert_eq!(plan.count(StageId(0), ActionKind::RecvSkipGradient), 4);
    assert_eq!(plan.count(StageId(3), ActionKind::RecvSkip), 4);
    assert_eq!(plan.count(StageId(3), ActionKind::SendSkipGradient), 4);
    assert!(render::skips(&plan).contains("stage 0 -> stage 3: 4 sends"));
}

#[test]
fn inference_plans_send_skips_forward_only() {
    let plan = route_skips(&inference(3, 2).unwrap(), &["0:2".parse().unwrap()]).unwrap();
    validate_inference(&plan).unwrap();
    assert_eq!(plan.count(StageId(2), ActionKind::RecvSkip), 2);
    assert!(
        plan.actions()
            .all(|a| a.kind != ActionKind::SendSkipGradient)
    );
}

#[test]
fn bad_routes_are_errors_naming_the_route() {
    let compute = ScheduleKind::GPipe.plan(3, 2).unwrap();
    let late = SkipRoute {
        stash: StageId(1),
        pop: StageId(3),
    };
    let e = route_skips(&compute, &[late]).unwrap_err().to_string();
    assert!(
        e.contains("skip route 1:3") && e.contains("3 stages"),
        "{e}"
    );
    let e = "2:1".parse::<SkipRoute>().unwrap_err();
    assert!(
        e.contains("later popping stage") && e.contains("`1:2`"),
        "{e}"
    );
    // Issue 38: `0:0` was offered `0:0` again. Every example given parses.
    for bad in ["0:0", "3:3", "2:1", "5:0"] {
        let e = bad.parse::<SkipRoute>().unwrap_err();
        let example = e.split("(e.g. `").nth(1).and_then(|r| r.split('`').next());
        let example = example.unwrap_or_else(|| panic!("no example in {e}"));
        assert!(example.parse::<SkipRoute>().is_ok(), "{bad}: {e}");
    }
    let e = "0:0".parse::<SkipRoute>().unwrap_err();
    assert!(e.contains("(e.g. `0:1`)"), "{e}");
}

fn invalid(text: &str) -> String {
    let plan: Plan = text.parse().unwrap();
    validate(&plan).unwrap_err().to_string()
}

#[test]
fn broken_skip_transfers_are_named() {
    // A skip received after the forward that pops it.
    let e = invalid("0: 0F0 0SF0 0SK0>1 0RKB0<1 0RB0 0B0\n1: 1RF0 1F0 1RK0<0 1B0 1SB0 1SKB0>0\n");
    assert!(
        e.contains("`1RK0<0`") && e.contains("runs after `1F0`"),
        "{e}"
    );
    // A send whose peer never receives.
    let e = invalid("0: 0F0 0SF0 0SK0>1 0RB0 0B0\n1: 1RF0 1F0 1B0 1SB0\n");
    assert!(e.contains("no matching `1RK0<0`"), "{e}");
    // A skip to an earlier stage.
    let e = invalid("0: 0F0 0SF0 0RB0 0B0\n1: 1RF0 1F0 1SK0>0 1B0 1SB0\n");
    assert!(e.contains("`1SK0>0`") && e.contains("later peer"), "{e}");
    // A popped skip whose gradient never goes back.
    let e = invalid("0: 0F0 0SF0 0SK0>1 0RB0 0B0\n1: 1RK0<0 1RF0 1F0 1B0 1SB0\n");
    assert!(e.contains("`1SKB0>0`") && e.contains("is missing"), "{e}");
    // The gradient received after the backward that needs it: a deadlock-free order only
    // if it comes first.
    let e = invalid("0: 0F0 0SF0 0SK0>1 0RB0 0B0 0RKB0<1\n1: 1RK0<0 1RF0 1F0 1B0 1SB0 1SKB0>0\n");
    assert!(e.contains("runs after `0B0`"), "{e}");
}
