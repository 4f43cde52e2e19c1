//! ResNet: shapes, pipeline equivalence against the micro-batched single-device reference
//! (batch norm), and learning on synthetic images.

mod support;

use burn::prelude::*;
use pipetrain_engine::{
    Activation, CrossEntropy, Layer, OptimizerConfig, Remat, SingleDevice, difference, parameters,
};
use pipetrain_models::{Batch, ResNetConfig, ResNetLayer, synthetic};
use pipetrain_schedules::ScheduleKind;

/// burn-flex keeps one random seed per process: tests running at once must not reseed between
/// another test's seed and its initialisation.
static SEEDED: std::sync::Mutex<()> = std::sync::Mutex::new(());

const SEED: u64 = 2026;
const CLASSES: usize = 3;
const IN_CHANNELS: usize = 2;
const SIDE: usize = 8;
const BATCH: usize = 8;

/// channels 4, 2 blocks (block 1 downsamples: 8×8×4 → 4×4×8), 3 classes.
fn config() -> ResNetConfig {
    ResNetConfig::new(4, 2, CLASSES)
        .with_image(IN_CHANNELS, SIDE)
        .with_downsample_every(1)
}

fn model(device: &Device) -> Vec<ResNetLayer> {
    let _seeded = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
    device.seed(SEED);
    config().init(device)
}

fn batches(steps: u64, batch: usize, device: &Device) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::images(SEED, k, batch, IN_CHANNELS, SIDE, CLASSES, device))
        .collect()
}

#[test]
fn shapes_through_every_layer() {
    let device = Device::flex();
    let layers = model(&device);
    assert_eq!(layers.len(), 4);
    let mut x: Activation = Tensor::<4>::zeros(config().input_dims(5), &device).into();
    let mut shapes = Vec::new();
    for layer in &layers {
        x = layer.forward(x).unwrap();
        shapes.push(x.dims());
    }
    assert_eq!(
        shapes,
        vec![
            vec![5, 4, 8, 8], // stem
            vec![5, 4, 8, 8], // identity block
            vec![5, 8, 4, 4], // downsampling block
            vec![5, CLASSES], // head
        ]
    );
}

#[test]
fn wrong_channel_count_is_an_error_not_a_panic() {
    let device = Device::flex();
    let layers = model(&device);
    let err = layers[0]
        .forward(Tensor::<4>::zeros([2, 5, 8, 8], &device).into())
        .unwrap_err();
    assert!(err.to_string().contains("takes 2 channels, got 5"), "{err}");
    assert!(
        layers[0]
            .forward(Tensor::<2>::zeros([2, 5], &device).into())
            .is_err()
    );
}

/// Two stages (stem + block 0 | block 1 + head), m = 2, both schedules, 3 SGD steps, against
/// `step_chunked` with 2 chunks: every parameter and running statistic within 1e-5, and the
/// two schedules bitwise equal.
#[test]
fn two_stage_pipeline_matches_micro_batched_single_device() {
    let device = Device::flex();
    let init = model(&device);
    let data = batches(3, BATCH, &device);
    let (lr, m) = (0.05, 2);

    let mut single = SingleDevice::new(init.to_vec(), &device, &OptimizerConfig::sgd());
    let expected_losses: Vec<f64> = data
        .iter()
        .map(|b| {
            single
                .step_chunked(b.inputs.clone(), b.targets.clone(), m, &CrossEntropy, lr)
                .unwrap()
        })
        .collect();
    let expected = single.parameters();
    let before = parameters(&init);
    let moved = difference(&before, &expected).max_relative;
    assert!(
        moved > 1e-3,
        "training must move the weights (moved {moved})"
    );
    // Every tensor moved, running statistics included (they are in the compared lists).
    for (i, (a, b)) in before.iter().zip(&expected).enumerate() {
        assert!(a != b, "tensor {i} of {} did not move", before.len());
    }

    let runs: Vec<_> = ScheduleKind::ALL
        .into_iter()
        .map(|schedule| {
            let (got, losses) = support::two_stages(&init, 2, &data, schedule, m, lr, Remat::Never);
            let d = difference(&got, &expected);
            assert!(
                d.max_relative <= 1e-5,
                "{schedule}: max_rel_diff {:.3e} (max abs {:.3e})",
                d.max_relative,
                d.max_absolute
            );
            for (a, b) in losses.iter().zip(&expected_losses) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs(),
                    "{schedule}: loss {a} vs {b}"
                );
            }
            got
        })
        .collect();
    assert!(runs[0] == runs[1], "GPipe and 1F1B must be bitwise equal");
}

/// The batch-norm caveat, shown: a full-batch step is *not* what a 2-micro-batch pipeline
/// computes, while a 1-chunk `step_chunked` is exactly `step`.
#[test]
fn full_batch_step_differs_from_micro_batched_step() {
    let device = Device::flex();
    let init = model(&device);
    let data = batches(1, BATCH, &device);
    let run = |chunks: Option<usize>| {
        let mut single = SingleDevice::new(init.to_vec(), &device, &OptimizerConfig::sgd());
        let (x, y) = (data[0].inputs.clone(), data[0].targets.clone());
        match chunks {
            None => single.step(x, y, &CrossEntropy, 0.05),
            Some(c) => single.step_chunked(x, y, c, &CrossEntropy, 0.05),
        }
        .unwrap();
        single.parameters()
    };
    let full = run(None);
    assert!(difference(&run(Some(1)), &full).max_relative <= 1e-6);
    assert!(difference(&run(Some(2)), &full).max_relative > 1e-4);
}

/// Why batch-norm models need `Remat::Never`: with re-materialization the forward that feeds
/// the loss uses running statistics, and the result leaves the reference.
#[test]
fn remat_is_not_exact_for_batch_norm() {
    let device = Device::flex();
    let init = model(&device);
    let data = batches(2, BATCH, &device);
    let mut single = SingleDevice::new(init.to_vec(), &device, &OptimizerConfig::sgd());
    for b in &data {
        single
            .step_chunked(b.inputs.clone(), b.targets.clone(), 2, &CrossEntropy, 0.05)
            .unwrap();
    }
    let (got, _) = support::two_stages(
        &init,
        2,
        &data,
        ScheduleKind::OneFOneB,
        2,
        0.05,
        Remat::Always,
    );
    let d = difference(&got, &single.parameters()).max_relative;
    assert!(d > 1e-3, "remat unexpectedly exact ({d:.3e})");
}

#[test]
fn loss_decreases_on_synthetic_images() {
    let device = Device::flex();
    let mut single = SingleDevice::new(model(&device), &device, &OptimizerConfig::sgd());
    let losses: Vec<f64> = batches(20, 16, &device)
        .into_iter()
        .map(|b| {
            single
                .step(b.inputs, b.targets, &CrossEntropy, 0.1)
                .unwrap()
        })
        .collect();
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&losses[..5]), mean(&losses[15..]));
    println!("losses: {losses:.3?}");
    assert!(
        last < 0.7 * first,
        "loss {first:.3} → {last:.3}: {losses:.3?}"
    );
}
