//! The warm-up (issue 46, item 2): the first training step and the first inference run their
//! compute actions one at a time, so that a GPU's autotune tunes every shape on one thread and
//! every worker then runs the same kernel. On a CPU (`WarmUp::Always`) the mechanism shows in
//! the count of serialised actions, and it changes no bit of what is trained.

use crate::common;

use burn::prelude::*;
use pipetrain::schedules::StageId;
use pipetrain::{OptimizerConfig, Pipeline, WarmUp};
use pipetrain_models::{MlpConfig, synthetic};

#[test]
fn the_first_step_runs_its_compute_actions_one_at_a_time_and_trains_the_same_bits() {
    let init = common::seeded(5, |d| MlpConfig::new(8, 3, 3).init(d));
    let run = |warm_up| {
        let mut pipeline = Pipeline::builder()
            .layers(init.clone())
            .stages(2)
            .replicas(2)
            .micro_batches(4)
            .optimizer(OptimizerConfig::adam())
            .learning_rate(1e-2)
            .warm_up(warm_up)
            .threads_per_worker(1)
            .build_with(&synthetic::classification(5, 0, 16, 8, 3, &Device::flex()))
            .unwrap();
        let reports: Vec<_> = (0..2)
            .map(|k| {
                let batch = synthetic::classification(5, k, 16, 8, 3, &Device::flex());
                pipeline.train_step(&batch).unwrap()
            })
            .collect();
        let computes: Vec<u32> = (0..2)
            .map(|s| {
                let program = pipeline.plan().program(StageId(s));
                program.iter().filter(|a| a.kind.is_compute()).count() as u32
            })
            .collect();
        (pipeline.parameters(), reports, computes)
    };
    let (always, reports, computes) = run(WarmUp::Always);
    for worker in &reports[0].workers {
        let stage = worker.worker.stage.index();
        assert!(computes[stage] > 1, "{computes:?}");
        assert_eq!(
            worker.serialized_actions, computes[stage],
            "{}: the first step's compute actions, one at a time",
            worker.worker
        );
    }
    for worker in &reports[1].workers {
        assert_eq!(worker.serialized_actions, 0, "{}: step 2", worker.worker);
    }
    let (never, reports, _) = run(WarmUp::Never);
    assert!(
        reports
            .iter()
            .flat_map(|r| &r.workers)
            .all(|w| w.serialized_actions == 0)
    );
    // WarmUp::Auto on CPU devices: no warm-up (a CPU has no autotune).
    let (auto, reports, _) = run(WarmUp::Auto);
    assert!(
        reports
            .iter()
            .flat_map(|r| &r.workers)
            .all(|w| w.serialized_actions == 0)
    );
    assert!(
        always == never && never == auto,
        "the warm-up changed the weights"
    );
}
