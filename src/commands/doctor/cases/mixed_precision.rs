//! bf16: the MLP on 1–3 stages × 1–2 replicas under every schedule against single-device bf16
//! on the same device, bitwise across schedules; the tied GPT; the bytes sent halved.

use super::{Scope, pick};
use crate::commands::doctor::fixtures::{
    BAR, gpt, gpt_config, mlp, mlp_data, optimizers, precise_reference, tokens, train,
};
use crate::commands::doctor::table::Table;
use crate::engine::difference;
use crate::{Backward, OptimizerConfig, Precision, Remat, ScheduleKind};

/// bf16 (issue 35): the MLP on 1–3 stages × 1–2 replicas, every schedule, split and fused
/// backward, remat, SGD and Adam, against single-device bf16 on the same device and bitwise
/// across schedules; bf16 apart from fp32; the tied GPT; the bytes sent halved.
pub(super) fn mixed_precision(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    let init = mlp(16, 5, 3); // 6 layers
    let data = mlp_data(3, 16, 16, 3);
    let m = 4;
    for (name, optimizer, lr) in optimizers(scope.quick) {
        for replicas in pick(scope.quick, [1, 2], &[1]) {
            let chunks = replicas * m;
            let reference = |precision| {
                precise_reference(
                    &init,
                    &data,
                    device,
                    (&optimizer(), lr),
                    chunks,
                    precision,
                    &[],
                )
            };
            let (expected, fp32) = match (reference(Precision::Bf16), reference(Precision::Fp32)) {
                (Ok(e), Ok(f)) => (e, f),
                (Err(e), _) | (_, Err(e)) => {
                    t.failed(format!("bf16 mlp {name} r={replicas} reference"), e);
                    continue;
                }
            };
            let apart = difference(&fp32, &expected).max_relative;
            t.verdict(
                format!("bf16 mlp {name} r={replicas}: single-device bf16 is not fp32"),
                format!("{apart:.3e} apart"),
                "> 1e-4",
                apart > 1e-4,
            );
            let variants = [
                (Remat::Never, Backward::default()),
                (Remat::Always, Backward::default()),
                (Remat::Never, Backward::Fused),
            ];
            let stage_counts = if scope.quick { 2..=2 } else { 1..=3 };
            for stages in stage_counts {
                for &(remat, backward) in &variants[..if scope.quick { 1 } else { 3 }] {
                    let mut first: Option<(ScheduleKind, Vec<Vec<f32>>)> = None;
                    for schedule in ScheduleKind::ALL {
                        let case = format!(
                            "bf16 mlp {name} {schedule} {replicas}x{stages} m={m} \
                             remat={remat} {backward:?}"
                        );
                        t.begin(&case);
                        let got = train(&init, &data, device, |b| {
                            b.stages(stages)
                                .replicas(replicas)
                                .micro_batches(m)
                                .schedule(schedule)
                                .remat(remat)
                                .backward(backward)
                                .precision(Precision::Bf16)
                                .optimizer(optimizer())
                                .learning_rate(lr)
                        });
                        let got = match got {
                            Ok(p) => p.parameters(),
                            Err(e) => {
                                t.failed(case, e);
                                continue;
                            }
                        };
                        t.close(case.clone(), &got, &expected, BAR);
                        match &first {
                            None => first = Some((schedule, got)),
                            Some((them, theirs)) => {
                                t.bitwise(format!("{case} == {them}"), &got, theirs)
                            }
                        }
                    }
                }
            }
        }
    }
    if scope.quick {
        return half_the_bytes(t, scope);
    }
    // The GPT: bundles, int ids, norms and softmax in fp32 inside bf16 blocks, a tie.
    let init = gpt();
    let data = tokens(2);
    let ties = [gpt_config().tie_embeddings()];
    let adam = OptimizerConfig::adam;
    t.run("bf16 gpt tied 4 stages 1f1b", |t| {
        let expected = precise_reference(
            &init,
            &data,
            device,
            (&adam(), 1e-2),
            4,
            Precision::Bf16,
            &ties,
        )?;
        let got = train(&init, &data, device, |b| {
            b.balance([1, 1, 1, 1])
                .micro_batches(4)
                .tie(ties[0].clone())
                .precision(Precision::Bf16)
                .optimizer(adam())
                .learning_rate(1e-2)
        })?;
        t.close(
            "bf16 gpt tied 4 stages 1f1b",
            &got.parameters(),
            &expected,
            BAR,
        );
        Ok(())
    });
    half_the_bytes(t, scope);
}

/// bf16 sends half the bytes of fp32 between stages.
fn half_the_bytes(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    t.run("bf16 sends half the bytes", |t| {
        let init = mlp(16, 5, 3);
        let data = mlp_data(1, 16, 16, 3);
        let sent = |precision| -> Result<u64, String> {
            let mut p = train(&init, &[], device, |b| {
                b.balance([3, 3]).micro_batches(4).precision(precision)
            })?;
            let report = p.train_step(&data[0]).map_err(|e| e.to_string())?;
            Ok(report.workers.iter().map(|w| w.sent_bytes).sum())
        };
        let (fp32, bf16) = (sent(Precision::Fp32)?, sent(Precision::Bf16)?);
        t.verdict(
            "bf16 sends half the bytes between 2 stages",
            format!("fp32 {fp32} B, bf16 {bf16} B"),
            "half",
            fp32 > 0 && 2 * bf16 == fp32,
        );
        Ok(())
    });
}
