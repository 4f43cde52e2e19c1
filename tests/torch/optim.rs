//! torch.optim's SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW under
//! learning-rate schedules, against their closed forms (issue 17, items 3 and 4).
//!
//! The problem is one Linear(1 → K) fed x = 1 with an MSE loss against 0: the output is
//! `w + b`, and the gradient of both `w_k` and `b_k` is `2(w_k + b_k)/K`. The test runs
//! PyTorch's documented update rules on that in f64 and compares every parameter after each
//! step with the pipeline's.

use crate::common;

use burn::prelude::*;
use pipetrain::{
    AdamOptions, Batch, Decay, LrSchedule, Mse, OptimizerConfig, Pipeline, SgdOptions,
};
use pipetrain_models::MlpConfig;

const K: usize = 4;
const STEPS: u64 = 6;
/// Small enough that no output `w_k + b_k` nears 0 in six steps, where f32 rounding of the
/// tiny gradient would dominate Adam's normalised update.
const LR: f64 = 0.01;

/// PyTorch's rules, written out (torch.optim docs, "Algorithm").
#[derive(Clone, Copy, Debug)]
enum Rule {
    Sgd(SgdOptions),
    Adam(AdamOptions),
    AdamW(AdamOptions),
}

/// One parameter's trajectory under `rule`, with its optimizer state.
#[derive(Clone, Debug, Default)]
struct Torch {
    buf: Option<f64>,
    m: f64,
    v: f64,
}

impl Torch {
    /// Parameter `p` after one step of `rule` at rate `lr` on gradient `g` (step `t` from 1).
    fn step(&mut self, rule: Rule, p: f64, g: f64, lr: f64, t: i32) -> f64 {
        match rule {
            Rule::Sgd(o) => {
                let mut d = g + o.weight_decay * p;
                if o.momentum != 0.0 {
                    let b = match self.buf {
                        None => d,
                        Some(b) => o.momentum * b + (1.0 - o.dampening) * d,
                    };
                    self.buf = Some(b);
                    d = if o.nesterov { d + o.momentum * b } else { b };
                }
                p - lr * d
            }
            Rule::Adam(o) | Rule::AdamW(o) => {
                let (b1, b2) = o.betas;
                let (p, g) = match rule {
                    Rule::AdamW(_) => (p * (1.0 - lr * o.weight_decay), g),
                    _ => (p, g + o.weight_decay * p),
                };
                self.m = b1 * self.m + (1.0 - b1) * g;
                self.v = b2 * self.v + (1.0 - b2) * g * g;
                let m_hat = self.m / (1.0 - b1.powi(t));
                let v_hat = self.v / (1.0 - b2.powi(t));
                p - lr * m_hat / (v_hat.sqrt() + o.eps)
            }
        }
    }
}

fn config(rule: Rule) -> OptimizerConfig {
    match rule {
        Rule::Sgd(o) => OptimizerConfig::torch_sgd(o),
        Rule::Adam(o) => OptimizerConfig::torch_adam(o),
        Rule::AdamW(o) => OptimizerConfig::torch_adamw(o),
    }
    .unwrap()
}

/// Trains the pipeline and the closed form side by side; returns the worst difference.
fn worst_difference(rule: Rule, schedule: LrSchedule, lr: f64) -> f64 {
    let layers = common::seeded(3, |device| MlpConfig::new(1, 0, K).init(device));
    let mut params: Vec<f64> = pipetrain::engine::parameters(&layers)
        .concat()
        .into_iter()
        .map(f64::from)
        .collect(); // w (K values, [in=1, out=K]) then b (K values)
    assert_eq!(params.len(), 2 * K);
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .loss(Mse)
        .optimizer(config(rule))
        .learning_rate(lr)
        .build()
        .unwrap();
    let device = Device::flex();
    let batch = Batch {
        inputs: Tensor::<2>::ones([1, 1], &device).into(),
        targets: Tensor::<2>::zeros([1, K], &device).into(),
    };
    let mut state = vec![Torch::default(); 2 * K];
    let mut worst = 0.0f64;
    for t in 0..STEPS {
        let rate = schedule.at(lr, t);
        pipeline.set_learning_rate(rate).unwrap();
        pipeline.train_step(&batch).unwrap();
        let grads: Vec<f64> = (0..K)
            .map(|k| 2.0 * (params[k] + params[K + k]) / K as f64)
            .collect();
        for (i, p) in params.iter_mut().enumerate() {
            *p = state[i].step(rule, *p, grads[i % K], rate, t as i32 + 1);
        }
        let got: Vec<f64> = pipeline
            .parameters()
            .concat()
            .into_iter()
            .map(f64::from)
            .collect();
        for (a, b) in got.iter().zip(&params) {
            worst = worst.max((a - b).abs() / b.abs().max(1e-2));
        }
    }
    worst
}

