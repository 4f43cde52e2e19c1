//! What the model tests share: a 2-stage pipeline run through the engine's lower-level API.

use burn::prelude::*;
use pipetrain_engine::{
    Batch, CrossEntropy, OptimizerConfig, Remat, Shard, StepConfig, WorkerState, parameters,
    run_step,
};
use pipetrain_schedules::{Lowering, ReplicaId, ScheduleKind, StageId, WorkerId, lower, validate};

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
    let optimizer = OptimizerConfig::sgd();
    let (first, second) = init.split_at(cut);
    let stage = |s: usize, layers: &[L]| {
        let id = WorkerId::new(ReplicaId(0), StageId::from(s));
        WorkerState::new(id, layers.to_vec(), &device, &optimizer, 1)
    };
    let mut workers = vec![stage(0, first), stage(1, second)];
    let plan = lower(
        &schedule.plan(2, micro_batches).unwrap(),
        Lowering::default(),
    );
    validate(&plan).unwrap();
    let config = StepConfig {
        plan: &plan,
        learning_rate,
        remat,
        loss: &CrossEntropy,
    };
    let mut losses = Vec::new();
    for batch in data {
        let shard = Shard {
            inputs: batch.inputs.clone().split(micro_batches).unwrap(),
            targets: batch.targets.clone().split(micro_batches).unwrap(),
        };
        losses.push(run_step(&mut workers, vec![shard], &config).unwrap().loss);
    }
    let params = workers
        .into_iter()
        .flat_map(|w| parameters(&w.into_layers()))
        .collect();
    (params, losses)
}
