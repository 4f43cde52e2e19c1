//! A failing stage during `Learner::fit`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::SgdConfig;
use burn::prelude::*;
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep, TrainingError};
use pipetrain::learner::{PipelineModel, PipelineStrategy};
use pipetrain::{Activation, Batch, EngineError, Layer};

use crate::example::{self, ClassBatch, Mlp, MlpLayer};
use crate::{common, fit, launch, values};

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
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        let x: Tensor<2> = input.float()?;
        if let Some((trip, calls)) = &self.trip {
            if x.is_autodiff() && calls.fetch_add(1, Ordering::SeqCst) + 1 == *trip {
                return Err(EngineError::LayerRejected(format!(
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
    ) -> Result<ClassificationOutput, EngineError> {
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

#[test]
fn settings_the_pipeline_refuses_end_fit_before_training_with_the_remedy() {
    let model = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    let dir = common::scratch("learner-config");
    let refused = |strategy: PipelineStrategy<Mlp>, accumulate: Option<usize>| {
        let mut training =
            example::training(dir.path(), false).with_training_strategy(strategy.into());
        if let Some(k) = accumulate {
            training = training.grads_accumulation(k);
        }
        let (result, _) = launch(training, example::learner(model.clone()));
        let error = result.error.expect("refused").to_string();
        let (initial, last) = (example::weights(&model), example::weights(&result.model));
        assert_eq!(initial, last, "nothing trained: {error}");
        error
    };
    let sgd = || PipelineStrategy::new(SgdConfig::new());
    let error = refused(sgd().stages(5), None);
    assert!(
        error.contains("5 stages but only 3 layers") && error.contains(".stages(3)"),
        "{error}"
    );
    let error = refused(sgd().stages(2), Some(2));
    assert!(
        error.contains("grads_accumulation(2)") && error.contains("2× larger batch"),
        "{error}"
    );
    // 32 rows cannot fill 3 replicas × 16 micro-batches: the first step says so.
    let error = refused(sgd().replicas(3).micro_batches(16), None);
    assert!(
        error.contains("a batch of 32 rows does not split into 3 replicas × 16 micro-batches"),
        "{error}"
    );
}
