//! `partition_by_time`: rejected inputs, each error naming the numbers and a remedy.

use pipetrain_partitioner::{LayerCost, PartitionError, partition_by_time};
use pipetrain_schedules::StageId;
use pipetrain_schedules::remedy::{Plain, Remedied, Remedy, Setting, Value};

#[test]
fn rejects_zero_stages() {
    let err = partition_by_time(&LayerCost::uniform(4), 0, None).unwrap_err();
    assert_eq!(err, PartitionError::NoStages { layers: 4 });
    let msg = err.to_string();
    assert!(
        msg.contains("4 layers into 0 stages") && msg.contains("at least one stage"),
        "{msg}"
    );
}

#[test]
fn rejects_zero_layers() {
    let err = partition_by_time(&[], 2, None).unwrap_err();
    assert_eq!(err, PartitionError::NoLayers { stages: 2 });
    let msg = err.to_string();
    assert!(
        msg.contains("0 layers into 2 stages") && msg.contains("at least one layer"),
        "{msg}"
    );
}

#[test]
fn rejects_more_stages_than_layers() {
    let err = partition_by_time(&LayerCost::uniform(3), 5, None).unwrap_err();
    assert_eq!(
        err,
        PartitionError::MoreStagesThanLayers {
            stages: 5,
            layers: 3
        }
    );
    assert_eq!(
        err.remedy(),
        Some(Remedy::set(Setting::Stages, Value::Count(3)))
    );
}

#[test]
fn rejects_bad_costs_naming_the_layer() {
    let bad = [
        (LayerCost::new(f64::NAN, 1.0), "forward", "NaN"),
        (LayerCost::new(1.0, -2.0), "backward", "-2"),
        (LayerCost::new(f64::INFINITY, 1.0), "forward", "inf"),
        (LayerCost::new(1.0, f64::NEG_INFINITY), "backward", "-inf"),
    ];
    for (cost, field, value) in bad {
        let mut costs = LayerCost::uniform(5);
        costs[3] = cost;
        let err = partition_by_time(&costs, 2, None).unwrap_err();
        assert!(
            matches!(err, PartitionError::InvalidCost { layer: 3, field: f, .. } if f == field),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("layer 3") && msg.contains(field) && msg.contains(value),
            "{msg}"
        );
        assert!(msg.contains("finite and non-negative"), "{msg}");
    }
}

#[test]
fn over_budget_reports_how_much_is_missing() {
    // Four layers of 100 bytes into two stages: at best 200 bytes per stage.
    let costs = vec![LayerCost::new(1.0, 1.0).with_memory(60, 40); 4];
    assert!(partition_by_time(&costs, 2, Some(200)).is_ok());
    let err = partition_by_time(&costs, 2, Some(150)).unwrap_err();
    assert_eq!(
        err,
        PartitionError::OverBudget {
            stage: StageId(0),
            layers: 0..2,
            needed: 200,
            budget: 150,
            short_by: 50,
        }
    );
    let msg = err.explain(&Plain);
    for part in [
        "stage 0",
        "0..2",
        "200 bytes",
        "150 bytes",
        "short by 50",
        "use memory_budget = 200",
    ] {
        assert!(msg.contains(part), "{part:?} missing from {msg:?}");
    }
}

#[test]
fn budget_of_exactly_the_need_fits() {
    let costs = vec![LayerCost::new(1.0, 1.0).with_memory(7, 3); 6];
    let partition = partition_by_time(&costs, 3, Some(20)).unwrap();
    assert_eq!(partition.balance(), vec![2, 2, 2]);
    assert!(partition_by_time(&costs, 3, Some(19)).is_err());
}

#[test]
fn slow_layer_gets_its_own_stage() {
    let mut costs = LayerCost::uniform(8);
    costs[5] = LayerCost::new(10.0, 20.0);
    let partition = partition_by_time(&costs, 3, None).unwrap();
    assert_eq!(partition.range(partition.stage_of_layer(5)), 5..6);
}
