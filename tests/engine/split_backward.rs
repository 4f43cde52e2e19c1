//! Split backward: dense layers trained by hand (input gradient at once, weight gradients
//! deferred and batched over a group of micro-batches) against autodiff, per layer kind, on
//! stages that mix dense and autodiff layers, under every schedule and re-materialization mode.

use crate::common;

use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::schedules::{ActionKind, StageId};
use pipetrain::{
    Activation, Backward, CrossEntropy, Dense, EngineError, Layer, OptimizerConfig, Pipeline,
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
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
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
/// matches autodiff (fused) and single-device training within 1e-5, and GPipe, 1F1B and ZB-H1
/// are bitwise equal at the same weight-gradient group.
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
                // By weight-gradient group: 0 is the step's under GPipe and 1F1B, 1 under
                // ZB-H1, which places each `W` (a batched dW rounds differently from a sum of
                // per-micro-batch ones, so those two are only within 1e-5 of each other).
                let mut by_group: Vec<(usize, ScheduleKind, Vec<Vec<f32>>)> = Vec::new();
                for weight_group in [0, 1, 2] {
                    for schedule in ScheduleKind::ALL {
                        let got = train(
                            &layers,
                            &Run {
                                balance: balance.clone(),
                                schedule,
                                micro_batches: 3,
                                remat,
                                backward: Backward::Split { weight_group },
                            },
                        )
                        .0;
                        let what = format!(
                            "trailing_norm={trailing_norm} balance={balance:?} remat={remat} \
                             weight_group={weight_group} {schedule}"
                        );
                        let d = difference(&got, &fused);
                        assert!(d.max_relative <= 1e-5, "{what}: split vs fused {d:?}");
                        let d = difference(&got, &expected);
                        assert!(d.max_relative <= 1e-5, "{what}: split vs one device {d:?}");
                        let group = match (weight_group, schedule.splits_backward()) {
                            (0, true) => 1,
                            (0, false) => 3,
                            (g, _) => g,
                        };
                        if let Some((_, other, same)) = by_group.iter().find(|g| g.0 == group) {
                            assert!(*same == got, "{what}: differs from {other} (group {group})");
                        }
                        by_group.push((group, schedule, got));
                    }
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

/// ZB-H1 places `I` and `W` itself; a stage without a dense layer (here stage 1, a layer norm)
/// runs full backwards instead, and is reported; under `Backward::Fused` every stage does.
#[test]
fn zb_h1_runs_full_backwards_where_it_cannot_split() {
    let layers = mixed(false);
    let run = Run {
        balance: vec![1, 1, 7],
        schedule: ScheduleKind::ZbH1,
        micro_batches: 4,
        remat: Remat::Never,
        backward: Backward::default(),
    };
    let (params, pipeline) = train(&layers, &run);
    assert_eq!(pipeline.fused_stages(), [StageId(1)]);
    let plan = pipeline.plan();
    let count = |s: u32, kind| plan.count(StageId(s), kind);
    for s in [0, 2] {
        assert_eq!(count(s, ActionKind::BackwardInput), 4);
        assert_eq!(count(s, ActionKind::BackwardWeight), 4);
    }
    assert_eq!(count(1, ActionKind::Backward), 4);
    assert_eq!(count(1, ActionKind::BackwardWeight), 0);
    // The last stage holds its first two `W`s back to the end of its program.
    let last: Vec<String> = plan
        .program(StageId(2))
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert!(
        last.ends_with(&["2W2".into(), "2W3".into(), "2AR".into(), "2OPT".into()]),
        "{last:?}"
    );
    let d = difference(&params, &single_device(&layers));
    assert!(d.max_relative <= 1e-5, "{d:?}");

    let (fused_params, fused) = train(
        &layers,
        &Run {
            backward: Backward::Fused,
            ..run
        },
    );
    assert_eq!(fused.fused_stages(), [StageId(0), StageId(1), StageId(2)]);
    assert_eq!(fused.plan().count(StageId(2), ActionKind::Backward), 4);
    let d = difference(&fused_params, &params);
    assert!(d.max_relative <= 1e-5, "{d:?}");
}

/// Deferred weight gradients hold each dense layer's input and pre-activation gradient until
/// their group's `W`: reported per worker, and smaller groups hold less. ZB-H1 places its
/// `W`s, and by default each computes its own micro-batch.
#[test]
fn smaller_weight_groups_hold_less() {
    let layers = common::seeded(3, |d| MlpConfig::new(WIDTH, 2, CLASSES).init(d));
    let peak_under = |schedule, backward| {
        let mut pipeline = Pipeline::builder()
            .layers(layers.clone())
            .schedule(schedule)
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
    let peak = |backward| peak_under(ScheduleKind::OneFOneB, backward);
    let whole = peak(Backward::Split { weight_group: 0 });
    let pairs = peak(Backward::Split { weight_group: 2 });
    let single = peak(Backward::Split { weight_group: 1 });
    // Per micro-batch of 4 rows: 3 layers × (input + gradient) = 4 · (8+8 + 8+8 + 8+3) · 4 B.
    let per_micro_batch = 4 * (8 + 8 + 8 + 8 + 8 + 3) * 4;
    assert_eq!(single, per_micro_batch);
    assert_eq!(pairs, 2 * per_micro_batch);
    assert_eq!(whole, 4 * per_micro_batch);
    assert_eq!(peak(Backward::Fused), 0);
    let zb = |weight_group| peak_under(ScheduleKind::ZbH1, Backward::Split { weight_group });
    assert_eq!(zb(0), per_micro_batch);
    assert_eq!(zb(2), 2 * per_micro_batch);
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
