//! A burn dataset feeding a pipeline from the library: burn's `InMemDataset` as a pipetrain
//! dataset (`FromBurn`), batched by pipetrain's `Loader`.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset as _;
use burn::prelude::*;
use pipetrain::learner::PipelineModel;
use pipetrain::{OptimizerConfig, Pipeline};
use pipetrain_data::burn_data::FromBurn;
use pipetrain_data::{Example, LoaderConfig, Position, Values};

use crate::common;
use crate::example::{self, Mlp, Point, PointBatcher};

#[test]
fn a_burn_dataset_feeds_a_pipeline_through_pipetrains_loader() {
    let model = common::seeded(example::SEED, Mlp::new);
    let points = example::points(example::SEED, example::TRAIN);
    let items: Vec<Point> = points.iter().map(Result::unwrap).collect();
    let data = FromBurn::new(points, vec![example::FEATURES], vec![], |p: Point| {
        Example {
            input: Values::Float(p.features.to_vec()),
            target: Values::Int(vec![p.label]),
        }
    })
    .unwrap();
    let loader = LoaderConfig {
        shuffle: false,
        ..LoaderConfig::new(example::BATCH)
    }
    .build(Arc::new(data))
    .unwrap();
    let pipeline = || {
        Pipeline::builder()
            .layers(model.clone().into_layers())
            .balance([2, 1])
            .replicas(2)
            .micro_batches(4)
            .optimizer(OptimizerConfig::sgd())
            .learning_rate(example::LEARNING_RATE)
            .build()
            .unwrap()
    };
    let device = Device::flex();
    // The same pipeline on the same rows batched by burn's own batcher.
    let (mut ours, mut reference) = (pipeline(), pipeline());
    for (batch, rows) in items.chunks(example::BATCH).enumerate() {
        let fed = loader
            .batch_at(Position { epoch: 0, batch }, &device)
            .unwrap();
        let classes = PointBatcher.batch(rows.to_vec(), &device);
        let step = ours.train_step(&fed).unwrap();
        let expected = reference.train_step(&Mlp::batch(&classes)).unwrap();
        assert_eq!(step.loss, expected.loss, "batch {batch}");
    }
    assert_eq!(loader.batches_per_epoch(), example::TRAIN / example::BATCH);
    assert_eq!(ours.parameters(), reference.parameters());
}
