//! Data parallelism on one device: plain all-reduce, ZeRO-1, accumulation, uneven micro-batches;
//! the replicas bitwise equal.

use super::{Scope, pick};
use crate::commands::doctor::fixtures::{BAR, mlp, mlp_data, optimizers, reference, train};
use crate::commands::doctor::table::Table;

/// Data parallelism on one GPU: plain all-reduce, ZeRO-1, accumulation, uneven micro-batches.
pub(super) fn data_parallel(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    let init = mlp(8, 3, 3); // 4 layers
    for (name, optimizer, lr) in optimizers(scope.quick) {
        let data = mlp_data(4, 16, 8, 3);
        let layouts = [
            ("2 replicas × 1 stage", 0, 1, 1),
            ("2 replicas × 2 stages", 0, 1, 2),
            ("2 replicas × 2 stages zero-1", 1, 1, 2),
            ("2 replicas × 1 stage accumulation 2", 0, 2, 1),
        ];
        for (what, zero, accumulation, stages) in pick(scope.quick, layouts, &[1, 2]) {
            let case = format!("mlp {name} {what}");
            t.run(&case.clone(), |t| {
                let expected =
                    reference(&init, &data, device, &optimizer(), lr, accumulation, &[])?;
                let got = train(&init, &data, device, |b| {
                    b.stages(stages)
                        .replicas(2)
                        .zero(zero)
                        .accumulation(accumulation)
                        .micro_batches(2)
                        .optimizer(optimizer())
                        .learning_rate(lr)
                })?;
                t.close(case.clone(), &got.parameters(), &expected, BAR);
                t.bitwise(
                    format!("{case}: replica 1 == replica 0"),
                    &got.replica_parameters(1),
                    &got.replica_parameters(0),
                );
                Ok(())
            });
        }
        if scope.quick {
            continue;
        }
        // 15 rows into 2 replicas × 4 micro-batches: parts of 2 and 1 rows.
        let data = mlp_data(3, 15, 8, 3);
        let case = format!("mlp {name} uneven: 15 rows, 2 replicas × 2 stages × m=4");
        t.run(&case.clone(), |t| {
            let expected = reference(&init, &data, device, &optimizer(), lr, 1, &[])?;
            let got = train(&init, &data, device, |b| {
                b.stages(2)
                    .replicas(2)
                    .micro_batches(4)
                    .optimizer(optimizer())
                    .learning_rate(lr)
            })?;
            t.close(case, &got.parameters(), &expected, BAR);
            Ok(())
        });
    }
}
