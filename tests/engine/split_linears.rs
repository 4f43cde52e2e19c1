//! Split `Linear` calls inside layers that are not dense (issue 18): the GPT's projections, MLP
//! and unembedding, and the ResNet head's `Linear` behind its pooling. With the split backward
//! their weight gradients wait for `W` and are computed once per group of micro-batches; the
//! rest of each layer stays on autodiff. Against autodiff (fused) and single-device training,
//! per layer kind and cut, under every schedule, tied or not.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::costs;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::schedules::{ActionKind, StageId};
use pipetrain::{
    AdamOptions, Backward, Batch, CrossEntropy, Layer, OptimizerConfig, Pipeline, Remat,
    ScheduleKind,
};
use pipetrain_models::{GptConfig, GptLayer, ResNetConfig, ResNetLayer, synthetic};

const VOCAB: usize = 16;
const CONTEXT: usize = 4;
const BATCH: usize = 8;
const M: usize = 4;

fn adam() -> OptimizerConfig {
    OptimizerConfig::torch_adam(AdamOptions::adam()).unwrap()
}

fn gpt_config() -> GptConfig {
    GptConfig::new(VOCAB, CONTEXT, 8, 2, 2)
}

fn gpt() -> Vec<GptLayer> {
    common::seeded(5, |d| gpt_config().init(d))
}

fn tokens() -> Vec<Batch> {
    (0..2)
        .map(|i| synthetic::tokens(9, i, BATCH, CONTEXT, VOCAB, &Device::flex()))
        .collect()
}

fn resnet() -> Vec<ResNetLayer> {
    common::seeded(4, |d| ResNetConfig::new(4, 2, 3).with_image(3, 8).init(d))
}

fn images() -> Vec<Batch> {
    (0..2)
        .map(|i| synthetic::images(6, i, BATCH, 3, 8, 3, &Device::flex()))
        .collect()
}

struct Run<'a> {
    balance: &'a [usize],
    schedule: ScheduleKind,
    remat: Remat,
    backward: Backward,
    tied: bool,
}

fn train<L: Layer + Clone>(layers: &[L], data: &[Batch], run: &Run<'_>) -> Pipeline<L> {
    let mut builder = Pipeline::builder()
        .layers(layers.to_vec())
        .balance(run.balance.iter().copied())
        .schedule(run.schedule)
        .micro_batches(M)
        .remat(run.remat)
        .backward(run.backward)
        .optimizer(adam())
        .learning_rate(1e-2)
        .loss(CrossEntropy)
        .threads_per_worker(1);
    if run.tied {
        builder = builder.tie(gpt_config().tie_embeddings());
    }
    let mut pipeline = builder.build().unwrap();
    for b in data {
        pipeline.train_step(b).unwrap();
    }
    pipeline
}

fn single_device<L: Layer + Clone>(layers: &[L], data: &[Batch], tied: bool) -> Vec<Vec<f32>> {
    let mut single = SingleDevice::new(layers.to_vec(), &Device::flex(), &adam());
    if tied {
        single = single.with_ties(&[gpt_config().tie_embeddings()]).unwrap();
    }
    for b in data {
        single
            .step_chunked(b.inputs.clone(), b.targets.clone(), M, &CrossEntropy, 1e-2)
            .unwrap();
    }
    single.trainable_parameters()
}

