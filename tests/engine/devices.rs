//! Placement: each worker computes on the device it was given, and the activations it receives
//! are moved there. burn's flex backend has a single device, so burn's (deprecated) ndarray CPU
//! backend stands in for a second one: a tensor on one cannot meet a tensor on the other, so a
//! stage left on the default device, or an activation not moved, fails the step.

use crate::common;

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use pipetrain::StageId;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{Activation, CrossEntropy, EngineError, Layer, OptimizerConfig, Pipeline};
use pipetrain_models::{MlpConfig, synthetic};

const WIDTH: usize = 8;
const CLASSES: usize = 3;
const BATCH: usize = 8;
const SEED: u64 = 41;

/// The second CPU device.
#[allow(deprecated)] // burn-ndarray is deprecated upstream; here it only stands for "another device"
fn other() -> Device {
    Device::ndarray()
}

/// A linear layer (autodiff path) that refuses an input that does not live where its weights do.
#[derive(Module, Debug)]
struct Placed {
    linear: Linear,
}

impl Layer for Placed {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        let x: Tensor<2> = input.float()?;
        let weights = self.linear.weight.val().device();
        if x.device() != weights {
            return Err(EngineError::LayerRejected(format!(
                "input on {:?}, weights on {weights:?}",
                x.device()
            )));
        }
        Ok(burn::tensor::activation::relu(self.linear.forward(x)).into())
    }
}

fn placed(layers: usize) -> Vec<Placed> {
    common::seeded(SEED, |d| {
        (0..layers)
            .map(|i| {
                let out = if i + 1 == layers { CLASSES } else { WIDTH };
                Placed {
                    linear: LinearConfig::new(WIDTH, out).init(d),
                }
            })
            .collect()
    })
}

fn batches(steps: u64) -> Vec<pipetrain::Batch> {
    (0..steps)
        .map(|k| synthetic::classification(SEED, k, BATCH, WIDTH, CLASSES, &Device::flex()))
        .collect()
}

/// Single-device SGD on flex over the same batches.
fn reference<L: Layer + Clone>(init: &[L], data: &[pipetrain::Batch]) -> Vec<Vec<f32>> {
    let mut single = SingleDevice::new(init.to_vec(), &Device::flex(), &OptimizerConfig::sgd());
    for b in data {
        single
            .step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, 0.1)
            .unwrap();
    }
    single.parameters()
}

/// 2 replicas × 2 stages on `devices`, trained with SGD on `data`.
fn trained<L: Layer + Clone>(
    init: &[L],
    devices: impl IntoIterator<Item = Device>,
    data: &[pipetrain::Batch],
) -> Pipeline<L> {
    let mut pipeline = Pipeline::builder()
        .layers(init.to_vec())
        .stages(2)
        .replicas(2)
        .micro_batches(2)
        .devices(devices)
        .learning_rate(0.1)
        .loss(CrossEntropy)
        .threads_per_worker(1)
        .build_with(&data[0])
        .unwrap();
    for b in data {
        pipeline.train_step(b).unwrap();
    }
    pipeline
}

/// Where each stage's layers keep their parameters (replica 0).
fn stage_devices<L: Layer>(pipeline: &Pipeline<L>) -> Vec<Vec<Device>> {
    (0..pipeline.stages())
        .map(|s| {
            pipeline
                .stage_layers(StageId(s as u32))
                .iter()
                .flat_map(|l| l.devices())
                .collect()
        })
        .collect()
}

#[test]
fn each_stage_computes_on_its_own_device_and_activations_follow() {
    let init = placed(4);
    let data = batches(3);
    // One device per stage, for both replicas.
    let pipeline = trained(&init, [Device::flex(), other()], &data);
    let devices = stage_devices(&pipeline);
    assert!(
        devices[0]
            .iter()
            .all(|d| d.clone().inner() == Device::flex()),
        "{devices:?}"
    );
    assert!(
        devices[1].iter().all(|d| d.clone().inner() == other()),
        "{devices:?}"
    );
    let diff = difference(&pipeline.parameters(), &reference(&init, &data)).max_relative;
    assert!(diff <= common::TOLERANCE, "max_rel_diff {diff}");
}

#[test]
fn one_device_per_worker_places_replicas_apart_and_matches_single_device() {
    // The split-backward path (MLP layers run without autodiff) on crossed devices: replica 0
    // runs flex → ndarray, replica 1 ndarray → flex; the all-reduce meets across devices.
    let init = common::seeded(SEED, |d| MlpConfig::new(WIDTH, 3, CLASSES).init(d));
    let data = batches(3);
    let pipeline = trained(
        &init,
        [Device::flex(), other(), other(), Device::flex()],
        &data,
    );
    let diff = difference(&pipeline.parameters(), &reference(&init, &data)).max_relative;
    assert!(diff <= common::TOLERANCE, "max_rel_diff {diff}");
}

#[test]
fn a_device_list_of_the_wrong_length_is_refused_before_any_thread() {
    let err = Pipeline::builder()
        .layers(placed(4))
        .stages(2)
        .devices([Device::flex(), other(), Device::flex()])
        .build()
        .err()
        .expect("three devices for two workers");
    let text = err.to_string();
    assert!(
        text.contains("3 devices") && text.contains("one device per stage"),
        "{text}"
    );
}
