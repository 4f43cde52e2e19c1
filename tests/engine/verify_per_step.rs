//! The library's reference follows `--verify`'s rule (issue 26): compared per step, a pipeline
//! of 2 replicas × 2 stages under Adam matches single-device training within 1e-5 at every one of
//! 20 steps. Before each step the single-device copy takes the pipeline's weights
//! ([`SingleDevice::load_weights`]), both take the step on the same batch, and the weights are
//! compared, so float rounding (a replica's half-batch gradients summed by the all-reduce round
//! differently from one full-batch gradient) cannot compound over the run.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{CrossEntropy, OptimizerConfig, Pipeline, StageId};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

#[test]
fn every_step_of_a_2_by_2_adam_run_matches_one_device_from_the_pipelines_weights() {
    let init: Vec<MlpLayer> = common::seeded(26, |d| MlpConfig::new(64, 4, 10).init(d));
    let mut pipeline = Pipeline::builder()
        .layers(init.clone())
        .stages(2)
        .replicas(2)
        .micro_batches(4)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(1e-3)
        .threads_per_worker(1)
        .build_with(&synthetic::classification(
            26,
            0,
            64,
            64,
            10,
            &Device::flex(),
        ))
        .unwrap();
    let mut single = SingleDevice::new(init, &Device::flex(), &OptimizerConfig::adam());
    let mut worst = 0f64;
    for k in 0..20 {
        let batch = synthetic::classification(26, k, 64, 64, 10, &Device::flex());
        pipeline.train_step(&batch).unwrap();
        single
            .step(batch.inputs, batch.targets, &CrossEntropy, 1e-3)
            .unwrap();
        let d = difference(&pipeline.parameters(), &single.parameters());
        assert!(
            d.max_relative <= 1e-5,
            "step {}: max_rel_diff {:.3e}",
            k + 1,
            d.max_relative
        );
        assert!(
            pipeline.replica_parameters(1) == pipeline.parameters(),
            "step {}: replicas apart",
            k + 1
        );
        worst = worst.max(d.max_relative);
        let model: Vec<MlpLayer> = (0..pipeline.stages())
            .flat_map(|s| pipeline.stage_layers(StageId::from(s)).to_vec())
            .collect();
        single.load_weights(&model).unwrap();
        assert!(
            single.parameters() == pipeline.parameters(),
            "step {}: the copy did not take the pipeline's weights",
            k + 1
        );
    }
    println!("worst step: max_rel_diff {worst:.3e}");
}
