//! Split backward: dense layers trained by hand (input gradient at once, weight gradients
//! deferred and batched over a group of micro-batches) against autodiff, per layer kind, on
//! stages that mix dense and autodiff layers, under every schedule and re-materialization mode.

mod common;

use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::schedules::{ActionKind, StageId};
use pipetrain::{
    Activation, ActivationError, Backward, CrossEntropy, Dense, Layer, OptimizerConfig, Pipeline,
    Remat, ScheduleKind,
};
use pipetrain_models::{MlpConfig, synthetic};

const WIDTH: usize = 8;
const CLASSES: usize = 3;
const BATCH: usize = 12;
const STEPS: u64 = 2;

/// Dense layers on rank-2 and rank-3 inputs, with and without ReLU, between layers autodiff
/// runs (a layer norm, reshapes).
#[derive(Module, Debug)]
enum Mixed {
    /// Linear + ReLU on `[rows, WIDTH]` (dense).
    Block(Linear),
    /// Layer norm (autodiff).
    Norm(LayerNorm),
    /// `[rows, WIDTH]` → `[rows, 2, WIDTH/2]` (autodiff, no parameters; the field is the
    /// halved width).
    Fold(usize),
    /// Linear + ReLU on `[rows, 2, WIDTH/2]` (dense, rank 3).
    TokenBlock(Linear),
    /// Linear on `[rows, 2, WIDTH/2]` (dense, rank 3, no activation).
    TokenLinear(Linear),
    /// `[rows, 2, WIDTH/2]` → `[rows, WIDTH]` (autodiff; the field is the width).
    Unfold(usize),
    /// Linear to the logits (dense).
    Head(Linear),
}

impl Layer for Mixed {
    fn forward(&self, input: Activation) -> Result<Activation, ActivationError> {
        Ok(match self {
            Mixed::Block(l) => relu(l.forward(input.float::<2>()?)).into(),
            Mixed::Norm(n) => n.forward(input.float::<2>()?).into(),
            Mixed::Fold(half) => {
                let x: Tensor<2> = input.float()?;
                let [rows, _] = x.dims();
                x.reshape([rows, 2, *half]).into()
            }
            Mixed::TokenBlock(l) => relu(l.forward(input.float::<3>()?)).into(),
            Mixed::TokenLinear(l) => l.forward(input.float::<3>()?).into(),
            Mixed::Unfold(width) => {
                let x: Tensor<3> = input.float()?;
                let [rows, _, _] = x.dims();
                x.reshape([rows, *width]).into()
            }
            Mixed::Head(l) => l.forward(input.float::<2>()?).into(),
        })
    }

    fn dense(&self) -> Option<Dense<'_>> {
        match self {
            Mixed::Block(l) | Mixed::TokenBlock(l) => Some(Dense::linear(l).relu()),
            Mixed::TokenLinear(l) | Mixed::Head(l) => Some(Dense::linear(l)),
            Mixed::Norm(_) | Mixed::Fold(_) | Mixed::Unfold(_) => None,
        }
    }
}

/// 9 layers; with `trailing_norm` the model ends in an autodiff layer (10 layers).
fn mixed(trailing_norm: bool) -> Vec<Mixed> {
    common::seeded(7, |d| {
        let mut layers = vec![
            Mixed::Block(LinearConfig::new(WIDTH, WIDTH).init(d)),
            Mixed::Norm(LayerNormConfig::new(WIDTH).init(d)),
            Mixed::Block(LinearConfig::new(WIDTH, WIDTH).init(d)),
            Mixed::Fold(WIDTH / 2),
            Mixed::TokenBlock(LinearConfig::new(WIDTH / 2, WIDTH / 2).init(d)),
            Mixed::TokenLinear(LinearConfig::new(WIDTH / 2, WIDTH / 2).init(d)),
            Mixed::Unfold(WIDTH),
            Mixed::Block(LinearConfig::new(WIDTH, WIDTH).init(d)),
            Mixed::Head(LinearConfig::new(WIDTH, CLASSES).with_bias(false).init(d)),
        ];
        if trailing_norm {
            layers.push(Mixed::Norm(LayerNormConfig::new(CLASSES).init(d)));
        }
        layers
    })
}

