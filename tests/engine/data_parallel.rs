//! Data parallelism: replicas × stages, accumulation and ZeRO 1–3 all equal single-device
//! training.
//!
//! Sweep: replicas {1,2,3} × stages {1,2,3} × every one-stage-per-rank schedule × {plain,
//! accumulate 2, zero 1, zero 2, zero 3, accumulate 2 at zero 3}, Adam, 3 optimizer steps,
//! against one device on the same global batches (with accumulation: the concatenation of the
//! accumulated batches). Within 1e-5 relative; every replica holds the same bits; two runs of
//! one configuration are bitwise equal; ZeRO 1–3 are bitwise equal to plain data parallelism.

use std::sync::mpsc;
use std::time::Duration;

use crate::common;
use burn::nn::{Linear, LinearConfig};

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{
    Activation, Batch, CrossEntropy, EngineError, Error, Layer, OptimizerConfig, Pipeline, Remat,
    ScheduleKind,
};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};
use pipetrain_schedules::ActionKind;

const STEPS: u64 = 3;
const BATCH: usize = 12; // splits into r ∈ {1,2,3} × m = 2
const MICRO_BATCHES: usize = 2;
const WIDTH: usize = 8;
const CLASSES: usize = 3;
const SEED: u64 = 7;
const LR: f64 = 1e-2;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Plain,
    Accumulate(usize),
    /// A ZeRO level.
    Zero(u8),
    /// Accumulation at a ZeRO level.
    AccumulateZero(usize, u8),
}

impl Mode {
    fn accumulation(self) -> usize {
        match self {
            Mode::Accumulate(k) | Mode::AccumulateZero(k, _) => k,
            _ => 1,
        }
    }

    fn zero(self) -> u8 {
        match self {
            Mode::Zero(z) | Mode::AccumulateZero(_, z) => z,
            _ => 0,
        }
    }
}

fn model() -> Vec<MlpLayer> {
    common::seeded(SEED, |device| {
        MlpConfig::new(WIDTH, 3, CLASSES).init(device)
    }) // 4 layers
}

fn batch(index: u64) -> Batch {
    synthetic::classification(SEED, index, BATCH, WIDTH, CLASSES, &Device::flex())
}

/// Batches of optimizer step `step` under `mode`.
fn step_batches(mode: Mode, step: u64) -> Vec<Batch> {
    let k = mode.accumulation() as u64;
    (0..k).map(|j| batch(step * k + j)).collect()
}

fn reference(init: &[MlpLayer], mode: Mode) -> Vec<Vec<f32>> {
    let mut single = SingleDevice::new(init.to_vec(), &Device::flex(), &OptimizerConfig::adam());
    for step in 0..STEPS {
        let (inputs, targets): (Vec<_>, Vec<_>) = step_batches(mode, step)
            .into_iter()
            .map(|b| (b.inputs, b.targets))
            .unzip();
        single
            .step(
                Activation::cat(inputs).unwrap(),
                Activation::cat(targets).unwrap(),
                &CrossEntropy,
                LR,
            )
            .unwrap();
    }
    single.parameters()
}

/// Trains and returns every replica's parameters.
fn data_parallel(
    init: &[MlpLayer],
    replicas: usize,
    stages: usize,
    schedule: ScheduleKind,
    mode: Mode,
) -> Vec<Vec<Vec<f32>>> {
    let mut pipeline = Pipeline::builder()
        .layers(init.to_vec())
        .balance(match stages {
            1 => vec![4],
            2 => vec![2, 2],
            _ => vec![2, 1, 1],
        })
        .replicas(replicas)
        .micro_batches(MICRO_BATCHES)
        .schedule(schedule)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(LR)
        .accumulation(mode.accumulation())
        .zero(mode.zero())
        .bucket_bytes(64) // several buckets even for this tiny model
        .threads_per_worker(1)
        .build()
        .unwrap();
    for step in 0..STEPS {
        let batches = step_batches(mode, step);
        for (j, b) in batches.iter().enumerate() {
            let report = pipeline.train_step(b).unwrap();
            assert_eq!(report.optimizer_step, j + 1 == batches.len());
            assert!(report.loss.is_finite());
            // ZeRO-2/3 reduce every batch's gradients to their owners (`RG`): each replica
            // keeps only its shard between the batches of an accumulation.
            let reduces = report.optimizer_step || mode.zero() >= 2;
            assert_eq!(
                report.all_reduce.is_zero(),
                replicas == 1 || !reduces,
                "the gradients are summed exactly on optimizer steps with replicas (every \
                 batch at ZeRO-2/3)"
            );
        }
    }
    (0..replicas)
        .map(|r| pipeline.replica_parameters(r))
        .collect()
}

