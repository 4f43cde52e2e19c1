//! pipetrain's bf16 training against PyTorch's `torch.autocast("cpu", dtype=torch.bfloat16)`:
//! the fixture `tests/fixtures/torch/torch_bf16.json`, written by
//! `tests/fixtures/torch/generate_bf16.py` (torch 2.15, CPU) and committed, so this test needs
//! no torch. MLP-2x16 (`MlpConfig::new(16, 2, 4)`) from PyTorch's init, 32 fixed rows, 5 SGD
//! steps at lr 0.1: in fp32, under autocast, and under autocast with 4 micro-batches.
//!
//! - fp32: pipetrain's losses equal torch's to fp32 rounding (the fixture is read right).
//! - bf16, the built-in MLP, whose `Linear`s run through the engine's GEMM seam
//!   (`pipetrain_engine::linear`: bf16 operands, fp32 accumulation and bias, one rounding, as
//!   autocast's `addmm`, with a custom backward that rounds `dX` and `dW` once): its losses equal
//!   autocast's to fp32 rounding (1e-5 relative) at the default, on one stage and on 2 stages × 4
//!   micro-batches, which is within the bar, autocast's own distance from fp32. Every
//!   other cast sits where autocast's does for this model (weights and inputs to bf16, the loss
//!   in fp32, each micro-batch's weight gradient rounded to bf16 before the fp32 sum). Before the
//!   seam, burn's `Linear` rounded twice (its product, then the sum with the bias) and sat 2.6×
//!   farther from autocast than autocast from fp32.

use crate::common;

use std::path::PathBuf;

use burn::prelude::*;
use pipetrain::partitioner::Partition;
use pipetrain::{Batch, Layer, OptimizerConfig, Pipeline, Precision};
use pipetrain_models::{MlpConfig, MlpLayer};
use serde_json::Value;

/// fp32 against fp32, and bf16 against autocast: the same arithmetic (and roundings) in another
/// order.
const TOLERANCE: f64 = 1e-5;