fn data() -> Vec<pipetrain::Batch> {
    (0..STEPS)
        .map(|k| synthetic::classification(5, k, BATCH, WIDTH, CLASSES, &Device::flex()))
        .collect()
}

struct Run {
    balance: Vec<usize>,
    schedule: ScheduleKind,
    micro_batches: usize,
    remat: Remat,
    backward: Backward,
}

fn train<L: Layer + Clone>(layers: &[L], run: &Run) -> (Vec<Vec<f32>>, Pipeline<L>) {
    let mut pipeline = Pipeline::builder()
        .layers(layers.to_vec())
        .balance(run.balance.clone())
        .schedule(run.schedule)
        .micro_batches(run.micro_batches)
        .remat(run.remat)
        .backward(run.backward)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(1e-2)
        .threads_per_worker(1)
        .build()
        .unwrap();
    for batch in data() {
        pipeline.train_step(&batch).unwrap();
    }
    (pipeline.parameters(), pipeline)
}

fn single_device<L: Layer + Clone>(layers: &[L]) -> Vec<Vec<f32>> {
    let device = Device::flex();
    let mut single = SingleDevice::new(layers.to_vec(), &device, &OptimizerConfig::adam());
    for b in data() {
        single
            .step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, 1e-2)
            .unwrap();
    }
    single.parameters()
}

/// Every layer kind, every place a segment can start or end (stage 0's first layer, a stage
/// boundary inside a dense run, the loss after a dense or an autodiff layer): split backward
/// matches autodiff (fused) and single-device training within 1e-5, and GPipe and 1F1B stay
/// bitwise equal, whatever the weight-gradient group.
#[test]
fn split_matches_autodiff_for_every_layer_kind_and_cut() {
    for trailing_norm in [false, true] {
        let layers = mixed(trailing_norm);
        let n = layers.len();
        let expected = single_device(&layers);
        let moved = difference(&pipetrain::engine::parameters(&layers), &expected).max_relative;
        assert!(moved > 1e-3, "training must move the weights ({moved})");
        for balance in [
            vec![n],
            vec![3, n - 3],
            vec![1, 4, n - 5],
            vec![5, 1, 1, n - 7],
        ] {
            for remat in [Remat::Never, Remat::Always] {
                let fused = train(
                    &layers,
                    &Run {
                        balance: balance.clone(),
                        schedule: ScheduleKind::OneFOneB,
                        micro_batches: 3,
                        remat,
                        backward: Backward::Fused,
                    },
                )
                .0;
                for weight_group in [0, 1, 2] {
                    let by_schedule: Vec<Vec<Vec<f32>>> = ScheduleKind::ALL
                        .into_iter()
                        .map(|schedule| {
                            train(
                                &layers,
                                &Run {
                                    balance: balance.clone(),
                                    schedule,
                                    micro_batches: 3,
                                    remat,
                                    backward: Backward::Split { weight_group },
                                },
                            )
                            .0
                        })
                        .collect();
                    let what = format!(
                        "trailing_norm={trailing_norm} balance={balance:?} remat={remat} \
                         weight_group={weight_group}"
                    );
                    for got in &by_schedule {
                        let d = difference(got, &fused);
                        assert!(d.max_relative <= 1e-5, "{what}: split vs fused {d:?}");
                        let d = difference(got, &expected);
                        assert!(d.max_relative <= 1e-5, "{what}: split vs one device {d:?}");
                    }
                    assert!(
                        by_schedule.windows(2).all(|w| w[0] == w[1]),
                        "{what}: schedules differ"
                    );
                }
            }
        }
    }
}