/// Split vs fused vs one device for `layers` at each balance: within 1e-5, and GPipe and 1F1B
/// (both batching the step's weight gradients) bitwise equal, as are ZB-H1 and 1F1B with a
/// weight-gradient group of 1.
fn check<L: Layer + Clone>(
    what: &str,
    layers: &[L],
    data: &[Batch],
    balances: &[&[usize]],
    remats: &[Remat],
    tied: bool,
) {
    let expected = single_device(layers, data, tied);
    let moved = difference(&single_device(layers, &[], tied), &expected);
    assert!(
        moved.max_relative > 1e-3,
        "{what}: training must move the weights"
    );
    for &balance in balances {
        for &remat in remats {
            let run = |schedule, backward| {
                let p = train(
                    layers,
                    data,
                    &Run {
                        balance,
                        schedule,
                        remat,
                        backward,
                        tied,
                    },
                );
                (p.trainable_parameters(), p)
            };
            let at = format!("{what} balance={balance:?} remat={remat}");
            let (fused, _) = run(ScheduleKind::OneFOneB, Backward::Fused);
            let split = Backward::Split { weight_group: 0 };
            let (one_f_one_b, pipeline) = run(ScheduleKind::OneFOneB, split);
            // Every stage holds a layer that splits: the plan runs `I` and `W`, no `B`.
            let plan = pipeline.plan();
            for s in 0..balance.len() as u32 {
                let splits = pipeline
                    .stage_layers(StageId(s))
                    .iter()
                    .any(|l| l.splits_linears());
                let count = |kind| plan.count(StageId(s), kind);
                assert_eq!(
                    (
                        count(ActionKind::BackwardWeight) > 0,
                        count(ActionKind::Backward) == 0
                    ),
                    (splits, splits),
                    "{at}: stage {s}"
                );
            }
            let (gpipe, _) = run(ScheduleKind::GPipe, split);
            let (zb, _) = run(ScheduleKind::ZbH1, split);
            let (grouped, _) = run(ScheduleKind::OneFOneB, Backward::Split { weight_group: 1 });
            for (name, got) in [
                ("1F1B split", &one_f_one_b),
                ("GPipe split", &gpipe),
                ("ZB-H1 split", &zb),
            ] {
                let d = difference(got, &fused);
                assert!(d.max_relative <= 1e-5, "{at}: {name} vs fused {d:?}");
                let d = difference(got, &expected);
                assert!(d.max_relative <= 1e-5, "{at}: {name} vs one device {d:?}");
            }
            assert!(gpipe == one_f_one_b, "{at}: GPipe and 1F1B differ");
            assert!(
                zb == grouped,
                "{at}: ZB-H1 and 1F1B with groups of 1 differ"
            );
        }
    }
}

#[test]
fn gpt_projections_mlp_and_head_split_like_autodiff() {
    let layers = gpt();
    check(
        "GPT",
        &layers,
        &tokens(),
        &[&[4], &[1, 3], &[2, 2], &[1, 1, 1, 1]],
        &[Remat::Never, Remat::Always],
        false,
    );
}

#[test]
fn tied_gpt_splits_the_unembedding_like_autodiff() {
    check(
        "tied GPT",
        &gpt(),
        &tokens(),
        &[&[2, 2]],
        &[Remat::Never],
        true,
    );
}

#[test]
fn resnet_head_splits_like_autodiff() {
    let layers = resnet();
    let n = layers.len();
    check(
        "ResNet",
        &layers,
        &images(),
        &[&[n], &[n - 1, 1]],
        &[Remat::Never],
        false,
    );
}

/// What a split layer keeps from `I` to `W` is what `costs::split_bytes` counts (the
/// memory column and `--memory-budget` use it): each `Linear` call's input and output
/// gradient, 4 bytes a value, the input that query, key and value share once.
#[test]
fn the_deferred_bytes_are_what_split_bytes_counts() {
    let layers = gpt();
    let data = tokens();
    let sample = data[0].inputs.clone().split(M).unwrap().swap_remove(0);
    let bytes = costs::split_bytes(&layers, &sample, &Device::flex()).unwrap();
    let (rows, d, v) = ((BATCH / M * CONTEXT) as u64, 8u64, VOCAB as u64);
    // A block: query, key, value (d → d, one input), output (d → d), up (d → 4d), down (4d →
    // d).
    let block = (rows * d + 3 * rows * d) + rows * d * 2 + 2 * (rows * d + rows * 4 * d);
    assert_eq!(bytes, vec![0, block * 4, block * 4, rows * (d + v) * 4]);
    // ZB-H1 on one stage runs F, I, W per micro-batch: one micro-batch's calls are held at a
    // time.
    let mut pipeline = train(
        &layers,
        &data,
        &Run {
            balance: &[4],
            schedule: ScheduleKind::ZbH1,
            remat: Remat::Never,
            backward: Backward::default(),
            tied: false,
        },
    );
    let report = pipeline.train_step(&data[0]).unwrap();
    let held = report.workers[0].peak_deferred_bytes as u64;
    assert_eq!(held, bytes.iter().sum::<u64>(), "one micro-batch's calls");
}
