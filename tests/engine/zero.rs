//! ZeRO-2 and ZeRO-3 beyond the equivalence sweeps (data_parallel.rs, interleaved.rs,
//! checkpoint.rs): what a replica holds between steps, checkpoints written from a sharded
//! pipeline, and the settings refused.

use std::collections::BTreeMap;

use crate::common;
use burn::prelude::*;
use pipetrain::{Batch, OptimizerConfig, Pipeline, Remat, ReplicaId, StageId, WorkerId};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

fn model() -> Vec<MlpLayer> {
    common::seeded(3, |device| MlpConfig::new(16, 3, 4).init(device)) // 4 layers
}

fn batch(index: u64) -> Batch {
    synthetic::classification(3, index, 12, 16, 4, &Device::flex())
}

fn trained(replicas: usize, zero: u8, steps: u64) -> Pipeline<MlpLayer> {
    let mut p = Pipeline::builder()
        .layers(model())
        .balance([2, 2])
        .replicas(replicas)
        .micro_batches(2)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(1e-2)
        .zero(zero)
        .threads_per_worker(1)
        .build()
        .unwrap();
    for step in 0..steps {
        p.train_step(&batch(step)).unwrap();
    }
    p
}

/// Bytes of float values a worker's layers hold now, and what it owns of its stage's.
fn held(p: &Pipeline<MlpLayer>, replica: usize, stage: usize) -> (u64, Option<(u64, u64)>) {
    let id = WorkerId::new(ReplicaId::from(replica), StageId::from(stage));
    p.held_parameter_bytes()
        .into_iter()
        .find(|h| h.worker == id)
        .map(|h| (h.held, h.owned.zip(h.whole)))
        .unwrap()
}

fn held_values(p: &Pipeline<MlpLayer>, replica: usize, stage: usize) -> u64 {
    held(p, replica, stage).0
}

#[test]
fn between_steps_a_level_three_replica_holds_only_what_it_owns() {
    for replicas in [2, 3] {
        let sharded = trained(replicas, 3, 2);
        let whole = trained(replicas, 0, 2);
        for stage in 0..2 {
            let all = held_values(&whole, 0, stage);
            let shares: Vec<u64> = (0..replicas)
                .map(|r| held_values(&sharded, r, stage))
                .collect();
            // Disjoint shares of whole tensors: together one copy, each less than it.
            assert_eq!(
                shares.iter().sum::<u64>(),
                all,
                "{replicas} replicas: {shares:?}"
            );
            assert!(
                shares.iter().all(|&h| h < all && h > 0),
                "{shares:?} of {all}"
            );
            for (r, &h) in shares.iter().enumerate() {
                assert_eq!(held(&sharded, r, stage).1, Some((h, all)));
            }
        }
        // Put together, every replica's copy is level 0's, bit for bit.
        for r in 0..replicas {
            assert_eq!(sharded.replica_parameters(r), whole.parameters());
        }
        // Level 2 keeps the values whole.
        let two = trained(replicas, 2, 2);
        assert_eq!(held_values(&two, 1, 0), held_values(&whole, 1, 0));
        assert_eq!(two.parameters(), whole.parameters());
    }
}

#[test]
fn a_sharded_pipeline_writes_the_checkpoint_plain_data_parallelism_writes() {
    use safetensors::SafeTensors;
    let tmp = common::scratch("zero-ckpt");
    let bytes = |zero: u8| {
        let path = tmp.path().join(format!("zero{zero}.safetensors"));
        trained(2, zero, 2)
            .save_checkpoint(&path, BTreeMap::new())
            .unwrap();
        std::fs::read(&path).unwrap()
    };
    // Tensor by tensor and the metadata (the header's key order is a hash map's).
    let read = |bytes: &[u8]| {
        let file = SafeTensors::deserialize(bytes).unwrap();
        let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = file
            .tensors()
            .into_iter()
            .map(|(name, v)| (name, v.shape().to_vec(), v.data().to_vec()))
            .collect();
        tensors.sort();
        let (_, header) = SafeTensors::read_metadata(bytes).unwrap();
        let metadata: BTreeMap<String, String> = header
            .metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        (tensors, metadata)
    };
    let plain = read(&bytes(0));
    assert!(plain.0.len() > 8, "weights and optimizer state");
    for zero in [2, 3] {
        assert!(
            read(&bytes(zero)) == plain,
            "ZeRO-{zero}'s checkpoint differs"
        );
    }
}

#[test]
fn inference_and_a_further_step_after_a_level_three_step_match_level_zero() {
    let mut sharded = trained(2, 3, 1);
    let mut whole = trained(2, 0, 1);
    let x = batch(9).inputs;
    let (a, b) = (
        sharded.forward(x.clone()).unwrap(),
        whole.forward(x).unwrap(),
    );
    assert_eq!(a.to_f64_vec(), b.to_f64_vec());
    sharded.train_step(&batch(1)).unwrap();
    whole.train_step(&batch(1)).unwrap();
    assert_eq!(sharded.parameters(), whole.parameters());
}

#[test]
fn zero_two_or_three_refuses_to_accumulate_tied_parameters() {
    let err = Pipeline::builder()
        .layers(model())
        .balance([2, 2])
        .replicas(2)
        .micro_batches(2)
        .accumulation(2)
        .zero(3)
        .tie(pipetrain::Tie::new("0.weight", "3.weight"))
        .build()
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("ZeRO stage 3") && err.contains("cannot accumulate"),
        "{err}"
    );
}
