//! burn-train's `Learner` through `PipelineStrategy` (examples/learner.rs): the learned weights
//! equal single-device `Learner` training, accuracy and loss reach the renderer, and a failing
//! stage ends `fit` on burn-train's error path.

mod common;
#[path = "../examples/learner.rs"]
mod example;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use burn::train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn::train::metric::{MetricDefinition, MetricId};
use burn::train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::nn::loss::CrossEntropyLossConfig;
use burn::prelude::*;
use burn::train::{
    ClassificationOutput, InferenceStep, LearningResult, TrainOutput, TrainStep, TrainingError,
};
use example::{ClassBatch, Mlp, MlpLayer};
use pipetrain::learner::PipelineModel;
use pipetrain::{Activation, ActivationError, Batch, Layer};

/// Every numeric value a renderer was given, by split ("train", "valid") and metric name.
type Seen = Arc<Mutex<HashMap<(String, String), Vec<f64>>>>;

/// A renderer that records what reaches it.
#[derive(Default)]
struct Recorder {
    names: HashMap<MetricId, String>,
    seen: Seen,
}

impl Recorder {
    fn record(&mut self, split: &str, state: MetricState) {
        if let MetricState::Numeric(entry, Some(value)) = state {
            let name = self
                .names
                .get(&entry.metric_id)
                .cloned()
                .unwrap_or_default();
            let mut seen = self.seen.lock().unwrap();
            let values = seen.entry((split.to_string(), name)).or_default();
            values.push(value.current());
        }
    }
}

impl MetricsRendererTraining for Recorder {
    fn update_train(&mut self, state: MetricState) {
        self.record("train", state);
    }
    fn update_valid(&mut self, state: MetricState) {
        self.record("valid", state);
    }
}

impl MetricsRendererEvaluation for Recorder {
    fn update_test(&mut self, _name: EvaluationName, _state: MetricState) {}
}

impl TrainingProgressLogger for Recorder {
    fn start(&mut self, _: usize, _: usize, _: Option<usize>, _: Option<&str>) {}
    fn update_epoch(&mut self, _: usize) {}
    fn start_split(&mut self, _: &str, _: usize) {}
    fn update_split(&mut self, _: usize) {}
    fn end_split(&mut self) {}
    fn end(&mut self) {}
    fn log_event_training(&mut self, _: String) {}
}

impl EvaluationProgressLogger for Recorder {
    fn start_global_progress(&mut self, _: usize) {}
    fn start_test(&mut self, _: &str, _: usize) {}
    fn update_test_progress(&mut self, _: usize) {}
    fn end_test(&mut self) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, _: String) {}
}

impl MetricsRenderer for Recorder {
    fn manual_close(&mut self) {}
    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names
            .insert(definition.metric_id, definition.name.to_string());
    }
}

/// The example's training (single-device or pipelined) from `model`, rendering to a recorder.
fn fit<M>(model: M, pipelined: bool) -> (LearningResult<M>, Seen)
where
    M: PipelineModel
        + TrainStep<Input = ClassBatch, Output = ClassificationOutput>
        + InferenceStep<Input = ClassBatch, Output = ClassificationOutput>,
{
    let dir = common::scratch("learner");
    let recorder = Recorder::default();
    let seen = Arc::clone(&recorder.seen);
    let result = example::training(dir.path(), pipelined)
        .renderer(Box::new(recorder))
        .launch(example::learner(model));
    (result, seen)
}

fn values(seen: &Seen, split: &str, metric: &str) -> Vec<f64> {
    let seen = seen.lock().unwrap();
    seen.get(&(split.to_string(), metric.to_string()))
        .cloned()
        .unwrap_or_default()
}

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

/// The example's MLP with a tripwire on its last layer: that layer's `trip`-th training
/// forward (autodiff; the metrics' inference forwards do not count) is an error.
#[derive(Module, Debug)]
struct Tripped {
    layers: Vec<Tripwire>,
}

#[derive(Module, Debug)]
struct Tripwire {
    layer: MlpLayer,
    #[module(skip)]
    trip: Option<(usize, Arc<AtomicUsize>)>,
}

impl Layer for Tripwire {
    fn forward(&self, input: Activation) -> Result<Activation, ActivationError> {
        let x: Tensor<2> = input.float()?;
        if let Some((trip, calls)) = &self.trip {
            if x.is_autodiff() && calls.fetch_add(1, Ordering::SeqCst) + 1 == *trip {
                return Err(ActivationError::Other(format!(
                    "tripwire: training forward {trip}"
                )));
            }
        }
        Ok(self.layer.forward(x).into())
    }
}

impl Tripped {
    fn forward_classification(&self, batch: ClassBatch) -> ClassificationOutput {
        let output = self
            .layers
            .iter()
            .fold(batch.inputs, |x, l| l.layer.forward(x));
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, output, batch.targets)
    }
}

impl TrainStep for Tripped {
    type Input = ClassBatch;
    type Output = ClassificationOutput;
    fn step(&self, batch: ClassBatch) -> TrainOutput<ClassificationOutput> {
        let item = self.forward_classification(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl InferenceStep for Tripped {
    type Input = ClassBatch;
    type Output = ClassificationOutput;
    fn step(&self, batch: ClassBatch) -> ClassificationOutput {
        self.forward_classification(batch)
    }
}

impl PipelineModel for Tripped {
    type Layer = Tripwire;
    fn into_layers(self) -> Vec<Tripwire> {
        self.layers
    }
    fn with_layers(self, layers: Vec<Tripwire>) -> Self {
        Self { layers }
    }
    fn batch(item: &ClassBatch) -> Batch {
        Mlp::batch(item)
    }
    fn train_output(
        item: ClassBatch,
        output: Activation,
        loss: Tensor<1>,
    ) -> Result<ClassificationOutput, ActivationError> {
        Mlp::train_output(item, output, loss)
    }
}

#[test]
fn a_failing_stage_ends_fit_through_burn_trains_error_path() {
    let mlp = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    // 2 replicas × 4 micro-batches: each mini-batch is 4 training forwards per replica of the
    // last layer; the 10th of them falls in the 2nd mini-batch (of 8 per epoch).
    let calls = Arc::new(AtomicUsize::new(0));
    let last = mlp.layers().len() - 1;
    let layers = mlp.into_layers().into_iter().enumerate();
    let model = Tripped {
        layers: layers
            .map(|(i, layer)| Tripwire {
                layer,
                trip: (i == last).then(|| (10, Arc::clone(&calls))),
            })
            .collect(),
    };
    let (result, seen) = fit(model, true);
    let error = result
        .error
        .expect("the failed stage is the training's error");
    let TrainingError::Workers(failures) = &*error else {
        panic!("not a worker failure: {error}");
    };
    let message = error.to_string();
    assert_eq!(failures.len(), 1, "{message}");
    assert!(
        message.contains("stage 1 failed at") && message.contains("tripwire: training forward 10"),
        "{message}"
    );
    // The first mini-batch's metrics were rendered; training stopped at the second.
    let losses = values(&seen, "train", "Loss");
    assert!(
        !losses.is_empty() && losses.len() < example::TRAIN / example::BATCH,
        "{losses:?}"
    );
    assert!(
        values(&seen, "valid", "Loss").is_empty(),
        "no validation after the failure"
    );
}
