//! The sweep's models, data and the two ways to train them: single-device training
//! ([`reference`], [`precise_reference`]) and a pipeline ([`train`]), on one device.

use burn::prelude::*;
use pipetrain_engine::SingleDevice;
use pipetrain_models::{
    GptConfig, GptLayer, MlpConfig, MlpLayer, ResNetConfig, ResNetLayer, UNetConfig, UNetLayer,
    synthetic,
};

use super::progress::Progress;
use crate::{
    Activation, Batch, CrossEntropy, Layer, OptimizerConfig, Pipeline, PipelineBuilder, Precision,
};

/// Where a fixture trains: the device, and the progress the heartbeat reads its phase from.
#[derive(Clone, Copy)]
pub(super) struct On<'a> {
    /// The device.
    pub device: &'a Device,
    /// The sweep's progress.
    pub progress: &'a Progress<'a>,
}

impl On<'_> {
    /// The running case is now doing `phase` (the heartbeat says it).
    fn phase(&self, phase: String) {
        self.progress.phase(phase);
    }
}

/// The seed of every model and batch of the sweep.
pub(super) const SEED: u64 = 25;

/// The CPU suite's bar against single-device training (norm-wise relative, per tensor).
pub(super) const BAR: f64 = 1e-5;

/// An optimizer under test: name, config, learning rate.
pub(super) type OptimizerCase = (&'static str, fn() -> OptimizerConfig, f64);

/// The optimizers the core cases run under; the quick sweep keeps SGD only.
pub(super) fn optimizers(quick: bool) -> Vec<OptimizerCase> {
    let all: [OptimizerCase; 2] = [
        ("sgd", OptimizerConfig::sgd, 0.1),
        ("adam", OptimizerConfig::adam, 1e-2),
    ];
    all.into_iter().take(if quick { 1 } else { 2 }).collect()
}

/// Seeds burn's CPU generator with [`SEED`], builds the module with `init` and reads every
/// parameter, so that its lazily initialised values are drawn now, in this order.
///
/// burn-flex keeps one generator per process: a caller that runs two sweeps at once in one
/// process must run them one after the other (the GPU suite's tests take a lock).
fn seeded<T: burn::module::Module>(init: impl FnOnce(&Device) -> T) -> T {
    let device = Device::flex();
    device.seed(SEED);
    let module = init(&device);
    crate::engine::materialize(&module);
    module
}

/// An MLP of `hidden` blocks of `width`, `classes` outputs.
pub(super) fn mlp(width: usize, hidden: usize, classes: usize) -> Vec<MlpLayer> {
    seeded(|d| MlpConfig::new(width, hidden, classes).init(d))
}

/// `steps` classification batches of `rows` rows.
pub(super) fn mlp_data(steps: u64, rows: usize, width: usize, classes: usize) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::classification(SEED, k, rows, width, classes, &Device::flex()))
        .collect()
}

/// The sweep's GPT: vocabulary 16, width 4, context 8, 2 heads, 2 blocks.
pub(super) fn gpt_config() -> GptConfig {
    GptConfig::new(16, 4, 8, 2, 2)
}

/// The GPT of [`gpt_config`].
pub(super) fn gpt() -> Vec<GptLayer> {
    seeded(|d| gpt_config().init(d))
}

/// `steps` batches of 8 token sequences.
pub(super) fn tokens(steps: u64) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::tokens(SEED, k, 8, 4, 16, &Device::flex()))
        .collect()
}

/// A small ResNet on 8×8 images of 3 channels.
pub(super) fn resnet() -> Vec<ResNetLayer> {
    seeded(|d| ResNetConfig::new(4, 2, 3).with_image(3, 8).init(d))
}

/// A small U-Net on 4×4 images of 1 channel (skips between stages).
pub(super) fn unet() -> Vec<UNetLayer> {
    seeded(|d| UNetConfig::new(2, 2, 3).with_image(1, 4).init(d))
}

/// `steps` batches of 8 images.
pub(super) fn images(steps: u64, channels: usize, side: usize) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::images(SEED, k, 8, channels, side, 3, &Device::flex()))
        .collect()
}

