//! You already use burn-train's `Learner`? One line makes it pipeline- and data-parallel.
//!
//! Below is burn's classic set-up: an MLP classifier with `TrainStep` / `InferenceStep`, a
//! `Batcher`, burn `DataLoader`s, `SupervisedTraining` with accuracy and loss metrics, and a
//! `Learner` with SGD. The model is written as a sequence of layers (`Mlp { layers }`), which is
//! what a pipeline cuts into stages; `impl PipelineModel for Mlp` tells the strategy how.
//!
//! The one-line switch is in [`training`]: `.with_training_strategy(PipelineStrategy::new(..)
//! .stages(2).replicas(2).micro_batches(4).into())`. Everything else — metrics, renderer,
//! validation, the checkpointer, the learning-rate scheduler — is burn's, unchanged.
//!
//! The example trains the MLP for a few epochs on small generated data (3 classes of Gaussian
//! blobs) twice from the same initial weights: with burn's default single-device strategy and
//! with the pipeline (2 stages × 2 replicas × 4 micro-batches). The learned weights agree to
//! float rounding (norm-wise relative difference ≤ 1e-5); tests/learner/ checks it.
//!
//! ```text
//! cargo run --example learner
//! ```

// tests/learner/main.rs includes this file as a module and uses only part of it.
#![allow(dead_code)]

use std::path::Path;

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::SgdConfig;
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{
    ClassificationOutput, InferenceStep, Learner, LearningResult, SupervisedTraining, TrainOutput,
    TrainStep,
};
use pipetrain::learner::{PipelineModel, PipelineStrategy};
use pipetrain::{Activation, Batch, EngineError};

/// Features per example.
pub const FEATURES: usize = 8;
/// Hidden width.
pub const HIDDEN: usize = 16;
/// Classes.
pub const CLASSES: usize = 3;
/// Rows per mini-batch: 2 replicas × 4 micro-batches of 4 rows.
pub const BATCH: usize = 32;
/// Training examples (8 mini-batches per epoch) and validation examples.
pub const TRAIN: usize = 256;
/// Validation examples.
pub const VALID: usize = 64;
/// Epochs.
pub const EPOCHS: usize = 3;
/// SGD learning rate.
pub const LEARNING_RATE: f64 = 0.5;
/// Seed of the model init and the data.
pub const SEED: u64 = 11;

// ---- burn's classic model: an MLP classifier (written as a layer sequence) ----

/// One layer of the MLP: a hidden `Linear + ReLU`, or the output head.
#[derive(Module, Debug)]
pub enum MlpLayer {
    /// `relu(x·W + b)`.
    Hidden(Linear),
    /// Class logits.
    Head(Linear),
}

impl MlpLayer {
    /// `relu(x·W + b)` or the logits.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        match self {
            MlpLayer::Hidden(linear) => relu(linear.forward(x)),
            MlpLayer::Head(linear) => linear.forward(x),
        }
    }
}

/// The classifier.
#[derive(Module, Debug)]
pub struct Mlp {
    layers: Vec<MlpLayer>,
}

impl Mlp {
    /// Two hidden layers and a head.
    pub fn new(device: &Device) -> Self {
        let layers = vec![
            MlpLayer::Hidden(LinearConfig::new(FEATURES, HIDDEN).init(device)),
            MlpLayer::Hidden(LinearConfig::new(HIDDEN, HIDDEN).init(device)),
            MlpLayer::Head(LinearConfig::new(HIDDEN, CLASSES).init(device)),
        ];
        Self { layers }
    }

    /// Logits.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.layers.iter().fold(x, |x, layer| layer.forward(x))
    }

    /// Logits, cross-entropy loss and targets, for burn's metrics.
    pub fn forward_classification(&self, batch: ClassBatch) -> ClassificationOutput {
        let output = self.forward(batch.inputs);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, output, batch.targets)
    }

    /// The layers, in forward order.
    pub fn layers(&self) -> &[MlpLayer] {
        &self.layers
    }
}

impl TrainStep for Mlp {
    type Input = ClassBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: ClassBatch) -> TrainOutput<ClassificationOutput> {
        let item = self.forward_classification(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl InferenceStep for Mlp {
    type Input = ClassBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: ClassBatch) -> ClassificationOutput {
        self.forward_classification(batch)
    }
}

// ---- What the pipeline strategy needs: the layers, and a training item as a batch ----

impl pipetrain::Layer for MlpLayer {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        Ok(MlpLayer::forward(self, input.float()?).into())
    }
}

impl PipelineModel for Mlp {
    type Layer = MlpLayer;

    fn into_layers(self) -> Vec<MlpLayer> {
        self.layers
    }

    fn with_layers(self, layers: Vec<MlpLayer>) -> Self {
        Self { layers }
    }

    fn batch(item: &ClassBatch) -> Batch {
        Batch {
            inputs: item.inputs.clone().into(),
            targets: item.targets.clone().into(),
        }
    }