#[test]
fn replicas_times_stages_match_single_device() {
    let init = model();
    let mut worst: f64 = 0.0;
    let modes = [
        Mode::Plain,
        Mode::Accumulate(2),
        Mode::Zero(1),
        Mode::Zero(2),
        Mode::Zero(3),
        Mode::AccumulateZero(2, 3),
    ];
    for mode in modes {
        let expected = reference(&init, mode);
        for replicas in [1, 2, 3] {
            for stages in [1, 2, 3] {
                let mut per_schedule = Vec::new();
                for schedule in ScheduleKind::ALL {
                    let mut params = data_parallel(&init, replicas, stages, schedule, mode);
                    for (r, p) in params.iter().enumerate() {
                        assert_eq!(
                            p, &params[0],
                            "replica {r} differs from replica 0 ({replicas}×{stages}, {schedule}, {mode:?})"
                        );
                    }
                    let d = difference(&params[0], &expected);
                    assert!(
                        d.max_relative <= 1e-5,
                        "{replicas} replicas × {stages} stages, {schedule}, {mode:?}: max relative \
                         difference {:e}",
                        d.max_relative
                    );
                    worst = worst.max(d.max_relative);
                    per_schedule.push(params.swap_remove(0));
                }
                assert_eq!(
                    per_schedule[0], per_schedule[1],
                    "GPipe and 1F1B differ at {replicas}×{stages} {mode:?}"
                );
            }
        }
    }
    eprintln!("worst relative difference over the sweep: {worst:e}");
}

#[test]
fn runs_repeat_bit_for_bit_and_zero_equals_plain() {
    let init = model();
    for (replicas, stages) in [(2, 2), (3, 1), (3, 3)] {
        for schedule in ScheduleKind::ALL {
            let plain = data_parallel(&init, replicas, stages, schedule, Mode::Plain);
            let again = data_parallel(&init, replicas, stages, schedule, Mode::Plain);
            assert_eq!(
                plain, again,
                "two runs of {replicas}×{stages} {schedule} differ"
            );
            for level in 1..=3 {
                let zero = data_parallel(&init, replicas, stages, schedule, Mode::Zero(level));
                assert_eq!(
                    plain, zero,
                    "ZeRO-{level} differs from plain at {replicas}×{stages} {schedule}"
                );
            }
        }
    }
}

#[test]
fn zero_one_shards_optimizer_state() {
    let build = |zero| {
        let mut p = Pipeline::builder()
            .layers(common::seeded(1, |d| MlpConfig::new(16, 3, 4).init(d)))
            .balance([2, 2])
            .replicas(2)
            .micro_batches(2)
            .optimizer(OptimizerConfig::adam())
            .zero(zero)
            .threads_per_worker(1)
            .build()
            .unwrap();
        p.train_step(&synthetic::classification(1, 0, 8, 16, 4, &Device::flex()))
            .unwrap();
        p.optimizer_state_bytes()
    };
    let (full, sharded) = (build(0), build(1));
    for stage in 0..2 {
        let of = |v: &[(pipetrain::WorkerId, usize)]| -> Vec<usize> {
            v.iter()
                .filter(|(w, _)| w.stage.index() == stage)
                .map(|(_, b)| *b)
                .collect()
        };
        let (f, s) = (of(&full), of(&sharded));
        // Serialized sizes: headers may differ by a few bytes between equal states.
        assert!(
            f[0].abs_diff(f[1]) * 10 < f[0],
            "without ZeRO both replicas hold the full state: {f:?}"
        );
        for held in &s {
            assert!(
                *held < f[0] * 3 / 4,
                "stage {stage}: a ZeRO-1 worker holds {held} bytes of {}",
                f[0]
            );
        }
    }
}

#[test]
fn batch_with_fewer_rows_than_replicas_times_micro_batches_is_refused() {
    let mut pipeline = Pipeline::builder()
        .layers(model())
        .stages(2)
        .replicas(3)
        .micro_batches(2)
        .build_with(&batch(0))
        .unwrap();
    let bad = synthetic::classification(0, 0, 5, WIDTH, CLASSES, &Device::flex());
    let message = pipeline.train_step(&bad).unwrap_err().to_string();
    assert!(
        message.contains("5 rows")
            && message.contains("3 replicas")
            && message.contains("at least 6 rows"),
        "{message}"
    );
}

#[test]
fn bad_data_parallel_settings_are_refused() {
    let err = |b: pipetrain::PipelineBuilder<MlpLayer>| match b.layers(model()).build() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted"),
    };
    assert!(err(Pipeline::builder().replicas(0)).contains("replicas = 0"));
    assert!(err(Pipeline::builder().accumulation(0)).contains("accumulation = 0"));
    assert!(err(Pipeline::builder().zero(4)).contains("ZeRO stage 4"));
    assert!(err(Pipeline::builder().bucket_bytes(2)).contains("2 bytes"));
}

/// A Linear layer that panics when its input holds the sentinel value.
#[derive(Module, Debug)]
struct Sentinel {
    linear: Linear,
}

const POISON: f32 = 12345.0;

