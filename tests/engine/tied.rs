//! Tied embeddings (DeepSpeed's TiedLayerSpec): a GPT whose token embedding (stage 0) and output
//! projection (last stage) are one parameter trains exactly like single-device training with
//! the same tie, and the two copies stay equal bit for bit.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{
    AdamOptions, Backward, CrossEntropy, OptimizerConfig, Pipeline, Remat, ScheduleKind, Tie,
};
use pipetrain_models::{GptConfig, GptLayer, synthetic};

const VOCAB: usize = 16;
const CONTEXT: usize = 8;
const BATCH: usize = 8;

/// Adam with PyTorch's defaults (ε = 1e-8): the GPT has no key bias, the one parameter whose
/// gradient is 0 up to rounding, which a tiny ε would turn into lr-sized steps.
fn adam() -> OptimizerConfig {
    OptimizerConfig::torch_adam(AdamOptions::adam()).unwrap()
}
fn config() -> GptConfig {
    GptConfig::new(VOCAB, CONTEXT, 8, 2, 2)
}

fn model() -> Vec<GptLayer> {
    common::seeded(5, |d| config().init(d))
}

fn batch(i: u64) -> pipetrain::Batch {
    synthetic::tokens(9, i, BATCH, CONTEXT, VOCAB, &Device::flex())
}

/// The token embedding and the head's weight, as [V, D] row-major values.
fn tied_copies(params: &[Vec<f32>]) -> (Vec<f32>, Vec<f32>) {
    // Parameter order: embedding (token, position), …, head (norm gamma, beta, unembed).
    let token = params[0].clone();
    let unembed = params.last().unwrap().clone(); // [D, V]
    let d = token.len() / VOCAB;
    let transposed: Vec<f32> = (0..VOCAB)
        .flat_map(|v| (0..d).map(move |j| (v, j)))
        .map(|(v, j)| unembed[j * VOCAB + v])
        .collect();
    (token, transposed)
}

fn reference(init: &[GptLayer], steps: u64) -> Vec<Vec<f32>> {
    let mut single = SingleDevice::new(init.to_vec(), &Device::flex(), &adam())
        .with_ties(&[config().tie_embeddings()])
        .unwrap();
    for i in 0..steps {
        let b = batch(i);
        single
            .step(b.inputs, b.targets, &CrossEntropy, 1e-2)
            .unwrap();
    }
    single.parameters()
}

fn pipelined(
    init: &[GptLayer],
    balance: &[usize],
    replicas: usize,
    zero: u8,
    schedule: ScheduleKind,
    steps: u64,
) -> Vec<Vec<f32>> {
    let mut pipeline = Pipeline::builder()
        .layers(init.to_vec())
        .balance(balance.iter().copied())
        .replicas(replicas)
        .zero(zero)
        .micro_batches(2)
        .schedule(schedule)
        .remat(Remat::Never)
        .optimizer(adam())
        .learning_rate(1e-2)
        .loss(CrossEntropy)
        .tie(config().tie_embeddings())
        .threads_per_worker(1)
        .build()
        .unwrap();
    for i in 0..steps {
        pipeline.train_step(&batch(i)).unwrap();
    }
    pipeline.parameters()
}

#[test]
fn tied_gpt_matches_single_device_with_the_same_tie() {
    // One init, cloned: burn's init RNG is global, so tests running in parallel would otherwise
    // draw different weights.
    let init = model();
    let expected = reference(&init, 3);
    let (a, b) = tied_copies(&expected);
    assert_eq!(a, b, "the reference keeps the copies equal");
    for (balance, replicas, zero) in [
        (vec![4], 1, 0),
        (vec![2, 2], 1, 0),
        (vec![2, 2], 2, 0),
        (vec![2, 2], 2, 1),
        (vec![1, 2, 1], 1, 0),
    ] {
        for schedule in ScheduleKind::ALL {
            let params = pipelined(&init, &balance, replicas, zero, schedule, 3);
            let d = difference(&params, &expected);
            assert!(
                d.max_relative <= 1e-5,
                "{balance:?} × {replicas} replicas, ZeRO {zero}, {schedule}: {d:?}"
            );
            let (a, b) = tied_copies(&params);
            assert_eq!(a, b, "{balance:?}: the tied copies drifted apart");
        }
    }
}