fn rules() -> Vec<(&'static str, Rule)> {
    let sgd = SgdOptions::default();
    vec![
        ("sgd", Rule::Sgd(sgd)),
        (
            "sgd weight decay",
            Rule::Sgd(SgdOptions {
                weight_decay: 0.1,
                ..sgd
            }),
        ),
        (
            "sgd momentum dampening",
            Rule::Sgd(SgdOptions {
                momentum: 0.9,
                dampening: 0.3,
                ..sgd
            }),
        ),
        (
            "sgd nesterov",
            Rule::Sgd(SgdOptions {
                momentum: 0.8,
                nesterov: true,
                weight_decay: 0.01,
                ..sgd
            }),
        ),
        ("adam", Rule::Adam(AdamOptions::adam())),
        (
            "adam weight decay betas",
            Rule::Adam(AdamOptions {
                betas: (0.8, 0.99),
                eps: 1e-6,
                weight_decay: 0.1,
            }),
        ),
        ("adamw", Rule::AdamW(AdamOptions::adamw())),
        (
            "adamw decay 0.3",
            Rule::AdamW(AdamOptions {
                weight_decay: 0.3,
                ..AdamOptions::adamw()
            }),
        ),
    ]
}

#[test]
fn each_optimizer_follows_torch_optim_step_by_step() {
    for (name, rule) in rules() {
        let worst = worst_difference(rule, LrSchedule::default(), LR);
        assert!(worst <= 1e-5, "{name}: {worst}");
    }
}

#[test]
fn each_schedule_follows_torch_lr_scheduler_step_by_step() {
    let schedules = [
        LrSchedule {
            warmup: 2,
            decay: Decay::Cosine {
                steps: STEPS,
                min_lr: 1e-3,
            },
        },
        LrSchedule {
            warmup: 0,
            decay: Decay::Linear {
                steps: STEPS,
                min_lr: 0.0,
            },
        },
        LrSchedule {
            warmup: 1,
            decay: Decay::Step {
                every: 2,
                gamma: 0.5,
            },
        },
    ];
    for schedule in schedules {
        for (name, rule) in rules() {
            let worst = worst_difference(rule, schedule, LR);
            assert!(worst <= 1e-5, "{name} under {schedule}: {worst}");
        }
    }
    // The rates themselves (LinearLR warm-up, then CosineAnnealingLR over the rest).
    let s = schedules[0];
    let cosine = |u: f64| 1e-3 + (LR - 1e-3) * (1.0 + (std::f64::consts::PI * u / 4.0).cos()) / 2.0;
    let expected = [
        LR / 2.0,
        LR,
        cosine(0.0),
        cosine(1.0),
        cosine(2.0),
        cosine(3.0),
    ];
    for (t, e) in expected.iter().enumerate() {
        assert!((s.at(LR, t as u64) - e).abs() < 1e-15, "step {t}");
    }
}

#[test]
fn adams_default_epsilon_is_pytorchs() {
    // A gradient of 5e-5: with ε = 1e-8 (PyTorch) Adam's first step moves each parameter by
    // lr·g/(|g| + ε) ≈ lr; burn's own default ε = 1e-5 would move it by 0.83·lr.
    let layers = common::seeded(3, |device| MlpConfig::new(1, 0, K).init(device));
    let before: Vec<f32> = pipetrain::engine::parameters(&layers).concat();
    let outputs: Vec<f32> = (0..K).map(|k| before[k] + before[K + k] - 1e-4).collect();
    let device = Device::flex();
    let batch = Batch {
        inputs: Tensor::<2>::ones([1, 1], &device).into(),
        targets: Tensor::<2>::from_data(TensorData::new(outputs, [1, K]), &device).into(),
    };
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .loss(Mse)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(LR)
        .build()
        .unwrap();
    pipeline.train_step(&batch).unwrap();
    for (a, b) in pipeline.parameters().concat().iter().zip(&before) {
        let moved = f64::from((a - b).abs());
        assert!((moved / LR - 1.0).abs() < 0.01, "moved {moved}, lr {LR}");
    }
}

#[test]
fn torch_refuses_what_we_refuse() {
    let bad_sgd = [
        SgdOptions {
            nesterov: true,
            ..SgdOptions::default()
        },
        SgdOptions {
            momentum: 0.9,
            dampening: 0.1,
            nesterov: true,
            weight_decay: 0.0,
        },
        SgdOptions {
            momentum: -0.1,
            ..SgdOptions::default()
        },
    ];
    for o in bad_sgd {
        assert!(OptimizerConfig::torch_sgd(o).is_err(), "{o:?}");
    }
    let bad_adam = [
        AdamOptions {
            betas: (1.0, 0.999),
            ..AdamOptions::adam()
        },
        AdamOptions {
            eps: f64::NAN,
            ..AdamOptions::adam()
        },
        AdamOptions {
            weight_decay: -1.0,
            ..AdamOptions::adam()
        },
    ];
    for o in bad_adam {
        let e = OptimizerConfig::torch_adam(o).unwrap_err();
        assert!(e.to_string().contains("optimizer "), "{e}");
    }
}
