//! Our schedules' orders against PyTorch's (issue 36 item 5, issue 39 item 2).
//!
//! `tests/fixtures/torch/torch_schedules.json` holds each rank's compute order as
//! `torch.distributed.pipelining` (2.15) builds it, written by
//! `tests/fixtures/torch/generate_schedules.py`. PyTorch's text form of a compute action is ours
//! (`2F0`, `2B0`, `2I0`, `2W0`: stage, kind, micro-batch; F forward, B full backward, I backward
//! for the input gradient, W backward for the weight gradient), so each order parses with our
//! parser and runs through our validator and simulator like any plan.
//!
//! For every fixture case of a schedule we have, our plan must equal PyTorch's order after the
//! differences `docs/schedules.md` lists ("Against PyTorch's orders"), and no other:
//!
//! | PyTorch                          | ours                | documented difference              |
//! |----------------------------------|---------------------|------------------------------------|
//! | `ScheduleGPipe`                  | `gpipe`             | none                               |
//! | `Schedule1F1B`                   | `1f1b`              | its `pipeline_order` names micro-batch k + 1 for the last rank's k-th forward (what it runs is ours) |
//! | `ScheduleInterleaved1F1B`        | `interleaved-v<v>`  | none                               |
//! | `ScheduleInterleavedZeroBubble`, v = 1 | `zb-h1`       | none                               |
//! | `ScheduleInterleavedZeroBubble`, v ≥ 2 | `interleaved-zb-v<v>` | none                       |
//! | `ScheduleZBVZeroBubble`          | `zb-v`              | another order (a greedy list scheduler): a makespan no longer, equal from m ≥ 2p − 1, at no more peak stash |
//! | `ScheduleDualPipeV`              | `dualpipev`         | none (PyTorch's `(0F3;3B1)OVERLAP_F_B` is our overlap `0F3+3B1`) |
//! | `ScheduleLoopedBFS`              | `looped-bfs-v<v>`   | each chunk's backwards run oldest micro-batch first, not newest first (the same makespan) |
//!
//! Cases of schedules we do not have are listed in [`NOT_YET`] (none today); a fixture schedule
//! that is neither compared nor listed fails the test.

use std::path::PathBuf;

use pipetrain_schedules::{
    Action, ActionKind, Costs, MicroBatchId, Plan, ScheduleKind, Simulation, StageId, simulate,
    validate,
};
use serde::Deserialize;

/// PyTorch schedules that have no counterpart in pipetrain (none: every 2.15 schedule has one).
const NOT_YET: &[&str] = &[];

#[derive(Deserialize)]
struct Fixture {
    torch: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    schedule: String,
    ranks: usize,
    stages_per_rank: usize,
    micro_batches: usize,
    stage_to_rank: Vec<usize>,
    order: Vec<String>,
}

impl Case {
    fn what(&self) -> String {
        format!(
            "{} p={} v={} m={}",
            self.schedule, self.ranks, self.stages_per_rank, self.micro_batches
        )
    }

    /// PyTorch's order as our plan: one program per rank, PyTorch's placement. DualPipeV's
    /// overlapped pairs, `(0F3;3B1)OVERLAP_F_B`, are our overlaps, `0F3+3B1`.
    fn plan(&self) -> Plan {
        let overlap = |token: &str| {
            let inner = token.strip_prefix('(')?.strip_suffix(")OVERLAP_F_B")?;
            let (forward, backward) = inner.split_once(';')?;
            Some(format!("{forward}+{backward}"))
        };
        let programs = self
            .order
            .iter()
            .map(|line| {
                line.split_whitespace()
                    .map(|token| overlap(token).unwrap_or_else(|| token.to_string()))
                    .map(|a| a.parse::<Action>())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap_or_else(|e| panic!("{}: {e}", self.what()))
            })
            .collect();
        Plan::with_placement(self.micro_batches, programs, self.stage_to_rank.clone())
    }
}

