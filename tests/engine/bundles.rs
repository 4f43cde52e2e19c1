//! Several tensors across one stage boundary: a [`Bundle`] of float and int parts, some
//! differentiable and some not. Only the differentiable ones get gradients back; an int tensor
//! and a float tensor without gradient cross several stages without a hang, and the weights
//! equal single-device training.
//!
//! The model (5 layers; every cut puts bundles on the boundaries):
//!
//! ```text
//!   x [N, W] ─ Bucket:  ids = argmax(lin(x)) [N, 1] int,  x as a constant    (nothing to differentiate)
//!            ─ Encode:  h = relu(lin(x)); scale = |x| + 1 constant; unused = 2h (differentiable, never used)
//!            ─ Mix × 2: h += lin(h) ⊙ scale; ids, scale, unused passed on
//!            ─ Head:    logits = lin(h) + embedding(ids)
//! ```

use crate::common;

use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::Int;
use burn::tensor::activation::relu;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{
    Activation, Batch, Bundle, CrossEntropy, EngineError, Layer, Pipeline, Remat, ScheduleKind,
};
use pipetrain_models::synthetic;

const WIDTH: usize = 6;
const CLASSES: usize = 3;
const SEED: u64 = 1515;
const LR: f64 = 1e-2;

#[derive(Module, Debug)]
enum Step {
    Bucket(Linear),
    Encode(Linear),
    Mix(Linear),
    Head(Head),
}

/// The last layer: a linear map of `h` plus an embedding of the int `ids`.
#[derive(Module, Debug)]
struct Head {
    linear: Linear,
    ids: Embedding,
}

impl Layer for Step {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        Ok(match self {
            Step::Bucket(linear) => {
                let x: Tensor<2> = input.float()?;
                let ids = linear.forward(x.clone()).argmax(1);
                Bundle::new().with("ids", ids).with_constant("x", x).into()
            }
            Step::Encode(linear) => {
                let mut b = input.bundle()?;
                let x: Tensor<2> = b.take("x")?.float()?;
                let h = relu(linear.forward(x.clone()));
                Bundle::new()
                    .with("h", h.clone())
                    .with("ids", b.take("ids")?)
                    .with_constant("scale", x.abs().add_scalar(1.0))
                    .with("unused", h.mul_scalar(2.0))
                    .into()
            }
            Step::Mix(linear) => {
                let mut b = input.bundle()?;
                let h: Tensor<2> = b.take("h")?.float()?;
                let scale: Tensor<2> = b.get("scale")?.clone().float()?;
                b.with("h", h.clone() + linear.forward(h) * scale).into()
            }
            Step::Head(Head { linear, ids }) => {
                let mut b = input.bundle()?;
                let h: Tensor<2> = b.take("h")?.float()?;
                let tokens: Tensor<2, Int> = b.take("ids")?.int()?;
                let n = tokens.dims()[0];
                let embedded = ids.forward(tokens).reshape([n, CLASSES]);
                (linear.forward(h) + embedded).into()
            }
        })
    }
}

fn model() -> Vec<Step> {
    common::seeded(SEED, |d| {
        let linear = || LinearConfig::new(WIDTH, WIDTH).init(d);
        vec![
            Step::Bucket(linear()),
            Step::Encode(linear()),
            Step::Mix(linear()),
            Step::Mix(linear()),
            Step::Head(Head {
                linear: LinearConfig::new(WIDTH, CLASSES).init(d),
                ids: EmbeddingConfig::new(WIDTH, CLASSES).init(d),
            }),
        ]
    })
}

fn batches() -> Vec<Batch> {
    (0..3)
        .map(|k| synthetic::classification(SEED, k, 10, WIDTH, CLASSES, &Device::flex()))
        .collect()
}

fn single_device(data: &[Batch]) -> Vec<Vec<f32>> {
    let mut single = SingleDevice::new(model(), &Device::flex(), &common::adam_eps_1e5());
    for b in data {
        single
            .step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, LR)
            .unwrap();
    }
    single.parameters()
}

#[test]
fn int_and_gradient_free_float_tensors_cross_stages_and_train_like_one_device() {
    let data = batches();
    let expected = single_device(&data);
    // Every 2-stage split, and 3, 4 and 5 stages with the int and the constant float crossing
    // several boundaries.
    let balances = [
        vec![1, 4],
        vec![2, 3],
        vec![3, 2],
        vec![4, 1],
        vec![1, 1, 3],
        vec![1, 2, 1, 1],
        vec![1; 5],
    ];
    for balance in balances {
        for replicas in [1, 2] {
            let mut by_schedule = Vec::new();
            for schedule in [ScheduleKind::GPipe, ScheduleKind::OneFOneB] {
                for remat in [Remat::Never, Remat::Always] {
                    let mut pipeline = Pipeline::builder()
                        .layers(model())
                        .balance(balance.clone())
                        .replicas(replicas)
                        .micro_batches(2)
                        .schedule(schedule)
                        .remat(remat)
                        .optimizer(common::adam_eps_1e5())
                        .learning_rate(LR)
                        .build()
                        .unwrap();
                    for b in &data {
                        pipeline.train_step(b).unwrap();
                    }
                    let got = pipeline.parameters();
                    let d = difference(&got, &expected);
                    let case = format!("{balance:?} × {replicas}, {schedule:?}, {remat:?}");
                    assert!(d.max_relative <= common::TOLERANCE, "{case}: {d:?}");
                    by_schedule.push((remat, got));
                }
            }
            // GPipe and 1F1B at the same m: bitwise equal.
            assert_eq!(by_schedule[0].1, by_schedule[2].1);
            assert_eq!(by_schedule[1].1, by_schedule[3].1);
        }
    }
}

#[test]
fn a_missing_part_is_an_error_naming_the_parts_there_are() {
    let mut layers = model();
    layers.remove(1); // Mix gets Bucket's bundle: no `h`
    // The split by time is measured on the batch: its first forward finds the missing part.
    let err = Pipeline::builder()
        .layers(layers)
        .stages(2)
        .micro_batches(2)
        .build_with(&batches()[0])
        .err()
        .expect("no part `h`")
        .to_string();
    assert!(
        err.contains("no part `h`") && err.contains("[\"ids\", \"x\"]"),
        "{err}"
    );
}
