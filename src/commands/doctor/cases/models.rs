//! The other models: the GPT (plain and with tied embeddings), the ResNet (batch norm) and the
//! U-Net (skips) on 2–3 stages.

use super::{Scope, pick};
use crate::commands::doctor::fixtures::{
    BAR, On, gpt, gpt_config, images, optimizers, precise_reference, rebalance, reference, resnet,
    tokens, train, unet,
};
use crate::commands::doctor::table::Table;
use crate::{Batch, Layer, OptimizerConfig, Precision, Remat};

/// The other models on 2–3 stages, both optimizers; the GPT also tied.
pub(super) fn models(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    for (name, optimizer, lr) in optimizers(scope.quick) {
        let data = tokens(3);
        let gpts = [
            (vec![2, 2], false),
            (vec![1, 2, 1], false),
            (vec![2, 2], true),
        ];
        for (balance, tied) in pick(scope.quick, gpts, &[2]) {
            let ties = if tied {
                vec![gpt_config().tie_embeddings()]
            } else {
                Vec::new()
            };
            let case = format!(
                "gpt {name} balance={balance:?}{}",
                if tied { " tied" } else { "" }
            );
            t.run(&case.clone(), |t| {
                let expected = reference(&gpt(), &data, device, &optimizer(), lr, 1, &ties)?;
                let got = train(&gpt(), &data, device, |mut b| {
                    for tie in ties.clone() {
                        b = b.tie(tie);
                    }
                    b.balance(balance.clone())
                        .micro_batches(4)
                        .optimizer(optimizer())
                        .learning_rate(lr)
                })?;
                t.close(case, &got.parameters(), &expected, BAR);
                Ok(())
            });
        }
        let data = images(3, 3, 8);
        for balance in pick(scope.quick, [vec![2, 2], vec![1, 2, 1]], &[0]) {
            let layers = resnet();
            let balance = rebalance(&balance, layers.len());
            let case = format!("resnet {name} balance={balance:?}");
            t.run(&case.clone(), |t| {
                let expected = chunked_reference(&layers, &data, device, &optimizer(), lr, 4)?;
                let got = train(&layers, &data, device, |b| {
                    b.balance(balance.clone())
                        .remat(Remat::Never) // batch norm: no re-materialization
                        .micro_batches(4)
                        .optimizer(optimizer())
                        .learning_rate(lr)
                })?;
                t.close(case, &got.parameters(), &expected, BAR);
                Ok(())
            });
        }
        let data = images(3, 1, 4);
        for (balance, replicas) in pick(scope.quick, [(vec![2, 2, 2], 1), (vec![3, 3], 2)], &[1]) {
            let case = format!("unet {name} balance={balance:?} replicas={replicas} (skips)");
            t.run(&case.clone(), |t| {
                let expected = reference(&unet(), &data, device, &optimizer(), lr, 1, &[])?;
                let got = train(&unet(), &data, device, |b| {
                    b.balance(balance.clone())
                        .replicas(replicas)
                        .micro_batches(2)
                        .optimizer(optimizer())
                        .learning_rate(lr)
                })?;
                t.close(case, &got.parameters(), &expected, BAR);
                Ok(())
            });
        }
    }
}

/// Single-device training that cuts each batch into `chunks` micro-batches (batch norm: the
/// reference a pipeline with that many micro-batches must match).
pub(super) fn chunked_reference<L: Layer>(
    layers: &[L],
    data: &[Batch],
    device: On<'_>,
    optimizer: &OptimizerConfig,
    lr: f64,
    chunks: usize,
) -> Result<Vec<Vec<f32>>, String> {
    precise_reference(
        layers,
        data,
        device,
        (optimizer, lr),
        chunks,
        Precision::Fp32,
        &[],
    )
}
