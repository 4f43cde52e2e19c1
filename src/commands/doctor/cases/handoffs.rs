//! The device hand-off: tensors cross between worker threads as copies the sender made.

use super::Scope;
use crate::commands::doctor::fixtures::{
    BAR, mlp, mlp_data, reference, replicas_split, split_verdict, train,
};
use crate::commands::doctor::table::Table;
use crate::{Handoff, OptimizerConfig, Pipeline};

/// The device hand-off (issue 34): tensors cross between worker threads as copies the sender
/// made on its own stream. Replicas on one GPU must stay bitwise equal at every step, 2 × 2
/// must match one device and train the bits of the host hand-off. On the CPU the device path's
/// copies are forced (`DeviceOnCpuToo`), so the suite's own check runs them too.
pub(super) fn handoffs(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    let handoff = match crate::engine::device::is_cpu(device.device) {
        true => Handoff::DeviceOnCpuToo,
        false => Handoff::Device,
    };
    let init = mlp(64, 7, 10);
    let data = mlp_data(10, 256, 64, 10);
    t.run("handoff device: 2 replicas × 1 stage, 10 steps sgd", |t| {
        let mut pipeline = Pipeline::builder()
            .layers(init.clone())
            .devices([device.device.clone()])
            .stages(1)
            .replicas(2)
            .optimizer(OptimizerConfig::sgd())
            .learning_rate(0.01)
            .handoff(handoff)
            .build()
            .map_err(|e| e.to_string())?;
        let first_split = replicas_split(&mut pipeline, &data, device)?;
        t.verdict(
            "handoff device: 2 replicas × 1 stage, 10 steps sgd: replicas equal every step",
            split_verdict(&first_split),
            "bitwise",
            first_split.is_none(),
        );
        let expected = reference(&init, &data, device, &OptimizerConfig::sgd(), 0.01, 1, &[])?;
        t.close(
            "handoff device: 2 replicas × 1 stage, 10 steps sgd vs one device",
            &pipeline.parameters(),
            &expected,
            BAR,
        );
        Ok(())
    });
    let data = mlp_data(5, 256, 64, 10);
    t.run(
        "handoff device: 2 replicas × 2 stages 1f1b m=4 adam",
        |t| {
            let two_by_two = |handoff| {
                train(&init, &data, device, |b| {
                    b.balance([4, 4])
                        .replicas(2)
                        .micro_batches(4)
                        .optimizer(OptimizerConfig::adam())
                        .learning_rate(1e-3)
                        .handoff(handoff)
                })
                .map(|p| p.parameters())
            };
            let got = two_by_two(handoff)?;
            let expected = reference(&init, &data, device, &OptimizerConfig::adam(), 1e-3, 1, &[])?;
            t.close(
                "handoff device: 2 replicas × 2 stages 1f1b m=4 adam, 5 steps vs one device",
                &got,
                &expected,
                BAR,
            );
            t.bitwise(
                "handoff device == host: 2 replicas × 2 stages 1f1b m=4 adam",
                &got,
                &two_by_two(Handoff::Host)?,
            );
            Ok(())
        },
    );
}
