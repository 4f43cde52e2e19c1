//! Any batch size: micro-batches that differ by a row, and an epoch's short last batch.
//!
//! A batch of any size ≥ R × m is cut like `torch.tensor_split` (the first micro-batches one row
//! longer) and each micro-batch's loss is weighted by its rows, so a step still equals one
//! full-batch step on one device, for pipelines and replicas alike.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{Batch, CrossEntropy, Pipeline, Remat, ScheduleKind};
use pipetrain_data::{InMemory, LoaderConfig, Position, Values};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

const WIDTH: usize = 6;
const CLASSES: usize = 3;
const SEED: u64 = 15;
const LR: f64 = 1e-2;

fn model() -> Vec<MlpLayer> {
    common::seeded(SEED, |d| MlpConfig::new(WIDTH, 3, CLASSES).init(d)) // 4 layers
}

/// `steps` batches of `rows` rows.
fn batches(rows: usize, steps: u64) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::classification(SEED, k, rows, WIDTH, CLASSES, &Device::flex()))
        .collect()
}

/// The single-device weights after one full-batch Adam step per batch.
fn reference(batches: &[Batch]) -> Vec<Vec<f32>> {
    let mut single = SingleDevice::new(model(), &Device::flex(), &common::adam_eps_1e5());
    for b in batches {
        single
            .step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, LR)
            .unwrap();
    }
    single.parameters()
}

fn pipeline(
    stages: usize,
    replicas: usize,
    m: usize,
    schedule: ScheduleKind,
    first: &Batch,
) -> Pipeline<MlpLayer> {
    Pipeline::builder()
        .layers(model())
        .stages(stages)
        .replicas(replicas)
        .micro_batches(m)
        .schedule(schedule)
        .remat(Remat::Never)
        .optimizer(common::adam_eps_1e5())
        .learning_rate(LR)
        .build_with(first)
        .unwrap()
}

/// Trains `batches` pipelined; returns the weights and the samples the steps reported.
fn pipelined(mut pipeline: Pipeline<MlpLayer>, batches: &[Batch]) -> (Vec<Vec<f32>>, usize) {
    let mut samples = 0;
    for b in batches {
        samples += pipeline.train_step(b).unwrap().samples;
    }
    (pipeline.parameters(), samples)
}

#[test]
fn a_seven_row_batch_at_four_micro_batches_equals_the_full_batch_step() {
    let data = batches(7, 3); // micro-batches of 2, 2, 2, 1 rows
    let expected = reference(&data);
    for schedule in [ScheduleKind::GPipe, ScheduleKind::OneFOneB] {
        let (got, samples) = pipelined(pipeline(2, 1, 4, schedule, &data[0]), &data);
        let d = difference(&got, &expected);
        assert!(d.max_relative <= common::TOLERANCE, "{schedule:?}: {d:?}");
        assert_eq!(samples, 21);
    }
}

#[test]
fn uneven_micro_batches_over_replicas_equal_the_full_batch_step() {
    // 250 rows over 2 replicas × 8 micro-batches: 10 of 16 rows, then 6 of 15; replica 0 trains
    // 128 rows, replica 1 122, and the all-reduce sums their row-weighted gradients.
    let data = batches(250, 2);
    let expected = reference(&data);
    for (stages, replicas, m) in [(2, 2, 8), (1, 3, 2), (3, 2, 3)] {
        let (got, _) = pipelined(
            pipeline(stages, replicas, m, ScheduleKind::OneFOneB, &data[0]),
            &data,
        );
        let d = difference(&got, &expected);
        assert!(
            d.max_relative <= common::TOLERANCE,
            "{stages} stages × {replicas} replicas, m = {m}: {d:?}"
        );
    }
}

#[test]
fn an_epoch_whose_last_batch_is_short_trains_every_row_once() {
    // 11 examples in batches of 4: 4, 4 and a short 3 (cut 2 + 1 at m = 2), kept, not dropped.
    let examples = 11;
    let features: Vec<f32> = (0..examples * WIDTH)
        .map(|i| ((i * 37) % 17) as f32 / 17.0 - 0.5)
        .collect();
    let labels: Vec<i64> = (0..examples as i64).map(|i| i % CLASSES as i64).collect();
    let data = InMemory::new(
        Values::Float(features),
        vec![WIDTH],
        Values::Int(labels),
        vec![],
    )
    .unwrap();
    let loader = LoaderConfig {
        seed: SEED,
        drop_last: false,
        ..LoaderConfig::new(4)
    }
    .build(data)
    .unwrap();
    assert_eq!(loader.batches_per_epoch(), 3);
    let epoch: Vec<Batch> = loader
        .iter_from(Position::START, &Device::flex())
        .unwrap()
        .take(3)
        .map(|item| item.unwrap().1)
        .collect();
    let rows: Vec<usize> = epoch.iter().map(Batch::len).collect();
    assert_eq!(rows, [4, 4, 3]);
    // Every example once: the epoch's inputs, sorted, are the data set's.
    let mut seen: Vec<Vec<u32>> = epoch
        .iter()
        .flat_map(|b| {
            let values = b.inputs.to_f64_vec();
            values
                .chunks(WIDTH)
                .map(|row| row.iter().map(|&v| (v as f32).to_bits()).collect())
                .collect::<Vec<_>>()
        })
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), examples);
    let expected = reference(&epoch);
    let (got, samples) = pipelined(pipeline(2, 1, 2, ScheduleKind::OneFOneB, &epoch[0]), &epoch);
    assert_eq!(samples, examples, "every row trained once");
    let d = difference(&got, &expected);
    assert!(d.max_relative <= common::TOLERANCE, "{d:?}");
}
