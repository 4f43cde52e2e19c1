//! The main test: a pipelined step equals a single-device step on the same init and data.
//!
//! Sweep: schedule {gpipe, 1f1b} × stages {1,2,3,4} × micro-batches {1,2,4,8} (m < p included)
//! × remat {never, always} × backward {split, fused} × optimizer {SGD, Adam}. After 3 steps
//! every parameter tensor is within 1e-5 (norm-wise relative) of single-device training, and
//! GPipe and 1F1B at the same m are bitwise equal.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::partitioner::Partition;
use pipetrain::{Backward, CrossEntropy, OptimizerConfig, Pipeline, Remat, ScheduleKind};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

const STEPS: u64 = 3;
const BATCH: usize = 16;
const WIDTH: usize = 8;
const CLASSES: usize = 3;
const SEED: u64 = 2026;

fn model() -> Vec<MlpLayer> {
    common::seeded(SEED, |d| MlpConfig::new(WIDTH, 5, CLASSES).init(d)) // 6 layers
}

fn batches(device: &Device) -> Vec<pipetrain::Batch> {
    (0..STEPS)
        .map(|k| synthetic::classification(SEED, k, BATCH, WIDTH, CLASSES, device))
        .collect()
}

/// One pipelined configuration.
struct Case {
    schedule: ScheduleKind,
    stages: usize,
    micro_batches: usize,
    remat: Remat,
    backward: Backward,
}

/// An optimizer under test: name, config, learning rate.
type OptimizerCase = (&'static str, fn() -> OptimizerConfig, f64);

fn optimizers() -> [OptimizerCase; 2] {
    [
        ("sgd", OptimizerConfig::sgd, 0.1),
        ("adam", OptimizerConfig::adam, 1e-2),
    ]
}

fn reference(
    init: &[MlpLayer],
    optimizer: &OptimizerConfig,
    lr: f64,
    data: &[pipetrain::Batch],
) -> Vec<Vec<f32>> {
    let device = Device::flex();
    let mut single = SingleDevice::new(init.to_vec(), &device, optimizer);
    for b in data {
        single
            .step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, lr)
            .unwrap();
    }
    single.parameters()
}

fn pipelined(
    init: &[MlpLayer],
    optimizer: OptimizerConfig,
    lr: f64,
    data: &[pipetrain::Batch],
    case: Case,
) -> Vec<Vec<f32>> {
    let Case {
        schedule,
        stages,
        micro_batches,
        remat,
        backward,
    } = case;
    let balance = Partition::even(init.len(), stages).unwrap().balance();
    let mut pipeline = Pipeline::builder()
        .layers(init.to_vec())
        .balance(balance)
        .micro_batches(micro_batches)
        .schedule(schedule)
        .remat(remat)
        .backward(backward)
        .optimizer(optimizer)
        .learning_rate(lr)
        .threads_per_worker(1)
        .build()
        .unwrap();
    for b in data {
        let report = pipeline.train_step(b).unwrap();
        assert!(report.loss.is_finite());
    }
    pipeline.parameters()
}

#[test]
fn every_schedule_stage_count_and_micro_batch_count_matches_single_device() {
    let device = Device::flex();
    let init = model();
    let data = batches(&device);
    let mut worst = 0f64;
    for (name, optimizer, lr) in optimizers() {
        let expected = reference(&init, &optimizer(), lr, &data);
        let moved = difference(&pipetrain::engine::parameters(&init), &expected).max_relative;
        assert!(
            moved > 1e-3,
            "{name}: training must move the weights (moved {moved})"
        );
        for stages in 1..=4 {
            for micro_batches in [1, 2, 4, 8] {
                let per_micro_batch = Backward::Split { weight_group: 1 };
                for (remat, backward) in [Remat::Never, Remat::Always]
                    .into_iter()
                    .flat_map(|r| [(r, Backward::default()), (r, Backward::Fused)])
                    .chain([(Remat::Never, per_micro_batch)])
                {
                    let mut by_schedule = Vec::new();
                    for schedule in ScheduleKind::ALL {
                        let case = Case {
                            schedule,
                            stages,
                            micro_batches,
                            remat,
                            backward,
                        };
                        let got = pipelined(&init, optimizer(), lr, &data, case);
                        let d = difference(&got, &expected);
                        assert!(
                            d.max_relative <= 1e-5,
                            "{name} {schedule} p={stages} m={micro_batches} remat={remat} \
                             {backward:?}: max_rel_diff {:.3e} (max abs {:.3e})",
                            d.max_relative,
                            d.max_absolute
                        );
                        worst = worst.max(d.max_relative);
                        by_schedule.push((schedule, got));
                    }
                    // Bitwise equal at the same weight-gradient group. ZB-H1 places each `W`
                    // (group 1 by default), GPipe and 1F1B batch the step's (group m): a
                    // batched dW rounds differently from a sum of per-micro-batch ones.
                    let group = |schedule: ScheduleKind| match backward {
                        Backward::Split { weight_group: 0 } if schedule.splits_backward() => 1,
                        Backward::Split { weight_group: 0 } => micro_batches,
                        Backward::Split { weight_group } => weight_group,
                        Backward::Fused => 0,
                    };
                    for (schedule, got) in &by_schedule {
                        let (first, theirs) = by_schedule
                            .iter()
                            .find(|(other, _)| group(*other) == group(*schedule))
                            .unwrap();
                        assert!(
                            got == theirs,
                            "{name} p={stages} m={micro_batches} remat={remat} {backward:?}: \
                             {schedule} is not bitwise equal to {first}",
                        );
                    }
                }
            }
        }
    }
    println!("worst max_rel_diff over the sweep: {worst:.3e}");
}

#[test]
fn remat_modes_are_bitwise_equal_and_sgd_momentum_and_adamw_match() {
    let device = Device::flex();
    let init = model();
    let data = batches(&device);
    for (name, optimizer, lr) in [
        (
            "sgd+momentum",
            (|| OptimizerConfig::sgd_momentum(0.9)) as fn() -> OptimizerConfig,
            0.05,
        ),
        ("adamw", OptimizerConfig::adamw, 1e-2),
    ] {
        let expected = reference(&init, &optimizer(), lr, &data);
        let runs: Vec<_> = [Remat::Never, Remat::ExceptLast, Remat::Always]
            .into_iter()
            .map(|remat| {
                pipelined(
                    &init,
                    optimizer(),
                    lr,
                    &data,
                    Case {
                        schedule: ScheduleKind::OneFOneB,
                        stages: 3,
                        micro_batches: 4,
                        remat,
                        backward: Backward::default(),
                    },
                )
            })
            .collect();
        for got in &runs {
            let d = difference(got, &expected);
            assert!(d.max_relative <= 1e-5, "{name}: {:.3e}", d.max_relative);
            assert!(got == &runs[0], "{name}: remat modes differ bitwise");
        }
    }
}
