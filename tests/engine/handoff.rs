//! `Handoff` (issue 34): how tensors cross between worker threads on one GPU. A CPU passes the
//! handle in every mode, so the bits cannot differ there (the GPU suite compares them): here the
//! setting reaches every worker, and the forced copies (`Handoff::DeviceOnCpuToo`) run a step.

use crate::common;

use burn::prelude::*;
use pipetrain::{Handoff, OptimizerConfig, Pipeline};
use pipetrain_models::{MlpConfig, synthetic};

/// What a CPU can observe of the setting (issue 48 item 5; that the copies train the same bits
/// is the GPU suite's, a CPU passes handles in every mode): it reaches every worker's setup.
/// The copies themselves, forced on a CPU, are observed where they are made: the collective's
/// (`comm/collective/channel.rs`) and the replicas' weights (`runtime/prepared.rs`), by the
/// buffers' holder counts; the banner is `matmul_precision.rs`'s.
#[test]
fn the_handoff_reaches_every_workers_setup() {
    let init = common::seeded(5, |d| MlpConfig::new(8, 3, 3).init(d));
    for handoff in [Handoff::Host, Handoff::Device, Handoff::DeviceOnCpuToo] {
        for zero in [0, 1] {
            let mut pipeline = Pipeline::builder()
                .layers(init.clone())
                .balance([2, 2])
                .replicas(2)
                .zero(zero)
                .micro_batches(2)
                .optimizer(OptimizerConfig::adam())
                .learning_rate(1e-2)
                .handoff(handoff)
                .threads_per_worker(1)
                .build()
                .unwrap();
            let workers = pipeline.setup().workers();
            assert_eq!(workers.len(), 4);
            assert!(
                workers.iter().all(|w| w.handoff == handoff),
                "ZeRO {zero}: {handoff:?} did not reach every worker"
            );
            // The forced copies run end to end.
            let batch = synthetic::classification(5, 0, 16, 8, 3, &Device::flex());
            pipeline.train_step(&batch).unwrap();
        }
    }
}

#[test]
fn handoff_parses_and_prints() {
    for (text, handoff) in [("host", Handoff::Host), ("device", Handoff::Device)] {
        assert_eq!(text.parse::<Handoff>().unwrap(), handoff);
        assert_eq!(handoff.to_string(), text);
    }
    assert!(
        "nccl"
            .parse::<Handoff>()
            .unwrap_err()
            .contains("host or device")
    );
}
