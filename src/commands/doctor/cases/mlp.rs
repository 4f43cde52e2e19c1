//! The MLP under every schedule: 1–3 stages, split and fused backward, every remat mode, and
//! the virtual-stage schedules against GPipe over the same chunks.

use super::Scope;
use crate::commands::doctor::fixtures::{BAR, mlp, mlp_data, optimizers, reference, train};
use crate::commands::doctor::table::Table;
use crate::{Backward, OptimizerConfig, Remat, ScheduleKind};

/// MLP: 1–3 stages × GPipe/1F1B/ZB-H1 × backward (split, fused, split per micro-batch) × remat,
/// under SGD and Adam, against one device; bitwise across schedules at the same weight group.
pub(super) fn mlp_schedules(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    let init = mlp(8, 5, 3); // 6 layers
    let data = mlp_data(3, 16, 8, 3);
    let m = 4;
    for (name, optimizer, lr) in optimizers(scope.quick) {
        let Ok(expected) = reference(&init, &data, device, &optimizer(), lr, 1, &[]) else {
            t.failed(
                format!("mlp {name} reference"),
                "single-device training failed",
            );
            continue;
        };
        // The quick sweep: 2 stages, and the two ends of the backward × remat range.
        let stage_counts = if scope.quick { 2..=2 } else { 1..=3 };
        let variants = [
            (Remat::Never, Backward::default()),
            (Remat::Always, Backward::Fused),
            (Remat::ExceptLast, Backward::default()),
            (Remat::Always, Backward::default()),
            (Remat::Never, Backward::Fused),
            (Remat::Never, Backward::Split { weight_group: 1 }),
        ];
        for stages in stage_counts {
            for &(remat, backward) in &variants[..if scope.quick { 2 } else { variants.len() }] {
                let mut by_schedule = Vec::new();
                for schedule in ScheduleKind::ALL {
                    let case = format!(
                        "mlp {name} {schedule} p={stages} m={m} remat={remat} {backward:?}"
                    );
                    t.begin(&case);
                    let got = train(&init, &data, device, |b| {
                        b.stages(stages)
                            .micro_batches(m)
                            .schedule(schedule)
                            .remat(remat)
                            .backward(backward)
                            .optimizer(optimizer())
                            .learning_rate(lr)
                    });
                    match got {
                        Ok(p) => {
                            let got = p.parameters();
                            t.close(case, &got, &expected, BAR);
                            by_schedule.push((schedule, got));
                        }
                        Err(e) => t.failed(case, e),
                    }
                }
                // Same weight-gradient group: GPipe and 1F1B batch the step's W (group m), ZB-H1
                // computes each micro-batch's (group 1) unless the group is given.
                let group = |s: ScheduleKind| match backward {
                    Backward::Split { weight_group: 0 } if s.splits_backward() => 1,
                    Backward::Split { weight_group: 0 } => m,
                    Backward::Split { weight_group } => weight_group,
                    Backward::Fused => 0,
                };
                for (schedule, got) in &by_schedule {
                    if let Some((first, theirs)) = by_schedule
                        .iter()
                        .find(|(other, _)| other != schedule && group(*other) == group(*schedule))
                    {
                        t.bitwise(
                            format!("mlp {name} {schedule} == {first} p={stages} remat={remat} {backward:?}"),
                            got,
                            theirs,
                        );
                    }
                }
            }
        }
    }
}

/// Interleaved (v = 2) and ZB-V on 2 ranks: against one device, and bitwise equal to GPipe over
/// the same chunks at the same weight group.
pub(super) fn mlp_virtual_stages(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    let init = mlp(8, 7, 3); // 8 layers
    let data = mlp_data(2, 16, 8, 3);
    let (optimizer, lr) = (OptimizerConfig::adam, 1e-2);
    let Ok(expected) = reference(&init, &data, device, &optimizer(), lr, 1, &[]) else {
        return t.failed(
            "mlp virtual stages reference",
            "single-device training failed",
        );
    };
    let balance = [2, 2, 2, 2];
    let per_micro_batch = Backward::Split { weight_group: 1 };
    let cases = [
        (
            ScheduleKind::Interleaved { virtual_stages: 2 },
            Backward::default(),
            Backward::default(),
        ),
        (
            ScheduleKind::Interleaved { virtual_stages: 2 },
            Backward::Fused,
            Backward::Fused,
        ),
        (ScheduleKind::ZbV, Backward::default(), per_micro_batch),
        (ScheduleKind::ZbV, Backward::Fused, Backward::Fused),
        (
            ScheduleKind::LoopedBfs { virtual_stages: 2 },
            Backward::default(),
            Backward::default(),
        ),
        (
            ScheduleKind::InterleavedZb { virtual_stages: 2 },
            Backward::default(),
            per_micro_batch,
        ),
        (
            ScheduleKind::DualPipeV,
            Backward::default(),
            per_micro_batch,
        ),
        (ScheduleKind::DualPipeV, Backward::Fused, Backward::Fused),
    ];
    // The quick sweep: interleaved and ZB-V, split backward.
    let picked = cases
        .iter()
        .enumerate()
        .filter(|(i, _)| !scope.quick || *i == 0 || *i == 2)
        .map(|(_, c)| *c);
    for (schedule, backward, gpipe_backward) in picked {
        let case = format!("mlp adam {schedule} p=2 m=4 {backward:?}");
        t.run(&case.clone(), |t| {
            let got = train(&init, &data, device, |b| {
                b.stages(2)
                    .balance(balance)
                    .micro_batches(4)
                    .schedule(schedule)
                    .backward(backward)
                    .optimizer(optimizer())
                    .learning_rate(lr)
            })?
            .parameters();
            t.close(case.clone(), &got, &expected, BAR);
            let gpipe = train(&init, &data, device, |b| {
                b.balance(balance)
                    .micro_batches(4)
                    .schedule(ScheduleKind::GPipe)
                    .backward(gpipe_backward)
                    .optimizer(optimizer())
                    .learning_rate(lr)
            })?
            .parameters();
            t.bitwise(format!("{case} == gpipe over its chunks"), &got, &gpipe);
            Ok(())
        });
    }
}
