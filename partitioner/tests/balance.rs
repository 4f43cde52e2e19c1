//! `Partition::from_balance`: accessors on good input, and an error naming the numbers on bad.

use pipetrain_partitioner::{Partition, PartitionError};
use pipetrain_schedules::StageId;
use pipetrain_schedules::remedy::{Plain, Remedied};

fn message(balance: &[usize], layers: usize) -> String {
    Partition::from_balance(balance, layers)
        .expect_err("bad balance accepted")
        .to_string()
}

#[test]
fn accessors() {
    let partition = Partition::from_balance(&[3, 2, 3], 8).unwrap();
    assert_eq!(partition.stages(), 3);
    assert_eq!(partition.layers(), 8);
    assert_eq!(partition.balance(), vec![3, 2, 3]);
    assert_eq!(partition.boundaries(), &[0, 3, 5, 8]);
    assert_eq!(partition.range(StageId(0)), 0..3);
    assert_eq!(partition.range(StageId(2)), 5..8);
    assert_eq!(partition.to_string(), "[0..3 | 3..5 | 5..8]");
    let stages: Vec<_> = partition.iter().collect();
    assert_eq!(
        stages,
        vec![(StageId(0), 0..3), (StageId(1), 3..5), (StageId(2), 5..8)]
    );
    assert_eq!(partition.iter().len(), 3);
    assert_eq!(partition.iter().next_back(), Some((StageId(2), 5..8)));
    let owners: Vec<u32> = (0..8).map(|l| partition.stage_of_layer(l).0).collect();
    assert_eq!(owners, vec![0, 0, 0, 1, 1, 2, 2, 2]);
}

#[test]
fn single_stage_and_one_layer_per_stage() {
    assert_eq!(
        Partition::from_balance(&[5], 5).unwrap().to_string(),
        "[0..5]"
    );
    let partition = Partition::from_balance(&[1; 4], 4).unwrap();
    assert_eq!(partition.to_string(), "[0..1 | 1..2 | 2..3 | 3..4]");
}

#[test]
fn rejects_empty_balance() {
    let err = Partition::from_balance(&[], 8).unwrap_err();
    assert_eq!(err, PartitionError::EmptyBalance { layers: 8 });
    let msg = err.to_string();
    assert!(msg.contains("empty") && msg.contains("8 layers"), "{msg}");
}

#[test]
fn rejects_zero_entry() {
    let msg = message(&[3, 2, 0, 3], 8);
    assert!(msg.contains("stage 2 has 0 layers"), "{msg}");
    assert!(msg.contains("[3, 2, 0, 3]"), "{msg}");
    assert!(msg.contains("every stage needs at least one"), "{msg}");
    // The first empty stage is the one named.
    let msg = message(&[0, 4, 0, 4], 8);
    assert!(msg.contains("stage 0 has 0 layers"), "{msg}");
}

#[test]
fn rejects_wrong_sum() {
    let err = Partition::from_balance(&[3, 2], 8).unwrap_err();
    assert!(matches!(
        err,
        PartitionError::BalanceSum {
            sum: 5,
            layers: 8,
            ..
        }
    ));
    let msg = err.explain(&Plain);
    assert!(msg.contains("sums to 5") && msg.contains("has 8"), "{msg}");
    assert!(msg.ends_with("; use balance = [5, 3]"), "{msg}");
    let msg = message(&[3, 3, 3], 8);
    assert!(msg.contains("sums to 9") && msg.contains("has 8"), "{msg}");
    // Overflowing sums are a wrong sum too, not a panic.
    let err = Partition::from_balance(&[usize::MAX, usize::MAX], 2).unwrap_err();
    let msg = err.explain(&Plain);
    assert!(
        msg.contains("has 2") && msg.ends_with("use balance = [1, 1]"),
        "{msg}"
    );
}

#[test]
fn rejects_more_stages_than_layers() {
    let err = Partition::from_balance(&[1, 1, 2, 1], 3).unwrap_err();
    assert_eq!(
        err,
        PartitionError::BalanceLength {
            balance: vec![1, 1, 2, 1],
            layers: 3
        }
    );
    // A balance, not a stage count: the stages follow the balance's length.
    let msg = err.explain(&Plain);
    assert!(
        msg.contains("has 4 stages but the model has only 3 layers")
            && msg.ends_with("; use balance = [1, 1, 1]"),
        "{msg}"
    );
    let msg = message(&[1], 0);
    assert!(msg.contains("only 0 layers"), "{msg}");
}

#[test]
fn stage_costs_needs_one_cost_per_layer() {
    let partition = Partition::from_balance(&[2, 2], 4).unwrap();
    let err = partition
        .stage_costs(&pipetrain_partitioner::LayerCost::uniform(3))
        .unwrap_err();
    assert_eq!(
        err,
        PartitionError::CostCount {
            costs: 3,
            layers: 4
        }
    );
    assert!(
        err.to_string()
            .contains("costs for 3 layers but the partition covers 4")
    );
}

#[test]
#[should_panic(expected = "layer 8 out of range: the partition has 8 layers")]
fn stage_of_layer_out_of_range_panics() {
    Partition::from_balance(&[4, 4], 8)
        .unwrap()
        .stage_of_layer(8);
}
