//! The gradient guard (issue 17, items 5 and 6): global-norm clipping across stages and
//! replicas, and non-finite gradients stopped or skipped before any optimizer step.
//!
//! Clipping is checked against its closed form with plain SGD (lr 1), where a step's update is
//! the gradient itself: an unclipped step gives `g = w₀ − w₁` and its norm; the clipped step
//! must then give `w₀ − c·g` with `c = max / (‖g‖ + 1e-6)`, torch's `clip_grad_norm_`.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::EngineError;
use pipetrain::{Batch, Error, OptimizerConfig, Pipeline, PipelineBuilder, Remat};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

const WIDTH: usize = 8;
const CLASSES: usize = 3;

fn model() -> Vec<MlpLayer> {
    common::seeded(11, |device| MlpConfig::new(WIDTH, 3, CLASSES).init(device)) // 4 layers
}

fn batch() -> Batch {
    synthetic::classification(11, 0, 16, WIDTH, CLASSES, &Device::flex())
}

/// `init` on 2 replicas × 2 stages of 2 micro-batches.
fn two_by_two(init: &[MlpLayer]) -> PipelineBuilder<MlpLayer> {
    Pipeline::builder()
        .layers(init.to_vec())
        .balance([2, 2])
        .replicas(2)
        .micro_batches(2)
}

/// One SGD step (lr 1) on 2 replicas × 2 stages; `clip` is the largest global norm.
fn one_step(init: &[MlpLayer], clip: Option<f64>, batch: &Batch) -> (Vec<Vec<f32>>, f64) {
    let mut builder = two_by_two(init)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(1.0)
        .threads_per_worker(1);
    if let Some(max) = clip {
        builder = builder.clip_grad_norm(max);
    }
    let mut pipeline = builder.build().unwrap();
    let report = pipeline.train_step(batch).unwrap();
    assert!(!report.skipped);
    (pipeline.parameters(), report.grad_norm.unwrap())
}

#[test]
fn clipping_scales_the_global_gradient_as_clip_grad_norm_does() {
    let init = model();
    let before = pipetrain::engine::parameters(&init);
    let (unclipped, norm) = one_step(&init, None, &batch());
    let grads: Vec<Vec<f64>> = before
        .iter()
        .zip(&unclipped)
        .map(|(w0, w1)| w0.iter().zip(w1).map(|(a, b)| f64::from(a - b)).collect())
        .collect();
    let expected_norm = grads.iter().flatten().map(|g| g * g).sum::<f64>().sqrt();
    assert!(
        (norm - expected_norm).abs() <= 1e-4 * expected_norm,
        "{norm} vs {expected_norm}"
    );
    // A bound above the norm changes nothing; a third of it scales every gradient alike.
    let (loose, _) = one_step(&init, Some(2.0 * norm), &batch());
    assert_eq!(loose, unclipped);
    let max = norm / 3.0;
    let (clipped, reported) = one_step(&init, Some(max), &batch());
    assert_eq!(reported, norm, "the norm before clipping is reported");
    let c = max / (norm + 1e-6);
    for ((w0, g), w) in before.iter().zip(&grads).zip(&clipped) {
        for ((a, g), b) in w0.iter().zip(g).zip(w) {
            let expected = f64::from(*a) - c * g;
            assert!(
                (expected - f64::from(*b)).abs() <= 1e-6,
                "{expected} vs {b}"
            );
        }
    }
}

/// A batch whose first input is NaN: every gradient of the step is NaN.
fn poisoned() -> Batch {
    let batch = batch();
    let mut x = batch.inputs.to_f64_vec();
    x[0] = f64::NAN;
    let x: Vec<f32> = x.into_iter().map(|v| v as f32).collect();
    let inputs = Tensor::<2>::from_data(TensorData::new(x, [16, WIDTH]), &Device::flex());
    Batch {
        inputs: inputs.into(),
        targets: batch.targets,
    }
}

#[test]
fn a_non_finite_gradient_fails_the_step_on_the_first_stage_before_any_update() {
    let init = model();
    let mut pipeline = two_by_two(&init).build().unwrap();
    let err = pipeline.train_step(&poisoned()).unwrap_err();
    match &err {
        Error::Engine(EngineError::StageFailed { stage, source, .. }) => {
            let EngineError::NonFinite { parameter } = &**source else {
                panic!("a non-finite error expected, got {err}")
            };
            assert_eq!(stage.index(), 0, "{err}");
            assert_eq!(parameter, "0.linear.weight", "{err}");
        }
        other => panic!("a non-finite error expected, got {other}"),
    }
    assert_eq!(
        pipeline.parameters(),
        pipetrain::engine::parameters(&init),
        "no stage applied the step"
    );
}

#[test]
fn skip_nonfinite_leaves_every_stage_unchanged_and_goes_on() {
    let init = model();
    let mut pipeline = two_by_two(&init)
        .optimizer(OptimizerConfig::adam())
        .skip_nonfinite()
        .build()
        .unwrap();
    let report = pipeline.train_step(&poisoned()).unwrap();
    assert!(report.skipped && !report.loss.is_finite());
    let untouched = pipetrain::engine::parameters(&init);
    assert_eq!(pipeline.parameters(), untouched);
    let report = pipeline.train_step(&batch()).unwrap();
    assert!(!report.skipped && report.loss.is_finite());
    assert_ne!(pipeline.parameters(), untouched);
}

#[test]
fn a_bad_clip_norm_is_refused() {
    for max in [0.0, -1.0, f64::NAN] {
        let err = Pipeline::builder()
            .layers(model())
            .clip_grad_norm(max)
            .build()
            .err()
            .expect("refused");
        assert!(err.to_string().contains("clip_grad_norm"), "{err}");
    }
}
