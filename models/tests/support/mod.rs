//! What the model tests share: a 2-stage pipeline run through the engine's lower-level API.

use std::sync::Arc;

use burn::prelude::*;
use pipetrain_engine::{
    Backward, Batch, ChannelFabric, CrossEntropy, DataParallel, OptimizerConfig, Prepared, Remat,
    Runtime, RuntimeConfig, Workers, World, parameters,
};
use pipetrain_partitioner::Partition;
use pipetrain_schedules::ScheduleKind;

/// Trains `init` cut before layer `cut` into 2 stages, `micro_batches` per step, SGD at
/// `learning_rate`, re-materialization `remat`, one step per batch of `data`; returns every
/// parameter (stage 0's first) and the step losses.
pub fn two_stages<L: pipetrain_engine::Layer>(
    init: &[L],
    cut: usize,
    data: &[Batch],
    schedule: ScheduleKind,
    micro_batches: usize,
    learning_rate: f64,
    remat: Remat,
) -> (Vec<Vec<f32>>, Vec<f64>) {
    let device = Device::flex();
    let split = Partition::from_balance(&[cut, init.len() - cut], init.len()).unwrap();
    let world = World::new(1, 2).unwrap();
    let workers =
        Workers::build(world, split, init, &[device], &OptimizerConfig::sgd(), 1).unwrap();
    let config = RuntimeConfig {
        schedule: schedule.into(),
        micro_batches,
        learning_rate,
        remat,
        loss: Arc::new(CrossEntropy),
        data_parallel: DataParallel::default(),
        ties: Vec::new(),
        backward: Backward::default(),
        guard: Default::default(),
        timing: Default::default(),
        handoff: Default::default(),
        precision: Default::default(),
        warm_up: Default::default(),
    };
    let setup = Prepared::new(workers, config).unwrap();
    let mut runtime = Runtime::new(setup, Box::new(ChannelFabric::default())).unwrap();
    let losses = data
        .iter()
        .map(|batch| runtime.step(batch).unwrap().loss)
        .collect();
    let params = parameters(&runtime.into_workers().into_model());
    (params, losses)
}