fn fixture() -> Value {
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let path = root.join("tests/fixtures/torch/torch_bf16.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (see generate_bf16.py beside it)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A nested list of numbers, flattened, and its shape.
fn flat(v: &Value) -> (Vec<f32>, Vec<usize>) {
    match v.as_array() {
        Some(rows) if rows.first().is_some_and(Value::is_array) => {
            let parts: Vec<_> = rows.iter().map(flat).collect();
            let shape = [vec![parts.len()], parts[0].1.clone()].concat();
            (parts.into_iter().flat_map(|p| p.0).collect(), shape)
        }
        Some(values) => (
            values.iter().map(|x| x.as_f64().unwrap() as f32).collect(),
            vec![values.len()],
        ),
        None => panic!("{v} is not a list"),
    }
}

fn losses(run: &Value) -> Vec<f64> {
    run["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// pipetrain's loss at each step from torch's init, in `precision`, on `stages` stages with
/// `micro_batches` micro-batches (the built-in MLP, as the CLI trains it).
fn train(all: &Value, precision: Precision, stages: usize, micro_batches: usize) -> Vec<f64> {
    let layers = mlp_from_torch(all);
    let batch = batch(all);
    losses_of(all, layers, &batch, precision, stages, micro_batches)
}

fn losses_of<L: Layer>(
    all: &Value,
    layers: Vec<L>,
    batch: &Batch,
    precision: Precision,
    stages: usize,
    micro_batches: usize,
) -> Vec<f64> {
    let count = layers.len();
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .balance(Partition::even(count, stages).unwrap().balance())
        .micro_batches(micro_batches)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(all["train"]["lr"].as_f64().unwrap())
        .precision(precision)
        .build()
        .unwrap();
    let steps = all["train"]["steps"].as_u64().unwrap();
    (0..steps)
        .map(|_| pipeline.train_step(batch).unwrap().loss)
        .collect()
}

/// The MLP from the fixture's init (PyTorch names renamed to pipetrain's).
fn mlp_from_torch(all: &Value) -> Vec<MlpLayer> {
    let tmp = common::scratch("torch-bf16");
    let init = tmp.path().join("init.safetensors");
    // PyTorch's `Sequential` names, and pipetrain's MLP's (`MlpConfig::pytorch_renames`).
    let names = [
        ("0.weight", "0.linear.weight"),
        ("0.bias", "0.linear.bias"),
        ("2.weight", "1.linear.weight"),
        ("2.bias", "1.linear.bias"),
        ("4.weight", "2.weight"),
        ("4.bias", "2.bias"),
    ];
    let tensors: Vec<(&str, Vec<usize>, Vec<f32>)> = names
        .iter()
        .map(|&(torch, ours)| {
            let (values, shape) = flat(&all["init"][torch]);
            (ours, shape, values)
        })
        .collect();
    common::write_safetensors(&init, &tensors);
    let device = Device::flex();
    let config = MlpConfig::new(16, 2, 4);
    let layers = config.init(&device);
    pipetrain::engine::checkpoint::init_from(&init, layers, true).unwrap()
}

/// The fixture's 32 rows.
fn batch(all: &Value) -> Batch {
    let device = Device::flex();
    let (x, shape) = flat(&all["data"]["inputs"]);
    let labels: Vec<i64> = all["data"]["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_i64().unwrap())
        .collect();
    let rows = labels.len();
    Batch {
        inputs: Tensor::<2>::from_data(TensorData::new(x, shape), &device).into(),
        targets: Tensor::<1, Int>::from_data(TensorData::new(labels, [rows]), &device).into(),
    }
}

fn max_distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn bf16_losses_lie_within_pytorch_autocasts_own_distance_from_fp32() {
    let all = fixture();
    let runs = &all["runs"];
    let (torch_fp32, torch_bf16, torch_micro) = (
        losses(&runs["fp32"]),
        losses(&runs["bf16"]),
        losses(&runs["bf16_micro4"]),
    );
    // The fixture is read right: fp32 against fp32.
    let fp32 = train(&all, Precision::Fp32, 1, 1);
    for (t, (ours, theirs)) in fp32.iter().zip(&torch_fp32).enumerate() {
        let rel = (ours - theirs).abs() / theirs.abs();
        assert!(
            rel <= TOLERANCE,
            "fp32 step {}: loss {ours} against torch's {theirs} ({rel:.1e} apart)",
            t + 1
        );
    }
    let mut failures = Vec::new();
    for (name, stages, micro_batches, theirs) in [
        ("whole batch", 1, 1, &torch_bf16),
        ("2 stages x 4 micro-batches", 2, 4, &torch_micro),
    ] {
        // PyTorch's own bf16-vs-fp32 distance for this run.
        let bar = max_distance(theirs, &torch_fp32);
        let ours = train(&all, Precision::Bf16, stages, micro_batches);
        let (to_autocast, to_fp32) = (max_distance(&ours, theirs), max_distance(&ours, &fp32));
        println!(
            "{name}: pipetrain bf16 vs torch autocast {to_autocast:.2e}, vs fp32 {to_fp32:.2e}; \
             torch autocast vs fp32 {bar:.2e}\n  pipetrain bf16 {ours:?}\n  torch autocast {theirs:?}"
        );
        if to_fp32 == 0.0 {
            failures.push(format!(
                "{name}: bf16 losses equal fp32's: nothing was cast"
            ));
        }
        let rel = ours
            .iter()
            .zip(theirs.iter())
            .map(|(a, b)| (a - b).abs() / b.abs())
            .fold(0.0, f64::max);
        if rel > TOLERANCE || to_autocast > bar {
            failures.push(format!(
                "{name}: losses {ours:?} are {rel:.2e} (relative) from torch autocast's \
                 {theirs:?}: not autocast's rounding (bar: {TOLERANCE:e}, and autocast's \
                 distance from fp32 {bar:.2e})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
