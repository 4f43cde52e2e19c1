//! pipetrain's learning-rate schedules and optimizers against numbers PyTorch made: the
//! fixtures in `tests/fixtures/torch/torch_optim.json`, written by
//! `tests/fixtures/torch/generate.py` with torch (2.15, CPU) and committed, so this test needs
//! no torch. `tests/torch/optim.rs` checks the same rules against their closed forms written out
//! here; this file is the independent witness that the closed forms are torch's.
//!
//! - Schedules: cosine, linear, step and constant decay, with and without warm-up, with and
//!   without a minimum rate, over 5, 10 and 37 steps, against `torch.optim.lr_scheduler`
//!   (`SequentialLR` of a `LinearLR` warm-up and the decay), read from the optimizer's
//!   `param_groups` before each step.
//! - Optimizers: `torch.optim.SGD` (momentum, dampening, Nesterov, weight decay), `Adam` and
//!   `AdamW` for six steps of a `Linear(1 → 4)` from fixed weights, fed x = 1 with an MSE loss
//!   against 0, in float32 as torch ran them, two of them under a warm-up + cosine schedule.

use crate::common;

use std::path::PathBuf;

use burn::prelude::*;
use pipetrain::{
    AdamOptions, Batch, Decay, LrSchedule, Mse, OptimizerConfig, Pipeline, SgdOptions,
};
use pipetrain_models::MlpConfig;
use serde_json::Value;

/// The relative difference allowed between a schedule's rate and torch's. torch steps its
/// schedulers recursively (each rate from the last), pipetrain evaluates the closed form, so
/// the two round apart by a few units in the last place: 2.9e-15 at worst over these cases (a
/// linear decay to 0, 37 steps, at its smallest rate).
const RATE_TOLERANCE: f64 = 1e-14;

/// The relative difference allowed between a parameter and torch's after each step: both run
/// in float32, in a different order of operations.
const PARAMETER_TOLERANCE: f64 = 1e-5;