/// The plan splits `B` into `I` and `W` on the stages holding dense layers, and only there.
#[test]
fn only_stages_with_dense_layers_split() {
    let layers = mixed(false);
    // Stage 1 holds the layer norm only.
    let run = Run {
        balance: vec![1, 1, 7],
        schedule: ScheduleKind::OneFOneB,
        micro_batches: 2,
        remat: Remat::Never,
        backward: Backward::default(),
    };
    let (_, pipeline) = train(&layers, &run);
    let plan = pipeline.plan();
    let count = |s: u32, kind| plan.count(StageId(s), kind);
    for s in [0, 2] {
        assert_eq!(count(s, ActionKind::BackwardInput), 2);
        assert_eq!(count(s, ActionKind::BackwardWeight), 2);
        assert_eq!(count(s, ActionKind::Backward), 0);
    }
    assert_eq!(count(1, ActionKind::Backward), 2);
    assert_eq!(count(1, ActionKind::BackwardInput), 0);

    let (_, fused) = train(
        &layers,
        &Run {
            backward: Backward::Fused,
            ..run
        },
    );
    assert!(fused.plan().actions().all(|a| !matches!(
        a.kind,
        ActionKind::BackwardInput | ActionKind::BackwardWeight
    )));
}

/// Deferred weight gradients hold each dense layer's input and pre-activation gradient until
/// their group's `W`: reported per worker, and smaller groups hold less.
#[test]
fn smaller_weight_groups_hold_less() {
    let layers = common::seeded(3, |d| MlpConfig::new(WIDTH, 2, CLASSES).init(d));
    let peak = |backward| {
        let mut pipeline = Pipeline::builder()
            .layers(layers.clone())
            .balance([3])
            .micro_batches(4)
            .backward(backward)
            .threads_per_worker(1)
            .build()
            .unwrap();
        let batch = synthetic::classification(1, 0, 16, WIDTH, CLASSES, &Device::flex());
        let report = pipeline.train_step(&batch).unwrap();
        report.workers[0].peak_deferred_bytes
    };
    let whole = peak(Backward::Split { weight_group: 0 });
    let pairs = peak(Backward::Split { weight_group: 2 });
    let single = peak(Backward::Split { weight_group: 1 });
    // Per micro-batch of 4 rows: 3 layers × (input + gradient) = 4 · (8+8 + 8+8 + 8+3) · 4 B.
    let per_micro_batch = 4 * (8 + 8 + 8 + 8 + 8 + 3) * 4;
    assert_eq!(single, per_micro_batch);
    assert_eq!(pairs, 2 * per_micro_batch);
    assert_eq!(whole, 4 * per_micro_batch);
    assert_eq!(peak(Backward::Fused), 0);
}

/// Micro-batches of few rows (here 2 rows against 32 input features) take the other GEMM
/// orientation for the input gradient, `(W·dZᵀ)ᵀ`: the same results as autodiff and as one
/// device, on one stage and across two.
#[test]
fn the_input_gradient_of_few_rows_matches_autodiff() {
    let layers = common::seeded(9, |d| MlpConfig::new(32, 3, CLASSES).init(d));
    let batches: Vec<pipetrain::Batch> = (0..STEPS)
        .map(|k| synthetic::classification(6, k, 16, 32, CLASSES, &Device::flex()))
        .collect();
    let expected = {
        let mut single =
            SingleDevice::new(layers.clone(), &Device::flex(), &OptimizerConfig::adam());
        for b in &batches {
            single
                .step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, 1e-2)
                .unwrap();
        }
        single.parameters()
    };
    for balance in [vec![4], vec![2, 2]] {
        for backward in [Backward::default(), Backward::Fused] {
            let mut pipeline = Pipeline::builder()
                .layers(layers.clone())
                .balance(balance.clone())
                .micro_batches(8) // 2 rows each
                .backward(backward)
                .optimizer(OptimizerConfig::adam())
                .learning_rate(1e-2)
                .threads_per_worker(1)
                .build()
                .unwrap();
            for b in &batches {
                pipeline.train_step(b).unwrap();
            }
            let d = difference(&pipeline.parameters(), &expected);
            assert!(d.max_relative <= 1e-5, "{balance:?} {backward:?}: {d:?}");
        }
    }
}