/// The tied GPT under the schedules with several chunks per rank: its 4 layers as 2 ranks × 2
/// chunks, so the tie's halves (stages 0 and 3) sit on two ranks (interleaved, looped BFS,
/// interleaved zero bubble) or on two chunks of rank 0 (ZB-V and DualPipeV, whose V puts the
/// first and last stage together). 1 and 2 replicas, ZeRO-1 on 2: within 1e-5 of one device
/// with the same tie, the copies equal, and bitwise equal to 1F1B over the same chunks at the
/// same weight-gradient group.
#[test]
fn tied_gpt_under_multi_chunk_schedules_matches_single_device_and_1f1b() {
    let init = model();
    let expected = reference(&init, 3);
    let train = |schedule: ScheduleKind, stages: Option<usize>, replicas, zero, backward| {
        let mut builder = Pipeline::builder()
            .layers(init.clone())
            .balance([1, 1, 1, 1])
            .replicas(replicas)
            .zero(zero)
            .micro_batches(4) // DualPipeV: at least twice the ranks
            .schedule(schedule)
            .backward(backward)
            .remat(Remat::Never)
            .optimizer(adam())
            .learning_rate(1e-2)
            .tie(config().tie_embeddings())
            .threads_per_worker(1);
        if let Some(p) = stages {
            builder = builder.stages(p);
        }
        let mut pipeline = builder.build().unwrap();
        for i in 0..3 {
            pipeline.train_step(&batch(i)).unwrap();
        }
        pipeline.parameters()
    };
    for (replicas, zero) in [(1, 0), (2, 0), (2, 1)] {
        for schedule in [
            ScheduleKind::Interleaved { virtual_stages: 2 },
            ScheduleKind::ZbV,
            ScheduleKind::LoopedBfs { virtual_stages: 2 },
            ScheduleKind::InterleavedZb { virtual_stages: 2 },
            ScheduleKind::DualPipeV,
        ] {
            let what = format!("{schedule} × {replicas} replicas, ZeRO {zero}");
            let params = train(schedule, Some(2), replicas, zero, Backward::default());
            let d = difference(&params, &expected);
            assert!(d.max_relative <= 1e-5, "{what}: {d:?}");
            let (a, b) = tied_copies(&params);
            assert_eq!(a, b, "{what}: the tied copies drifted apart");
            let theirs = match schedule.splits_backward() {
                true => Backward::Split { weight_group: 1 },
                false => Backward::default(),
            };
            let one_f_one_b = train(ScheduleKind::OneFOneB, None, replicas, zero, theirs);
            assert!(params == one_f_one_b, "{what}: not bitwise equal to 1f1b");
        }
    }
}

#[test]
fn untied_training_differs() {
    // The tie is not a no-op: without it the embedding and head evolve separately.
    let mut single = SingleDevice::new(model(), &Device::flex(), &adam())
        .with_ties(&[])
        .unwrap();
    let b = batch(0);
    single
        .step(b.inputs, b.targets, &CrossEntropy, 1e-2)
        .unwrap();
    let (a, t) = tied_copies(&single.parameters());
    assert_ne!(a, t);
}

#[test]
fn bad_ties_are_refused_with_the_names() {
    let build = |tie: Tie| {
        Pipeline::builder()
            .layers(model())
            .stages(2)
            .tie(tie)
            .build()
            .err()
            .expect("refused")
            .to_string()
    };
    let e = build(Tie::transposed("0.token.weight", "9.unembed.weight"));
    assert!(e.contains("no parameter `9.unembed.weight`"), "{e}");
    let e = build(Tie::new("0.token.weight", "3.unembed.weight"));
    assert!(e.contains("tie them transposed"), "{e}");
    let e = build(Tie::transposed("0.token.weight", "0.position.weight"));
    assert!(e.contains("do not match"), "{e}");
}

/// A checkpoint of a tied model resumes with the tie intact: the copies stay equal and the run
/// continues bit for bit.
#[test]
fn tied_model_resumes_from_a_checkpoint() {
    let init = model();
    let build = || {
        Pipeline::builder()
            .layers(init.clone())
            .balance([2, 2])
            .micro_batches(2)
            .remat(Remat::Never)
            .optimizer(adam())
            .learning_rate(1e-2)
            .tie(config().tie_embeddings())
            .threads_per_worker(1)
            .build()
            .unwrap()
    };
    let mut uninterrupted = build();
    for i in 0..4 {
        uninterrupted.train_step(&batch(i)).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tied.safetensors");
    let mut first = build();
    for i in 0..2 {
        first.train_step(&batch(i)).unwrap();
    }
    first.save_checkpoint(&path, Default::default()).unwrap();
    let mut resumed = build(); // balance given: already running when the checkpoint loads
    resumed.load_checkpoint(&path).unwrap();
    for i in 2..4 {
        resumed.train_step(&batch(i)).unwrap();
    }
    let params = resumed.parameters();
    let (a, b) = tied_copies(&params);
    assert_eq!(a, b, "the tie survives the resume");
    assert_eq!(params, uninterrupted.parameters(), "bit for bit");
}
