//! A checkpoint saved on the device and resumed on the CPU, and the reverse.

use std::collections::BTreeMap;

use burn::prelude::*;
use pipetrain_models::MlpLayer;

use super::{Scope, pick};
use crate::commands::doctor::fixtures::{BAR, mlp, mlp_data, train};
use crate::commands::doctor::table::Table;
use crate::{OptimizerConfig, PipelineBuilder, SgdOptions};

/// A checkpoint saved on one device and resumed on the other continues the run: 2 steps on
/// `from`, save, 1 step on `to`, against 3 steps on `to`... and the saved weights load unchanged.
///
/// SGD with momentum: its velocity is optimizer state the checkpoint must carry (a lost one
/// changes the 3rd step far beyond the bar), and it adds the devices' rounding without
/// amplifying it. Adam would not do here: its first steps divide each gradient by its own
/// magnitude, so rounding differences between the two devices' first two steps become
/// update-sized (1e-4 on an H100, the first device check), which says nothing about the
/// checkpoint.
pub(super) fn checkpoints(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    let init = mlp(8, 3, 3);
    let data = mlp_data(3, 16, 8, 3);
    let cpu = Device::flex();
    let directions = [
        (device, scope.on(&cpu), "device -> cpu"),
        (scope.on(&cpu), device, "cpu -> device"),
    ];
    for (from, to, what) in pick(scope.quick, directions, &[0]) {
        let case = format!("checkpoint {what}");
        t.run(&case.clone(), |t| {
            let setup = |b: PipelineBuilder<MlpLayer>| {
                b.balance([2, 2])
                    .micro_batches(2)
                    .optimizer(
                        OptimizerConfig::torch_sgd(SgdOptions {
                            momentum: 0.9,
                            ..SgdOptions::default()
                        })
                        .expect("SGD with momentum 0.9 is valid"),
                    )
                    .learning_rate(1e-2)
            };
            let first = train(&init, &data[..2], from, setup)?;
            let path = scope
                .scratch
                .join(format!("{}.ckpt", what.replace([' ', '>'], "")));
            first
                .save_checkpoint(&path, BTreeMap::new())
                .map_err(|e| e.to_string())?;
            let mut resumed = train(&init, &[], to, setup)?;
            resumed.load_checkpoint(&path).map_err(|e| e.to_string())?;
            t.bitwise(
                format!("{case}: weights as saved"),
                &resumed.parameters(),
                &first.parameters(),
            );
            resumed.train_step(&data[2]).map_err(|e| e.to_string())?;
            let straight = train(&init, &data, to, setup)?;
            t.close(
                format!("{case}: 3rd step vs 3 steps there"),
                &resumed.parameters(),
                &straight.parameters(),
                BAR,
            );
            Ok(())
        });
    }
}