fn fixture() -> Fixture {
    // The run-time value: a test binary reused from another checkout sharing the target
    // directory would carry that checkout's compile-time path.
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let path = root.join("../tests/fixtures/torch/torch_schedules.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// How one of our schedules relates to PyTorch's order of the same shape.
enum Relation {
    /// Equal after the documented rewrite of PyTorch's order.
    Equal(fn(&Case, Plan) -> Plan),
    /// Another order, no worse: see [`zb_v_no_worse`].
    ZbV,
}

/// Our schedule for a fixture case, and how it relates to PyTorch's; `None` for [`NOT_YET`].
fn ours(case: &Case) -> Option<(ScheduleKind, Relation)> {
    let v = case.stages_per_rank;
    let same: fn(&Case, Plan) -> Plan = |_, plan| plan;
    Some(match (case.schedule.as_str(), v) {
        ("ScheduleGPipe", 1) => (ScheduleKind::GPipe, Relation::Equal(same)),
        ("Schedule1F1B", 1) => (
            ScheduleKind::OneFOneB,
            Relation::Equal(one_f_one_b_last_rank),
        ),
        ("ScheduleInterleaved1F1B", v) => (
            ScheduleKind::Interleaved { virtual_stages: v },
            Relation::Equal(same),
        ),
        ("ScheduleInterleavedZeroBubble", 1) => (ScheduleKind::ZbH1, Relation::Equal(same)),
        ("ScheduleInterleavedZeroBubble", v) => (
            ScheduleKind::InterleavedZb { virtual_stages: v },
            Relation::Equal(same),
        ),
        ("ScheduleZBVZeroBubble", 2) => (ScheduleKind::ZbV, Relation::ZbV),
        ("ScheduleDualPipeV", 2) => (ScheduleKind::DualPipeV, Relation::Equal(same)),
        ("ScheduleLoopedBFS", v) => (
            ScheduleKind::LoopedBfs { virtual_stages: v },
            Relation::Equal(backwards_oldest_first),
        ),
        _ => return None,
    })
}

/// `Schedule1F1B`'s `pipeline_order` (PyTorch's picture of the schedule; `_step_microbatches`
/// runs its own loop) starts the last rank's forwards at micro-batch 1: it has no warm-up
/// forward there, and its steady loop increments the forward counter before using it. What it
/// runs names micro-batch k for the k-th forward, as ours does.
fn one_f_one_b_last_rank(case: &Case, plan: Plan) -> Plan {
    let last = case.ranks - 1;
    let programs = plan
        .programs()
        .iter()
        .enumerate()
        .map(|(rank, program)| {
            program
                .iter()
                .map(|&a| match (rank == last, a.kind) {
                    (true, ActionKind::Forward) => Action::forward(
                        a.stage,
                        MicroBatchId::from(a.mb().index().checked_sub(1).expect("from 1 on")),
                    ),
                    _ => a,
                })
                .collect()
        })
        .collect();
    Plan::with_placement(case.micro_batches, programs, case.stage_to_rank.clone())
}

/// `ScheduleLoopedBFS` runs each chunk's backwards newest micro-batch first; ours run oldest
/// first, so that every stage accumulates its gradients in 1F1B's order (bitwise equal
/// weights). Reverses each run of one stage's backwards in PyTorch's order.
fn backwards_oldest_first(case: &Case, plan: Plan) -> Plan {
    let programs = plan
        .programs()
        .iter()
        .map(|program| {
            let mut out: Vec<Action> = Vec::with_capacity(program.len());
            let mut run: Vec<Action> = Vec::new();
            for &a in program {
                let same = run.last().is_some_and(|b| b.stage == a.stage);
                if a.kind != ActionKind::Backward || !same {
                    out.extend(run.drain(..).rev());
                }
                match a.kind {
                    ActionKind::Backward => run.push(a),
                    _ => out.push(a),
                }
            }
            out.extend(run.drain(..).rev());
            out
        })
        .collect();
    Plan::with_placement(case.micro_batches, programs, case.stage_to_rank.clone())
}

/// F = I = W = 1 and B = 2 per chunk, free transfers: the zero-bubble paper's unit costs.
fn sim(case: &Case, plan: &Plan) -> Simulation {
    let stages = case.ranks * case.stages_per_rank;
    simulate(plan, &Costs::uniform(stages, 1.0, 2.0))
        .unwrap_or_else(|e| panic!("{}: {e}", case.what()))
}

fn peak(sim: &Simulation) -> usize {
    sim.stages.iter().map(|s| s.peak_stash).max().unwrap_or(0)
}

/// Our greedy ZB-V against PyTorch's handcrafted `ScheduleZBVZeroBubble`: both valid; ours
/// ends no later and holds no more at its peak; equal makespans from m ≥ 2p − 1 on (PyTorch
/// pads shorter runs to 2p − 1 micro-batches and idles where the padding was; ours does not).
fn zb_v_no_worse(case: &Case, ours: &Plan, theirs: &Plan) {
    let what = case.what();
    let (ours, theirs) = (sim(case, ours), sim(case, theirs));
    assert!(
        ours.makespan <= theirs.makespan,
        "{what}: our makespan {} > PyTorch's {}",
        ours.makespan,
        theirs.makespan
    );
    assert!(
        peak(&ours) <= peak(&theirs),
        "{what}: our peak stash {} > PyTorch's {}",
        peak(&ours),
        peak(&theirs)
    );
    let (p, m) = (case.ranks, case.micro_batches);
    if m + 1 >= 2 * p {
        assert_eq!(ours.makespan, theirs.makespan, "{what}");
    } else {
        assert!(ours.makespan < theirs.makespan, "{what}");
    }
}

#[test]
fn our_orders_equal_pytorchs_but_for_the_documented_differences() {
    let fixture = fixture();
    assert!(fixture.torch.starts_with("2."), "{}", fixture.torch);
    let mut compared = 0;
    for case in &fixture.cases {
        let what = case.what();
        let Some((kind, relation)) = ours(case) else {
            let listed = NOT_YET
                .iter()
                .any(|n| n.split(' ').next() == Some(case.schedule.as_str()));
            assert!(listed, "{what}: neither compared nor listed in NOT_YET");
            continue;
        };
        let theirs = case.plan();
        assert_eq!(theirs.ranks(), case.ranks, "{what}");
        let ours = kind
            .plan(case.ranks, case.micro_batches)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        match relation {
            Relation::Equal(rewrite) => {
                // Where PyTorch's own order is a valid plan, ours ends no later.
                if validate(&theirs).is_ok() {
                    let (ours, theirs) = (sim(case, &ours), sim(case, &theirs));
                    assert_eq!(ours.makespan, theirs.makespan, "{what}");
                }
                let expected = rewrite(case, theirs);
                validate(&expected).unwrap_or_else(|e| panic!("{what} (PyTorch's): {e}"));
                assert_eq!(
                    ours.to_string(),
                    expected.to_string(),
                    "{what}: ours (left) against PyTorch's (right)"
                );
                assert_eq!(ours, expected, "{what}: the placement");
            }
            Relation::ZbV => {
                validate(&theirs).unwrap_or_else(|e| panic!("{what} (PyTorch's): {e}"));
                assert_ne!(
                    ours.to_string(),
                    theirs.to_string(),
                    "{what}: now equal: document it"
                );
                let placement: Vec<_> = (0..ours.stages())
                    .map(|s| ours.rank_of(StageId::from(s)).expect("a stage"))
                    .collect();
                assert_eq!(placement, case.stage_to_rank, "{what}: the placement");
                zb_v_no_worse(case, &ours, &theirs);
            }
        }
        compared += 1;
    }
    assert!(compared >= 20, "only {compared} cases compared");
}
