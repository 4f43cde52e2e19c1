//! `Placement`: constructors, accessors, validation and serialization.

use pipetrain_partitioner::{DeviceIndex, PartitionError, Placement};
use pipetrain_schedules::remedy::{Plain, Remedied};
use pipetrain_schedules::{ReplicaId, StageId, WorkerId};

fn worker(replica: u32, stage: u32) -> WorkerId {
    WorkerId::new(ReplicaId(replica), StageId(stage))
}

#[test]
fn single_device_puts_everyone_on_device_zero() {
    let placement = Placement::single_device(3, 4).unwrap();
    assert_eq!((placement.replicas(), placement.stages()), (3, 4));
    assert_eq!(placement.iter().len(), 12);
    assert!(placement.iter().all(|(_, d)| d == DeviceIndex(0)));
    assert_eq!(placement.devices_needed(), 1);
    assert_eq!(placement.workers_on(DeviceIndex(0)).count(), 12);
}

#[test]
fn round_robin_by_rank() {
    let placement = Placement::round_robin(2, 3, 4).unwrap();
    for replica in ReplicaId::range(2) {
        for stage in StageId::range(3) {
            let w = WorkerId::new(replica, stage);
            let rank = replica.index() * 3 + stage.index();
            assert_eq!(placement.device(w), DeviceIndex::from(rank % 4), "{w}");
        }
    }
    assert_eq!(placement.to_string(), "[0 1 2 | 3 0 1]");
    assert_eq!(placement.devices_needed(), 4);
    let on_zero: Vec<_> = placement.workers_on(DeviceIndex(0)).collect();
    assert_eq!(on_zero, vec![worker(0, 0), worker(1, 1)]);
}

#[test]
fn round_robin_one_device_per_worker() {
    let placement = Placement::round_robin(2, 2, 4).unwrap();
    let devices: Vec<u32> = placement.iter().map(|(_, d)| d.0).collect();
    assert_eq!(devices, vec![0, 1, 2, 3]);
    let workers: Vec<WorkerId> = placement.iter().map(|(w, _)| w).collect();
    assert_eq!(
        workers,
        vec![worker(0, 0), worker(0, 1), worker(1, 0), worker(1, 1)]
    );
}

#[test]
fn round_robin_more_devices_than_workers() {
    let placement = Placement::round_robin(1, 2, 8).unwrap();
    assert_eq!(placement.to_string(), "[0 1]");
    assert_eq!(placement.devices_needed(), 2);
}

#[test]
fn explicit_is_replica_major() {
    let devices = [2, 0, 1, 1].map(DeviceIndex).to_vec();
    let placement = Placement::explicit(2, 2, devices).unwrap();
    assert_eq!(placement.device(worker(0, 0)), DeviceIndex(2));
    assert_eq!(placement.device(worker(0, 1)), DeviceIndex(0));
    assert_eq!(placement.device(worker(1, 0)), DeviceIndex(1));
    assert_eq!(placement.device(worker(1, 1)), DeviceIndex(1));
    assert_eq!(placement.devices_needed(), 3);
    assert_eq!(placement.to_string(), "[2 0 | 1 1]");
}

#[test]
fn explicit_rejects_wrong_length() {
    for given in [0, 5, 7] {
        let err = Placement::explicit(2, 3, vec![DeviceIndex(0); given]).unwrap_err();
        assert_eq!(
            err,
            PartitionError::PlacementLength {
                replicas: 2,
                stages: 3,
                expected: 6,
                given
            }
        );
        let msg = err.explain(&Plain);
        assert!(msg.contains(&format!("lists {given} devices")), "{msg}");
        assert!(
            msg.contains("make 6 workers") && msg.contains("one device per worker"),
            "{msg}"
        );
    }
}

#[test]
fn rejects_empty_world_and_no_devices() {
    for (replicas, stages) in [(0, 2), (2, 0), (0, 0)] {
        let err = Placement::single_device(replicas, stages).unwrap_err();
        assert_eq!(err, PartitionError::EmptyWorld { replicas, stages });
        assert!(
            err.to_string()
                .contains(&format!("{replicas} replicas × {stages} stages")),
            "{err}"
        );
        assert!(Placement::round_robin(replicas, stages, 2).is_err());
        assert!(Placement::explicit(replicas, stages, vec![]).is_err());
    }
    let err = Placement::round_robin(2, 3, 0).unwrap_err();
    assert_eq!(err, PartitionError::NoDevices { workers: 6 });
    assert!(
        err.to_string()
            .contains("6 workers round-robin over 0 devices"),
        "{err}"
    );
}

#[test]
#[should_panic(expected = "replica 2 / stage 0 is outside this placement of 2 replicas × 3 stages")]
fn device_of_unknown_worker_panics() {
    Placement::single_device(2, 3).unwrap().device(worker(2, 0));
}

#[test]
#[should_panic(expected = "outside this placement")]
fn device_of_unknown_stage_panics() {
    Placement::single_device(2, 3).unwrap().device(worker(0, 3));
}

#[test]
fn serde_round_trip_validates() {
    let placement = Placement::round_robin(2, 3, 4).unwrap();
    let json = serde_json::to_string(&placement).unwrap();
    assert_eq!(json, r#"{"replicas":2,"stages":3,"devices":[0,1,2,3,0,1]}"#);
    assert_eq!(serde_json::from_str::<Placement>(&json).unwrap(), placement);
    let bad = r#"{"replicas":2,"stages":3,"devices":[0,1]}"#;
    let err = serde_json::from_str::<Placement>(bad).unwrap_err();
    assert!(err.to_string().contains("lists 2 devices"), "{err}");
}
