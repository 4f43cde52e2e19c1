//! `Handoff` (issue 34): how tensors cross between worker threads on one GPU. The device path's
//! copies, forced on a CPU (`Handoff::DeviceOnCpuToo`), must train the very bits the handle
//! passing of a CPU run trains, through the stage transports (activations and gradients) and
//! the in-process all-reduce (its buckets and broadcast sums) alike.

use crate::common;

use burn::prelude::*;
use pipetrain::{Handoff, OptimizerConfig, Pipeline};
use pipetrain_models::{MlpConfig, synthetic};

#[test]
fn the_device_copy_path_trains_the_same_bits_as_handle_passing() {
    let init = common::seeded(5, |d| MlpConfig::new(8, 3, 3).init(d));
    let run = |handoff, zero| {
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
        for k in 0..3 {
            let batch = synthetic::classification(5, k, 16, 8, 3, &Device::flex());
            pipeline.train_step(&batch).unwrap();
        }
        pipeline.parameters()
    };
    for zero in [0, 1] {
        let passed = run(Handoff::Host, zero);
        assert!(
            run(Handoff::DeviceOnCpuToo, zero) == passed,
            "ZeRO {zero}: the device hand-off's copies changed the weights"
        );
        assert!(run(Handoff::Device, zero) == passed, "ZeRO {zero}");
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