fn fixtures() -> Value {
    // The run-time value: a test binary reused from another checkout sharing the target
    // directory would carry that checkout's compile-time path.
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let path = root.join("tests/fixtures/torch/torch_optim.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (see generate.py beside it)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

/// pipetrain's schedule for a fixture's `{warmup, decay}`.
fn schedule(case: &Value) -> LrSchedule {
    let d = &case["decay"];
    let decay = match d["kind"].as_str().unwrap() {
        "cosine" => Decay::Cosine {
            steps: u64_of(&d["steps"]),
            min_lr: f64_of(&d["min_lr"]),
        },
        "linear" => Decay::Linear {
            steps: u64_of(&d["steps"]),
            min_lr: f64_of(&d["min_lr"]),
        },
        "step" => Decay::Step {
            every: u64_of(&d["every"]),
            gamma: f64_of(&d["gamma"]),
        },
        "constant" => Decay::Constant,
        other => panic!("unknown decay `{other}`"),
    };
    LrSchedule {
        warmup: u64_of(&case["warmup"]),
        decay,
    }
}

#[test]
fn schedules_match_torch_lr_scheduler() {
    let all = fixtures();
    let cases = all["schedules"].as_array().unwrap();
    assert!(cases.len() >= 100, "{} schedule cases", cases.len());
    let mut worst = 0.0f64;
    for case in cases {
        let (s, lr) = (schedule(case), f64_of(&case["lr"]));
        s.check(lr).unwrap();
        for (t, rate) in case["rates"].as_array().unwrap().iter().enumerate() {
            let (got, torch) = (s.at(lr, t as u64), f64_of(rate));
            let diff = (got - torch).abs() / torch.abs().max(f64::MIN_POSITIVE);
            assert!(
                diff <= RATE_TOLERANCE,
                "{s} at lr {lr}, step {t}: {got:e} against torch's {torch:e} ({diff:.1e} apart)"
            );
            worst = worst.max(diff);
        }
    }
    println!("worst relative difference from torch.optim.lr_scheduler: {worst:.2e}");
}

/// pipetrain's optimizer for a fixture's `{kind, options}` (torch's defaults where absent).
fn optimizer(case: &Value) -> OptimizerConfig {
    let o = &case["options"];
    let f = |name: &str, default: f64| o.get(name).map_or(default, f64_of);
    let betas = |default: (f64, f64)| {
        o.get("betas")
            .map_or(default, |b| (f64_of(&b[0]), f64_of(&b[1])))
    };
    match case["kind"].as_str().unwrap() {
        "sgd" => OptimizerConfig::torch_sgd(SgdOptions {
            momentum: f("momentum", 0.0),
            dampening: f("dampening", 0.0),
            nesterov: o.get("nesterov").is_some_and(|v| v.as_bool().unwrap()),
            weight_decay: f("weight_decay", 0.0),
        }),
        "adam" => {
            let d = AdamOptions::adam();
            OptimizerConfig::torch_adam(AdamOptions {
                betas: betas(d.betas),
                eps: f("eps", d.eps),
                weight_decay: f("weight_decay", d.weight_decay),
            })
        }
        "adamw" => {
            let d = AdamOptions::adamw();
            OptimizerConfig::torch_adamw(AdamOptions {
                betas: betas(d.betas),
                eps: f("eps", d.eps),
                weight_decay: f("weight_decay", d.weight_decay),
            })
        }
        other => panic!("unknown optimizer `{other}`"),
    }
    .unwrap()
}

#[test]
fn optimizers_match_torch_optim() {
    let all = fixtures();
    let k = u64_of(&all["k"]) as usize;
    let cases = all["optimizers"].as_array().unwrap();
    assert!(cases.len() >= 10, "{} optimizer cases", cases.len());
    let floats = |v: &Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| f64_of(x) as f32)
            .collect()
    };
    let tmp = common::scratch("torch-fixtures");
    let init = tmp.path().join("init.safetensors");
    // PyTorch's layout: weight [out = k, in = 1].
    common::write_safetensors(
        &init,
        &[
            ("0.weight", vec![k, 1], floats(&all["init"]["weight"])),
            ("0.bias", vec![k], floats(&all["init"]["bias"])),
        ],
    );
    let device = Device::flex();
    let batch = Batch {
        inputs: Tensor::<2>::ones([1, 1], &device).into(),
        targets: Tensor::<2>::zeros([1, k], &device).into(),
    };
    let mut worst = 0.0f64;
    for case in cases {
        let layers = MlpConfig::new(1, 0, k).init(&device);
        let layers = pipetrain::engine::checkpoint::init_from(&init, layers, true).unwrap();
        let lr = f64_of(&case["lr"]);
        let lr_schedule = match &case["schedule"] {
            Value::Null => LrSchedule::default(),
            s => schedule(s),
        };
        let mut pipeline = Pipeline::builder()
            .layers(layers)
            .loss(Mse)
            .optimizer(optimizer(case))
            .learning_rate(lr)
            .build()
            .unwrap();
        for (t, torch) in case["params"].as_array().unwrap().iter().enumerate() {
            pipeline
                .set_learning_rate(lr_schedule.at(lr, t as u64))
                .unwrap();
            pipeline.train_step(&batch).unwrap();
            // burn's Linear weight is [in = 1, out = k]: the same k values as torch's [k, 1].
            let got = pipeline.parameters();
            let expected = [floats(&torch["weight"]), floats(&torch["bias"])];
            for (name, (ours, theirs)) in ["weight", "bias"].iter().zip(got.iter().zip(&expected)) {
                for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
                    let diff = f64::from((a - b).abs()) / f64::from(b.abs()).max(1e-2);
                    assert!(
                        diff <= PARAMETER_TOLERANCE,
                        "{} {} under {lr_schedule}, step {}: {name}[{i}] {a} against torch's \
                         {b} ({diff:.1e} apart)",
                        case["kind"],
                        case["options"],
                        t + 1
                    );
                    worst = worst.max(diff);
                }
            }
        }
    }
    println!("worst relative difference from torch.optim: {worst:.2e}");
}
