//! The search chooses the ZeRO level as it chooses re-materialization: ZeRO-1 charges each
//! replica its share of the optimizer state, so a budget that plain data parallelism overflows
//! can still hold two replicas.

use pipetrain_schedules::{ScheduleKind, Zero};
use pipetrain_tune::{CostTable, LayerTimes, Recompute, RowsCosts, Space, search};

/// Four equal layers of 1 MiB of weights and 2 MiB of optimizer state each, whose all-reduce is
/// free: two replicas beat two stages when they fit.
fn table(space: &Space) -> CostTable {
    let layer = |r: usize| LayerTimes {
        forward: r as f64,
        backward: 2.0 * r as f64,
        input: r as f64,
        weight: r as f64,
        activation_bytes: 4 * r as u64,
        output_bytes: 4 * r as u64,
        deferred_bytes: 0,
    };
    let rows = space.rows_in_play(4);
    CostTable {
        param_bytes: vec![1 << 20; 4],
        optimizer_bytes: vec![2 << 20; 4],
        rows: rows
            .iter()
            .map(|&r| RowsCosts {
                rows: r,
                layers: vec![layer(r); 4],
            })
            .collect(),
        ..CostTable::default()
    }
}

fn space(budget: Option<u64>, zeros: Vec<Zero>) -> Space {
    Space {
        batch: 64,
        workers: 2,
        memory_budget: budget,
        schedules: vec![ScheduleKind::OneFOneB],
        remats: vec![Recompute::Never],
        zeros,
        max_micro_batches: 8,
    }
}

#[test]
fn a_budget_plain_replicas_overflow_is_met_by_zero_one() {
    let both = vec![Zero::Off, Zero::OptimizerState];
    // Unbounded: two replicas, the level tied in time, the smaller memory first.
    let free = space(None, both.clone());
    let ranking = search(&table(&free), &free).unwrap();
    let best = ranking.best().unwrap();
    assert_eq!(
        (best.knobs.replicas, best.knobs.zero),
        (2, Zero::OptimizerState)
    );
    let plain = ranking
        .candidates
        .iter()
        .find(|c| c.knobs.replicas == 2 && c.knobs.zero == Zero::Off)
        .unwrap();
    assert!(best.peak_memory() < plain.peak_memory());
    // A budget between the two: only ZeRO-1 keeps two replicas; without it the search falls
    // back to two stages.
    let budget = Some((best.peak_memory() + plain.peak_memory()) / 2);
    let bounded = space(budget, both);
    let best = search(&table(&bounded), &bounded)
        .unwrap()
        .best()
        .unwrap()
        .knobs;
    assert_eq!(
        (best.replicas, best.zero),
        (2, Zero::OptimizerState),
        "{best}"
    );
    let off_only = space(budget, vec![Zero::Off]);
    let best = search(&table(&off_only), &off_only)
        .unwrap()
        .best()
        .unwrap()
        .knobs;
    assert_eq!((best.replicas, best.stages), (1, 2), "{best}");
    assert!(best.to_string().ends_with("remat never"), "{best}");
}

/// ZeRO-3 (issue 50): where the schedule makes the weight gradients at the step's end (1F1B
/// here), each replica holds its share of the values beside the whole gradients, so a budget
/// ZeRO-1 overflows can still hold two replicas; under a schedule that places its `W`s (ZB-H1)
/// the values are whole while the gradients are made, and level 3 saves nothing at the peak.
#[test]
fn a_budget_zero_one_overflows_is_met_by_zero_three() {
    let levels = vec![Zero::Off, Zero::OptimizerState, Zero::Parameters];
    let free = space(None, levels.clone());
    let ranking = search(&table(&free), &free).unwrap();
    let at = |zero| {
        ranking
            .candidates
            .iter()
            .find(|c| c.knobs.replicas == 2 && c.knobs.zero == zero)
            .unwrap()
            .peak_memory()
    };
    let (one, three) = (at(Zero::OptimizerState), at(Zero::Parameters));
    // Four layers of 1 MiB on each replica: 2 MiB of values fewer at the peak (and headroom).
    assert!(one - three >= 2 << 20, "level 1 {one} B, level 3 {three} B");
    let budget = Some((one + three) / 2);
    let bounded = space(budget, levels.clone());
    let best = search(&table(&bounded), &bounded)
        .unwrap()
        .best()
        .unwrap()
        .knobs;
    assert_eq!((best.replicas, best.zero), (2, Zero::Parameters), "{best}");
    assert!(best.to_string().ends_with("ZeRO-3"), "{best}");
    let below_three = space(budget, vec![Zero::Off, Zero::OptimizerState]);
    let best = search(&table(&below_three), &below_three)
        .unwrap()
        .best()
        .unwrap()
        .knobs;
    assert_eq!((best.replicas, best.stages), (1, 2), "{best}");
    // ZB-H1 places its weight gradients among the micro-batches: no saving at the peak.
    let placed = Space {
        schedules: vec![ScheduleKind::ZbH1],
        ..space(None, levels)
    };
    let ranking = search(&table(&placed), &placed).unwrap();
    // Predicted exactly as level 1 (time and memory), so ranked as that one.
    assert!(
        ranking.equivalent.iter().any(|(this, instead)| {
            this.replicas == 2
                && this.zero == Zero::Parameters
                && instead.zero == Zero::OptimizerState
        }),
        "{:?}",
        ranking.equivalent
    );
}
