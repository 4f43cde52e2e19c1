//! Overlaps in the simulator: a worker that can overlap takes max(F, B) for a pair, one that
//! cannot (pipetrain's) runs the forward, then the backward, each when its own input is there.

use pipetrain_schedules::{Costs, Plan, ScheduleKind, simulate};

/// One rank holding stages 0 and 1, one overlap: `0F1+1B0`.
const PLAN: &str = "0: 0F0 1F0 0F1+1B0 1F1 1B1 0B0 0B1\n";

#[test]
fn an_overlap_costs_max_f_b_overlapped_and_f_plus_b_in_sequence() {
    let plan: Plan = PLAN.parse().unwrap();
    let costs = Costs::uniform(2, 1.0, 2.0);
    // In sequence: F F (F B) F B B B = 1 + 1 + 3 + 1 + 2 + 2 + 2.
    let sequence = simulate(&plan, &costs).unwrap();
    assert_eq!(sequence.makespan, 12.0);
    // The timeline shows the halves apart.
    let shown: Vec<String> = sequence.stages[0]
        .timeline
        .iter()
        .map(|s| s.action.to_string())
        .collect();
    assert_eq!(shown[2..4], ["0F1", "1B0"]);
    // Overlapped: the pair takes max(1, 2) = 2.
    let overlapped = simulate(&plan, &costs.clone().with_overlaps(true)).unwrap();
    assert_eq!(overlapped.makespan, 11.0);
    let pair = &overlapped.stages[0].timeline[2];
    assert_eq!(
        (pair.action.to_string(), pair.start, pair.end),
        ("0F1+1B0".into(), 2.0, 4.0)
    );
    // Per stage costs: max and sum of the halves' own stages.
    let costs = Costs {
        forward: vec![3.0, 1.0],
        backward: vec![2.0, 2.5],
        ..Costs::uniform(2, 1.0, 2.0)
    };
    let action = "0F1+1B0".parse().unwrap();
    assert_eq!(costs.duration(&action), 5.5);
    assert_eq!(costs.clone().with_overlaps(true).duration(&action), 3.0);
}

#[test]
fn dualpipev_in_sequence_is_its_pairs_written_apart() {
    for (p, m) in [(2, 4), (3, 6), (4, 8), (4, 12)] {
        let plan = ScheduleKind::DualPipeV.plan(p, m).unwrap();
        let apart = plan.sequential();
        assert!(apart.actions().all(|a| a.backward.is_none()));
        let costs = Costs::uniform(2 * p, 1.0, 2.0);
        let sequence = simulate(&plan, &costs).unwrap();
        assert_eq!(sequence, simulate(&apart, &costs).unwrap(), "p={p} m={m}");
        let overlapped = simulate(&plan, &costs.with_overlaps(true)).unwrap();
        assert!(
            overlapped.makespan < sequence.makespan,
            "p={p} m={m}: {} against {}",
            overlapped.makespan,
            sequence.makespan
        );
        // Peak stash does not change: a pair's forward stashes before its backward frees.
        let peaks = |s: &pipetrain_schedules::Simulation| -> Vec<usize> {
            s.stages.iter().map(|s| s.peak_stash).collect()
        };
        assert_eq!(peaks(&overlapped), peaks(&sequence), "p={p} m={m}");
    }
}
