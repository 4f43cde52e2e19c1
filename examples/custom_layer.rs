//! Pipelining your own burn layers.
//!
//! The model below is written the ordinary burn way: a `#[derive(Module)]` residual MLP block
//! with an inherent `forward(&self, Tensor<2>) -> Tensor<2>`, and a `#[derive(Module)]` enum
//! `MyLayer` that lists the model's layer kinds. None of that code knows about pipetrain.
//!
//! The only pipetrain-specific code is the few-line `impl pipetrain::Layer for MyLayer`
//! adapter: it takes the tensor out of the [`Activation`], calls the existing forwards
//! unchanged, and wraps the result back up.
//!
//! The example then cuts 6 such layers into 3 stages, trains them for 5 steps with 4
//! micro-batches per step under the 1F1B schedule and an MSE loss on seeded synthetic
//! regression data (one fixed batch), and finally trains an identical copy of the initial
//! layers on a single device (`pipetrain::engine::SingleDevice`) with the same data, optimizer
//! and learning rate.
//! Pipelining changes how the work is scheduled, not what is computed: the two sets of weights
//! agree to float rounding (norm-wise relative difference ≤ 1e-5).
//!
//! ```text
//! cargo run --example custom_layer
//! ```

use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::gelu;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{Activation, EngineError, Mse, OptimizerConfig, Pipeline, ScheduleKind};
use pipetrain_models::synthetic;

/// Hidden width (and input features).
const WIDTH: usize = 16;
/// Regression outputs.
const OUTPUTS: usize = 4;
/// Residual blocks between the embedding and the head (6 layers in all).
const BLOCKS: usize = 4;
/// Rows per step.
const BATCH: usize = 32;
/// Training steps.
const STEPS: u64 = 5;
/// Seed of the model init and the data.
const SEED: u64 = 7;
/// Largest accepted norm-wise relative difference between the two trainings.
const TOLERANCE: f64 = 1e-5;

// ---- The user's model, written the normal burn way. ----

/// Pre-norm residual MLP block: `x + fc2(gelu(fc1(norm(x))))`.
#[derive(Module, Debug)]
struct ResidualBlock {
    norm: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

impl ResidualBlock {
    fn new(width: usize, device: &Device) -> Self {
        Self {
            norm: LayerNormConfig::new(width).init(device),
            fc1: LinearConfig::new(width, 2 * width).init(device),
            fc2: LinearConfig::new(2 * width, width).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let h = self
            .fc2
            .forward(gelu(self.fc1.forward(self.norm.forward(x.clone()))));
        x + h
    }
}

/// Every kind of layer in the model.
// A model holds a handful of layers for its whole life: the enum's size does not matter, and
// boxing the block would only make the model code less plain.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
enum MyLayer {
    /// Input projection.
    Embed(Linear),
    /// A residual block.
    Block(ResidualBlock),
    /// Output projection.
    Head(Linear),
}

// ---- The pipetrain adapter: which tensor goes in, which comes out. ----

impl pipetrain::Layer for MyLayer {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        let x: Tensor<2> = input.float()?;
        Ok(match self {
            MyLayer::Embed(linear) | MyLayer::Head(linear) => linear.forward(x),
            MyLayer::Block(block) => block.forward(x),
        }
        .into())
    }
}

fn model(device: &Device) -> Vec<MyLayer> {
    let mut layers = vec![MyLayer::Embed(LinearConfig::new(WIDTH, WIDTH).init(device))];
    layers.extend((0..BLOCKS).map(|_| MyLayer::Block(ResidualBlock::new(WIDTH, device))));
    layers.push(MyLayer::Head(
        LinearConfig::new(WIDTH, OUTPUTS).init(device),
    ));
    layers
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex();
    device.seed(SEED);
    let layers = model(&device);
    // The single-device reference starts from the very same weights.
    let initial = layers.clone();
    let optimizer = OptimizerConfig::sgd_momentum(0.9);
    let learning_rate = 5e-2;
    // The targets are noise, unrelated to the inputs: fitting one fixed batch is the only way
    // for the loss to fall visibly in 5 steps. `synthetic::regression(SEED, step, ..)` would give
    // a fresh batch per step instead; the equivalence holds either way.
    let batch = synthetic::regression(SEED, 0, BATCH, WIDTH, OUTPUTS, &device);

    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .stages(3) // split by time, measured on `batch`
        .micro_batches(4)
        .schedule(ScheduleKind::OneFOneB)
        .optimizer(optimizer.clone())
        .learning_rate(learning_rate)
        .loss(Mse)
        .build_with(&batch)?;
    let split = pipeline.partition();
    println!("stage split: {split} (balance {:?})", split.balance());

    for step in 0..STEPS {
        let report = pipeline.train_step(&batch)?;
        println!(
            "step {}/{STEPS}  loss {:.6}  bubble {:.1}%",
            step + 1,
            report.loss,
            100.0 * report.bubble_fraction()
        );
    }

    // The same training on one device, the plain burn way.
    let mut single = SingleDevice::new(initial, &device, &optimizer);
    for _ in 0..STEPS {
        let b = batch.clone();
        single.step(b.inputs, b.targets, &Mse, learning_rate)?;
    }

    let d = difference(&pipeline.parameters(), &single.parameters());
    println!(
        "pipelined vs single-device weights: max_rel_diff={:.3e} (max abs diff {:.3e})",
        d.max_relative, d.max_absolute
    );
    assert!(
        d.max_relative <= TOLERANCE,
        "pipelined weights differ from single-device training: {} > {TOLERANCE}",
        d.max_relative
    );

    // The trained model comes back as the user's own layer sequence.
    let trained: Vec<MyLayer> = pipeline.into_layers();
    println!("trained model: {} layers", trained.len());
    Ok(())
}
