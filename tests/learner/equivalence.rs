//! The pipelined `Learner` against burn's single-device one.

use burn::optim::SgdConfig;
use burn::optim::lr_scheduler::exponential::ExponentialLrSchedulerConfig;
use burn::train::metric::LossMetric;
use burn::train::metric::store::{Aggregate, Direction, Split};
use burn::train::{Learner, MetricEarlyStoppingStrategy, StoppingCondition};

use crate::example::{self, Mlp};
use crate::{common, fit, launch, rel_diff, values};

#[test]
fn the_pipelined_learner_learns_the_single_device_learners_weights_and_renders_its_metrics() {
    let model = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    let (single, single_seen) = fit(model.clone(), false);
    let (pipelined, seen) = fit(model.clone(), true);
    assert!(single.error.is_none() && pipelined.error.is_none());

    let initial = example::weights(&model);
    let reference = example::weights(&single.model);
    let trained = example::weights(&pipelined.model);
    let moved = pipetrain::engine::difference(&reference, &initial).max_relative;
    assert!(moved > 1e-2, "training should move the weights ({moved})");
    let difference = pipetrain::engine::difference(&trained, &reference).max_relative;
    assert!(
        difference <= common::TOLERANCE,
        "pipelined vs single-device Learner: max_rel_diff {difference:e}"
    );

    // 8 mini-batches of training and 2 of validation per epoch reach the renderer, for both
    // metrics, and the run learns the blobs.
    let batches = |split: &str, per_epoch: usize| {
        for metric in ["Accuracy", "Loss"] {
            let values = values(&seen, split, metric);
            assert!(
                values.len() >= per_epoch * example::EPOCHS,
                "{split} {metric}: {values:?}"
            );
        }
    };
    batches("train", example::TRAIN / example::BATCH);
    batches("valid", example::VALID / example::BATCH);
    let accuracy = values(&seen, "valid", "Accuracy");
    assert!(
        *accuracy.last().unwrap() >= 90.0,
        "valid accuracy {accuracy:?}"
    );
    // Validation runs burn's own step on the merged model: the same metrics as single-device.
    for metric in ["Accuracy", "Loss"] {
        let (ours, theirs) = (
            values(&seen, "valid", metric),
            values(&single_seen, "valid", metric),
        );
        assert_eq!(ours.len(), theirs.len(), "valid {metric}");
        for (a, b) in ours.iter().zip(&theirs) {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                "valid {metric}: {ours:?} vs {theirs:?}"
            );
        }
    }
    // Training loss: the pipeline's step loss against burn's forward loss, batch by batch.
    let (ours, theirs) = (
        values(&seen, "train", "Loss"),
        values(&single_seen, "train", "Loss"),
    );
    assert_eq!(ours.len(), theirs.len());
    for (a, b) in ours.iter().zip(&theirs) {
        assert!(
            (a - b).abs() <= 1e-4 * b.abs().max(1.0),
            "train loss: {ours:?} vs {theirs:?}"
        );
    }
}

#[test]
fn the_learners_scheduler_sets_each_pipeline_steps_learning_rate() {
    let model = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    let learner = || {
        // 0.5, then ×0.9 every step.
        let scheduler = ExponentialLrSchedulerConfig::new(0.5, 0.9).init().unwrap();
        Learner::new(model.clone(), SgdConfig::new().init(), scheduler)
    };
    let dir = common::scratch("learner-scheduler");
    let (single, _) = launch(example::training(dir.path(), false), learner());
    let (pipelined, seen) = launch(example::training(dir.path(), true), learner());
    let difference = rel_diff(&pipelined.model, &single.model);
    assert!(
        difference <= common::TOLERANCE,
        "pipelined vs single-device under a decaying learning rate: {difference:?}"
    );
    // A constant rate would have ended elsewhere.
    let (constant, _) = fit(model.clone(), true);
    let moved = rel_diff(&constant.model, &single.model);
    assert!(moved > 1e-3, "{moved:?}");
    assert!(!values(&seen, "train", "Loss").is_empty());
}

#[test]
fn burns_early_stopping_stops_the_pipelined_run_where_it_stops_the_single_device_one() {
    let model = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    // "Highest" on a falling validation loss: no improvement after epoch 1, stop after epoch 2.
    let stop = || {
        MetricEarlyStoppingStrategy::new(
            &LossMetric::new(),
            Aggregate::Mean,
            Direction::Highest,
            Split::Valid,
            StoppingCondition::NoImprovementSince { n_epochs: 1 },
        )
    };
    let dir = common::scratch("learner-early-stopping");
    let run = |pipelined: bool| {
        let training = example::training(dir.path(), pipelined).early_stopping(stop());
        launch(training, example::learner(model.clone()))
    };
    let (single, _) = run(false);
    let (pipelined, seen) = run(true);
    let difference = rel_diff(&pipelined.model, &single.model);
    assert!(difference <= common::TOLERANCE, "{difference:?}");
    // Two epochs of 2 validation batches (plus each epoch's final value), not three.
    let valid = values(&seen, "valid", "Loss");
    assert_eq!(
        valid.len(),
        2 * (example::VALID / example::BATCH + 1),
        "{valid:?}"
    );
    let (all_epochs, _) = fit(model.clone(), true);
    let moved = rel_diff(&all_epochs.model, &pipelined.model);
    assert!(moved > 1e-3, "{moved:?}");
}

/// Mixed precision through the strategy (`with_pipeline(|b| b.precision(Bf16))`): the run
/// trains in bf16 — its weights leave the fp32 run's by bf16's rounding, not fp32's — and
/// still learns the blobs.
#[test]
fn the_strategy_trains_in_bf16_through_with_pipeline() {
    use burn::data::dataloader::DataLoaderBuilder;
    use burn::optim::SgdConfig;
    use burn::train::SupervisedTraining;
    use burn::train::metric::{AccuracyMetric, LossMetric};
    use pipetrain::Precision;
    use pipetrain::learner::PipelineStrategy;

    let model = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    let dir = common::scratch("learner-bf16");
    let training = |precision: Precision| {
        let loader = |seed, rows| {
            DataLoaderBuilder::new(example::PointBatcher)
                .batch_size(example::BATCH)
                .build(example::points(seed, rows))
        };
        SupervisedTraining::new(
            dir.path(),
            loader(example::SEED, example::TRAIN),
            loader(example::SEED + 1, example::VALID),
        )
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .num_epochs(example::EPOCHS)
        .with_application_logger(None)
        .with_training_strategy(
            PipelineStrategy::new(SgdConfig::new())
                .stages(2)
                .replicas(2)
                .micro_batches(4)
                .with_pipeline(move |b| b.precision(precision))
                .into(),
        )
    };
    let (fp32, _) = launch(training(Precision::Fp32), example::learner(model.clone()));
    let (bf16, seen) = launch(training(Precision::Bf16), example::learner(model.clone()));
    assert!(fp32.error.is_none() && bf16.error.is_none());
    let apart = rel_diff(&bf16.model, &fp32.model);
    assert!(
        (1e-4..5e-2).contains(&apart),
        "bf16 against fp32 through the strategy: {apart:e} apart"
    );
    let accuracy = values(&seen, "valid", "Accuracy");
    assert!(*accuracy.last().unwrap() >= 90.0, "{accuracy:?}");
}
