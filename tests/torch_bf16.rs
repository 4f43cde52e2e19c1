//! pipetrain's bf16 training against PyTorch's `torch.autocast("cpu", dtype=torch.bfloat16)`:
//! the fixture `tests/fixtures/torch/torch_bf16.json`, written by
//! `tests/fixtures/torch/generate_bf16.py` (torch 2.15, CPU) and committed, so this test needs
//! no torch. MLP-2x16 (`MlpConfig::new(16, 2, 4)`) from PyTorch's init, 32 fixed rows, 5 SGD
//! steps at lr 0.1: in fp32, under autocast, and under autocast with 4 micro-batches.
//!
//! - fp32: pipetrain's losses equal torch's to fp32 rounding (the fixture is read right).
//! - bf16: pipetrain's losses (whole batch; 2 stages × 4 micro-batches) lie within the distance
//!   PyTorch's own bf16 run keeps from its fp32 run (the bar) — and in fact equal
//!   autocast's to fp32 rounding (1e-5 relative, measured 2.4e-7): the casts sit where
//!   autocast's do for this model (weights and inputs to bf16, `Linear`s as one bf16 GEMM with
//!   fp32 accumulation and output, rounded once; the loss in fp32), and the micro-batches'
//!   weight gradients round to bf16 before they are summed in fp32, as autocast's do. With
//!   burn's own `Linear` in bf16 (two roundings: the product, then the bias) the whole-batch
//!   run measured 6.9e-4 from autocast, beyond the bar (6.5e-4).
//! - And bf16 is not fp32: the losses differ from pipetrain's fp32 run.

mod common;

use std::path::PathBuf;

use burn::prelude::*;
use pipetrain::{Batch, OptimizerConfig, Pipeline, Precision};
use pipetrain_models::MlpConfig;
use serde_json::Value;

/// fp32 against fp32, and bf16 against autocast: the same arithmetic (and roundings) in another
/// order.
const FP32_TOLERANCE: f64 = 1e-5;

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
/// `micro_batches` micro-batches.
fn train(all: &Value, precision: Precision, stages: usize, micro_batches: usize) -> Vec<f64> {
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
    let layers = pipetrain::engine::checkpoint::init_from(&init, layers, true).unwrap();
    let (x, shape) = flat(&all["data"]["inputs"]);
    let labels: Vec<i64> = all["data"]["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_i64().unwrap())
        .collect();
    let rows = labels.len();
    let batch = Batch {
        inputs: Tensor::<2>::from_data(TensorData::new(x, shape), &device).into(),
        targets: Tensor::<1, Int>::from_data(TensorData::new(labels, [rows]), &device).into(),
    };
    let layer_count = layers.len();
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .balance(
            pipetrain::partitioner::Partition::even(layer_count, stages)
                .unwrap()
                .balance(),
        )
        .micro_batches(micro_batches)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(all["train"]["lr"].as_f64().unwrap())
        .precision(precision)
        .build()
        .unwrap();
    let steps = all["train"]["steps"].as_u64().unwrap();
    (0..steps)
        .map(|_| pipeline.train_step(&batch).unwrap().loss)
        .collect()
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
            rel <= FP32_TOLERANCE,
            "fp32 step {}: loss {ours} against torch's {theirs} ({rel:.1e} apart)",
            t + 1
        );
    }
    let mut failures = Vec::new();
    for (name, ours, theirs) in [
        (
            "whole batch",
            train(&all, Precision::Bf16, 1, 1),
            &torch_bf16,
        ),
        (
            "2 stages x 4 micro-batches",
            train(&all, Precision::Bf16, 2, 4),
            &torch_micro,
        ),
    ] {
        // PyTorch's own bf16-vs-fp32 distance for this run.
        let bar = max_distance(theirs, &torch_fp32);
        let got = max_distance(&ours, theirs);
        println!(
            "{name}: pipetrain bf16 vs torch autocast {got:.2e}; torch autocast vs fp32 {bar:.2e}; \
             pipetrain bf16 vs its fp32 {:.2e}",
            max_distance(&ours, &fp32)
        );
        println!("  pipetrain bf16 {ours:?}\n  torch autocast {theirs:?}");
        let rel = ours
            .iter()
            .zip(theirs.iter())
            .map(|(a, b)| (a - b).abs() / b.abs())
            .fold(0.0, f64::max);
        if rel > FP32_TOLERANCE {
            failures.push(format!(
                "{name}: pipetrain's bf16 losses {ours:?} are {rel:.2e} (relative) from torch \
                 autocast's {theirs:?}: not autocast's rounding"
            ));
        }
        if got > bar {
            failures.push(format!(
                "{name}: pipetrain's bf16 losses {ours:?} are {got:.2e} from torch autocast's \
                 {theirs:?}, farther than autocast is from fp32 ({bar:.2e})"
            ));
        }
        assert!(
            max_distance(&ours, &fp32) > 0.0,
            "{name}: bf16 losses equal fp32's: nothing was cast"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