/// Single-device training of `layers` on `device`, one full-batch step per batch; with
/// `accumulation` k, one step per k batches (on their concatenation).
pub(super) fn reference<L: Layer>(
    layers: &[L],
    data: &[Batch],
    on: On<'_>,
    optimizer: &OptimizerConfig,
    lr: f64,
    accumulation: usize,
    ties: &[crate::Tie],
) -> Result<Vec<Vec<f32>>, String> {
    on.phase("single-device reference: build".into());
    let mut single = SingleDevice::new(layers.to_vec(), on.device, optimizer)
        .with_ties(ties)
        .map_err(|e| e.to_string())?;
    let steps = data.len().div_ceil(accumulation.max(1));
    for (k, group) in data.chunks(accumulation).enumerate() {
        on.phase(format!("single-device reference: step {}/{steps}", k + 1));
        let inputs = Activation::cat(group.iter().map(|b| b.inputs.clone()).collect());
        let targets = Activation::cat(group.iter().map(|b| b.targets.clone()).collect());
        let (inputs, targets) = (
            inputs.map_err(|e| e.to_string())?,
            targets.map_err(|e| e.to_string())?,
        );
        single
            .step(inputs, targets, &CrossEntropy, lr)
            .map_err(|e| e.to_string())?;
    }
    Ok(single.parameters())
}

/// Single-device training in `precision` on `device`, each batch cut into `chunks`
/// micro-batches (bf16's reference: each micro-batch's weight gradients round to bf16 before
/// they are summed; batch norm's: statistics per micro-batch).
pub(super) fn precise_reference<L: Layer>(
    layers: &[L],
    data: &[Batch],
    on: On<'_>,
    (optimizer, lr): (&OptimizerConfig, f64),
    chunks: usize,
    precision: Precision,
    ties: &[crate::Tie],
) -> Result<Vec<Vec<f32>>, String> {
    on.phase(format!("single-device {precision} reference: build"));
    let mut single = SingleDevice::new(layers.to_vec(), on.device, optimizer)
        .with_precision(precision)
        .with_ties(ties)
        .map_err(|e| e.to_string())?;
    for (k, b) in data.iter().enumerate() {
        on.phase(format!(
            "single-device {precision} reference: step {}/{}",
            k + 1,
            data.len()
        ));
        single
            .step_chunked(
                b.inputs.clone(),
                b.targets.clone(),
                chunks,
                &CrossEntropy,
                lr,
            )
            .map_err(|e| e.to_string())?;
    }
    Ok(single.parameters())
}

/// A pipeline of `layers` on `device` (every worker), set up by `setup`, trained on `data`
/// (a split by time is measured on the first batch).
pub(super) fn train<L: Layer>(
    layers: &[L],
    data: &[Batch],
    on: On<'_>,
    setup: impl FnOnce(PipelineBuilder<L>) -> PipelineBuilder<L>,
) -> Result<Pipeline<L>, String> {
    on.phase("pipeline: build".into());
    let builder = Pipeline::builder()
        .layers(layers.to_vec())
        .devices([on.device.clone()])
        .threads_per_worker(1);
    let built = match data.first() {
        Some(first) => setup(builder).build_with(first),
        None => setup(builder).build(),
    };
    let mut pipeline = built.map_err(|e| e.to_string())?;
    for (k, batch) in data.iter().enumerate() {
        on.phase(format!("pipeline: step {}/{}", k + 1, data.len()));
        let report = pipeline.train_step(batch).map_err(|e| e.to_string())?;
        if !report.loss.is_finite() {
            return Err(format!("loss {}", report.loss));
        }
    }
    Ok(pipeline)
}

/// `balance` scaled to a model of `layers` layers: the last stage takes what is left.
pub(super) fn rebalance(balance: &[usize], layers: usize) -> Vec<usize> {
    let mut out: Vec<usize> = balance[..balance.len() - 1].to_vec();
    let used: usize = out.iter().sum();
    out.push(layers.saturating_sub(used).max(1));
    out
}

/// Trains `pipeline` (two replicas) on every batch of `data`, one step each, and says at which
/// step (1 on) replica 1's weights first left replica 0's, with how far; `None` if they never
/// did.
pub(super) fn replicas_split<L: Layer>(
    pipeline: &mut Pipeline<L>,
    data: &[Batch],
    on: On<'_>,
) -> Result<Option<(usize, pipetrain_engine::Difference)>, String> {
    let mut first = None;
    for (k, batch) in data.iter().enumerate() {
        on.phase(format!("pipeline: step {}/{}", k + 1, data.len()));
        pipeline.train_step(batch).map_err(|e| e.to_string())?;
        let (r0, r1) = (
            pipeline.replica_parameters(0),
            pipeline.replica_parameters(1),
        );
        if first.is_none() && r0 != r1 {
            first = Some((k + 1, pipetrain_engine::difference(&r1, &r0)));
        }
    }
    Ok(first)
}

/// The verdict of [`replicas_split`]: bitwise equal at every step, or from which step not.
pub(super) fn split_verdict(split: &Option<(usize, pipetrain_engine::Difference)>) -> String {
    match split {
        None => "bitwise equal at every step".into(),
        Some((step, d)) => format!(
            "differ from step {step}: max_rel {:.3e} (abs {:.3e})",
            d.max_relative, d.max_absolute
        ),
    }
}
