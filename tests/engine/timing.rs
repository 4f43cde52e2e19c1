//! `Timing` (issue 25): whether each compute action synchronises its device before its time is
//! read. It changes what the clock measures on an asynchronous device, never what is computed:
//! both modes train bit-identical weights, and both report a time for every compute action.
//! The synchronisations themselves are counted (a no-op on a CPU, so only the count shows them):
//! one per compute action of the worker's program under `Device`, one per worker under `Host`
//! (the default). Under either, a training step reads device values back once per worker: the
//! gradient guard's norm, with the last stage's losses (issue 46).

use crate::common;

use burn::prelude::*;
use pipetrain::schedules::{ActionKind, StageId};
use pipetrain::{OptimizerConfig, Pipeline, Timing};
use pipetrain_models::{MlpConfig, synthetic};

#[test]
fn device_and_host_timing_train_the_same_bits_and_time_every_action() {
    let init = common::seeded(3, |d| MlpConfig::new(8, 3, 3).init(d));
    let run = |timing| {
        let mut pipeline = Pipeline::builder()
            .layers(init.clone())
            .stages(2)
            .micro_batches(4)
            .optimizer(OptimizerConfig::adam())
            .learning_rate(1e-2)
            .timing(timing)
            .threads_per_worker(1)
            .build_with(&synthetic::classification(3, 0, 16, 8, 3, &Device::flex()))
            .unwrap();
        let mut last = None;
        for k in 0..3 {
            let batch = synthetic::classification(3, k, 16, 8, 3, &Device::flex());
            last = Some(pipeline.train_step(&batch).unwrap());
        }
        // Each stage's compute actions, from the plan every worker interprets.
        let computes: Vec<u32> = (0..2)
            .map(|s| {
                let program = pipeline.plan().program(StageId(s));
                program.iter().filter(|a| !a.kind.is_transfer()).count() as u32
            })
            .collect();
        (pipeline.parameters(), last.unwrap(), computes)
    };
    let (device, device_report, computes) = run(Timing::Device);
    let (host, host_report, _) = run(Timing::default());
    assert!(device == host, "the timing mode changed the weights");
    for report in [&device_report, &host_report] {
        for worker in &report.workers {
            assert_eq!(
                worker.read_backs, 1,
                "{}: one read-back a step, the guard's and the loss's together",
                worker.worker
            );
        }
    }
    for (report, per_worker) in [(&device_report, None), (&host_report, Some(1))] {
        for worker in &report.workers {
            let stage = worker.worker.stage.index();
            let expected = per_worker.unwrap_or(computes[stage]);
            assert!(computes[stage] > 1, "{computes:?}");
            assert_eq!(
                worker.device_syncs, expected,
                "{}: device syncs in a step ({} compute actions)",
                worker.worker, computes[stage]
            );
        }
    }
    for report in [&device_report, &host_report] {
        for worker in &report.workers {
            for kind in [ActionKind::Forward, ActionKind::OptimizerStep] {
                assert!(
                    worker.actions.count(kind) > 0,
                    "{}: no {kind} time recorded",
                    worker.worker
                );
            }
        }
    }
}

#[test]
fn host_timing_is_the_default() {
    assert_eq!(Timing::default(), Timing::Host);
}

#[test]
fn timing_parses_and_prints() {
    for (text, timing) in [("device", Timing::Device), ("host", Timing::Host)] {
        assert_eq!(text.parse::<Timing>().unwrap(), timing);
        assert_eq!(timing.to_string(), text);
    }
    assert!(
        "gpu"
            .parse::<Timing>()
            .unwrap_err()
            .contains("device or host")
    );
}