impl Layer for Sentinel {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        let x: Tensor<2> = input.float()?;
        let hit = x.clone().equal_elem(POISON).any().into_scalar::<bool>();
        if hit {
            panic!("sentinel value in the input");
        }
        Ok(self.linear.forward(x).into())
    }
}

/// Replica 1's stage-0 worker fails on its last micro-batch while replica 0's stage-0 worker
/// finishes and waits for it in the all-reduce: the step ends with the failing worker's error,
/// the waiting worker is woken, and nobody hangs.
#[test]
fn failure_in_replica_one_names_it_and_wakes_the_collective() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let device = Device::flex();
        let layers: Vec<Sentinel> = common::seeded(2, |device| {
            [(4, 4), (4, 4), (4, 2)]
                .iter()
                .map(|&(a, b)| Sentinel {
                    linear: LinearConfig::new(a, b).init(device),
                })
                .collect()
        });
        let mut pipeline = Pipeline::builder()
            .layers(layers)
            .balance([1, 2])
            .replicas(2)
            .micro_batches(2)
            .remat(Remat::Never)
            .threads_per_worker(1)
            .build()
            .unwrap();
        // 8 rows: replica 1 gets rows 4..8, its micro-batch 1 rows 6..8; poison row 7.
        let mut x = vec![0.5f32; 8 * 4];
        x[7 * 4] = POISON;
        let inputs = Tensor::<2>::from_data(TensorData::new(x, [8, 4]), &device);
        let targets = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64; 8], [8]), &device);
        let batch = Batch {
            inputs: inputs.into(),
            targets: targets.into(),
        };
        let _ = tx.send(pipeline.train_step(&batch).map(|_| ()));
    });
    let outcome = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the step hung");
    let err = outcome.expect_err("the poisoned micro-batch must fail the step");
    let Error::Engine(EngineError::StageFailed {
        replica,
        stage,
        micro_batch,
        action,
        source,
    }) = &err
    else {
        panic!("unexpected error: {err}");
    };
    assert_eq!(replica.index(), 1, "{err}");
    assert_eq!(stage.index(), 0, "{err}");
    assert_eq!(micro_batch.map(|m| m.index()), Some(1), "{err}");
    assert_eq!(action.kind, ActionKind::Forward, "{err}");
    assert!(matches!(**source, EngineError::Panic { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("replica 1") && message.contains("stage 0"),
        "{message}"
    );
}

/// Batch norm under data parallelism: every replica normalizes with its own micro-batches'
/// statistics (as DDP does), and replica 0's running statistics are broadcast after each step
/// (DDP's `broadcast_buffers`), so the replicas stay identical — parameters and buffers — and
/// the trained parameters equal single-device training over the same micro-batches.
#[test]
fn batch_norm_replicas_stay_identical_and_train_like_one_device() {
    use pipetrain_models::ResNetConfig;
    let device = Device::flex();
    let init = common::seeded(4, |d| ResNetConfig::new(4, 2, 3).with_image(3, 8).init(d));
    let batches: Vec<Batch> = (0..3)
        .map(|i| synthetic::images(6, i, 8, 3, 8, 3, &device))
        .collect();
    let mut pipeline = Pipeline::builder()
        .layers(init.clone())
        .balance([2, 2])
        .replicas(2)
        .micro_batches(2)
        .remat(Remat::Never)
        .learning_rate(0.05)
        .threads_per_worker(1)
        .build()
        .unwrap();
    let mut single = SingleDevice::new(init, &device, &OptimizerConfig::sgd());
    for b in &batches {
        pipeline.train_step(b).unwrap();
        single
            .step_chunked(b.inputs.clone(), b.targets.clone(), 4, &CrossEntropy, 0.05)
            .unwrap();
    }
    let (a, b) = (
        pipeline.replica_parameters(0),
        pipeline.replica_parameters(1),
    );
    assert_eq!(a, b, "replicas hold the same parameters and buffers");
    assert!(
        a.len() > pipeline.trainable_parameters().len(),
        "the model has buffers"
    );
    let d = difference(
        &pipeline.trainable_parameters(),
        &single.trainable_parameters(),
    );
    assert!(d.max_relative <= 1e-5, "{d:?}");
}

/// The builder refuses re-materialization with batch norm (issue 12), as the CLI does: its
/// first forward would normalize with running statistics, not the micro-batch's.
#[test]
fn batch_norm_with_remat_is_refused_by_the_builder() {
    use pipetrain_models::ResNetConfig;
    let init = common::seeded(4, |d| ResNetConfig::new(4, 2, 3).with_image(3, 8).init(d));
    for remat in [Remat::ExceptLast, Remat::Always] {
        let e = Pipeline::builder()
            .layers(init.clone())
            .stages(2)
            .remat(remat)
            .build()
            .err()
            .expect("refused");
        let e = e.to_string();
        assert!(
            e.contains("batch norm (layer 0)") && e.contains("Remat::Never"),
            "{e}"
        );
    }
}
