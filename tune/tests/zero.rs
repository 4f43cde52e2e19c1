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
