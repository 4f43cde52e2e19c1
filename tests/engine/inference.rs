//! `Pipeline::forward`: inference streamed through the stages (and replicas) equals running the
//! whole model on one device, in the batch's row order, for any batch size.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::EngineError;
use pipetrain::{Activation, Error, Layer, Pipeline, Remat};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

fn model() -> Vec<MlpLayer> {
    common::seeded(21, |d| MlpConfig::new(8, 3, 4).init(d))
}

/// The whole model, one layer after another, no pipeline.
fn sequential(layers: &[MlpLayer], x: Activation) -> Vec<f32> {
    let mut x = x;
    for layer in layers {
        x = layer.valid().forward(x).unwrap();
    }
    x.to_f64_vec().into_iter().map(|v| v as f32).collect()
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + y.abs()))
}

#[test]
fn pipelined_forward_equals_the_whole_model_for_any_batch() {
    let init = model();
    for (replicas, balance) in [(1, vec![2, 2]), (2, vec![1, 3]), (2, vec![1, 1, 1, 1])] {
        let mut pipeline = Pipeline::builder()
            .layers(init.clone())
            .balance(balance.clone())
            .replicas(replicas)
            .micro_batches(2)
            .remat(Remat::Never)
            .build()
            .unwrap();
        // 8 rows split over replicas × micro-batches; 6 over micro-batches only (with 2
        // replicas); 7 not at all.
        for rows in [8, 6, 7, 1] {
            let batch = synthetic::classification(2, rows as u64, rows, 8, 4, &Device::flex());
            let got = pipeline.forward(batch.inputs.clone()).unwrap();
            assert_eq!(got.dims(), vec![rows, 4]);
            let got: Vec<f32> = got.to_f64_vec().into_iter().map(|v| v as f32).collect();
            let expected = sequential(&init, batch.inputs);
            assert!(
                close(&got, &expected),
                "{replicas} replicas, {balance:?}, {rows} rows: {got:?} vs {expected:?}"
            );
        }
    }
}

#[test]
fn forward_after_training_uses_the_trained_weights() {
    let mut pipeline = Pipeline::builder()
        .layers(model())
        .balance([2, 2])
        .micro_batches(2)
        .learning_rate(0.5)
        .build()
        .unwrap();
    let batch = synthetic::classification(3, 0, 8, 8, 4, &Device::flex());
    let before = pipeline.forward(batch.inputs.clone()).unwrap().to_f64_vec();
    pipeline.train_step(&batch).unwrap();
    let after = pipeline.forward(batch.inputs.clone()).unwrap().to_f64_vec();
    assert_ne!(before, after);
    let trained = pipeline.into_layers();
    let expected = sequential(&trained, batch.inputs);
    let after: Vec<f32> = after.into_iter().map(|v| v as f32).collect();
    assert!(close(&after, &expected));
}

#[test]
fn a_bad_input_names_the_stage_and_micro_batch() {
    let mut pipeline = Pipeline::builder()
        .layers(model())
        .balance([2, 2])
        .micro_batches(2)
        .build()
        .unwrap();
    // Rank-1 input: the first Linear layer wants rank 2.
    let bad: Activation = Tensor::<1>::zeros([8], &Device::flex()).into();
    let err = pipeline.forward(bad).unwrap_err();
    let Error::Engine(EngineError::StageFailed {
        stage,
        micro_batch,
        source,
        ..
    }) = &err
    else {
        panic!("unexpected: {err}");
    };
    assert_eq!(stage.index(), 0, "{err}");
    assert!(micro_batch.is_some(), "{err}");
    assert!(matches!(**source, EngineError::Layer { .. }), "{err}");
    // Inference changes nothing: the pipeline still trains.
    let batch = synthetic::classification(3, 0, 8, 8, 4, &Device::flex());
    pipeline.train_step(&batch).unwrap();
}