    fn train_output(
        item: ClassBatch,
        output: Activation,
        loss: Tensor<1>,
    ) -> Result<ClassificationOutput, EngineError> {
        Ok(ClassificationOutput::new(
            loss,
            output.float()?,
            item.targets,
        ))
    }
}

// ---- burn's data side: items, a batcher, data loaders ----

/// One generated example.
#[derive(Clone, Debug)]
pub struct Point {
    /// The features.
    pub features: [f32; FEATURES],
    /// The class.
    pub label: i64,
}

/// A mini-batch.
#[derive(Clone, Debug)]
pub struct ClassBatch {
    /// `[rows, FEATURES]`.
    pub inputs: Tensor<2>,
    /// `[rows]` class labels.
    pub targets: Tensor<1, Int>,
}

/// Stacks points into a [`ClassBatch`].
#[derive(Clone, Debug)]
pub struct PointBatcher;

impl Batcher<Point, ClassBatch> for PointBatcher {
    fn batch(&self, items: Vec<Point>, device: &Device) -> ClassBatch {
        let rows = items.len();
        let features: Vec<f32> = items.iter().flat_map(|p| p.features).collect();
        let labels: Vec<i64> = items.iter().map(|p| p.label).collect();
        ClassBatch {
            inputs: Tensor::from_data(TensorData::new(features, [rows, FEATURES]), device),
            targets: Tensor::from_data(TensorData::new(labels, [rows]), device),
        }
    }
}

/// `count` points: class `i % CLASSES` around its own center, with seeded noise.
pub fn points(seed: u64, count: usize) -> InMemDataset<Point> {
    let mut state = seed;
    let mut uniform = move || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let items = (0..count)
        .map(|i| {
            let label = (i % CLASSES) as i64;
            let features = std::array::from_fn(|f| {
                let center = if f % CLASSES == label as usize {
                    1.0
                } else {
                    0.0
                };
                center + uniform()
            });
            Point { features, label }
        })
        .collect();
    InMemDataset::new(items)
}

// ---- burn-train's set-up ----

/// burn's `SupervisedTraining` with accuracy and loss metrics, logging under `dir`; with
/// `pipelined`, the one line that trains through the pipeline. (Generic so that the tests can
/// train a variant of the MLP; the example trains [`Mlp`].)
pub fn training<M>(dir: &Path, pipelined: bool) -> SupervisedTraining<M>
where
    M: PipelineModel
        + TrainStep<Input = ClassBatch, Output = ClassificationOutput>
        + InferenceStep<Input = ClassBatch, Output = ClassificationOutput>,
{
    let train = DataLoaderBuilder::new(PointBatcher)
        .batch_size(BATCH)
        .build(points(SEED, TRAIN));
    let valid = DataLoaderBuilder::new(PointBatcher)
        .batch_size(BATCH)
        .build(points(SEED + 1, VALID));
    let training = SupervisedTraining::new(dir, train, valid)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .num_epochs(EPOCHS)
        .with_application_logger(None);
    if !pipelined {
        return training;
    }
    // The switch: 2 pipeline stages × 2 data-parallel replicas, 4 micro-batches per replica.
    training.with_training_strategy(
        PipelineStrategy::new(SgdConfig::new())
            .stages(2)
            .replicas(2)
            .micro_batches(4)
            .into(),
    )
}

/// burn's `Learner`: the model, SGD, a constant learning rate.
pub fn learner<M: PipelineModel>(model: M) -> Learner<M> {
    Learner::new(model, SgdConfig::new().init(), LEARNING_RATE)
}

/// Every weight of `model`, flattened, in layer order.
pub fn weights(model: &Mlp) -> Vec<Vec<f32>> {
    pipetrain::engine::parameters(model)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex();
    device.seed(SEED);
    // burn-train trains a model made on an autodiff device.
    let model = Mlp::new(&device.autodiff());
    let dir = std::env::temp_dir().join(format!("pipetrain-learner-{}", std::process::id()));

    let mut trained: Vec<LearningResult<Mlp>> = Vec::new();
    for pipelined in [false, true] {
        println!(
            "== {} ==",
            if pipelined {
                "PipelineStrategy: 2 stages x 2 replicas x 4 micro-batches"
            } else {
                "burn's single-device strategy"
            }
        );
        let run_dir = dir.join(if pipelined { "pipelined" } else { "single" });
        let result = training(&run_dir, pipelined)
            .summary()
            .launch(learner(model.clone()));
        if let Some(error) = &result.error {
            return Err(format!("training failed: {error}").into());
        }
        trained.push(result);
    }
    let difference =
        pipetrain::engine::difference(&weights(&trained[1].model), &weights(&trained[0].model));
    println!(
        "pipelined vs single-device weights after {EPOCHS} epochs: max_rel_diff={:.3e}",
        difference.max_relative
    );
    std::fs::remove_dir_all(&dir).ok();
    if difference.max_relative > 1e-5 {
        return Err("the pipelined weights differ from single-device training".into());
    }
    Ok(())
}
