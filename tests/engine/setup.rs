//! The setup is complete when `build` returns, before any step: the split, the plans, the
//! predicted bubbles and memory, and the parameters are what they are after the first step.

use crate::common;

use burn::prelude::*;
use pipetrain::BuildError;
use pipetrain::{Backward, Error, OptimizerConfig, Pipeline, PipelineBuilder, ScheduleKind};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

fn model() -> Vec<MlpLayer> {
    common::seeded(11, |d| MlpConfig::new(16, 3, 4).init(d))
}

fn batch(k: u64) -> pipetrain::Batch {
    synthetic::classification(11, k, 16, 16, 4, &Device::flex())
}

fn builder(schedule: ScheduleKind, backward: Backward) -> PipelineBuilder<MlpLayer> {
    Pipeline::builder()
        .layers(model())
        .stages(2)
        .micro_batches(4)
        .schedule(schedule)
        .backward(backward)
        .optimizer(OptimizerConfig::sgd())
        .threads_per_worker(1)
}

#[test]
fn plan_split_and_parameters_are_the_same_before_and_after_the_first_step() {
    for (schedule, backward) in [
        (ScheduleKind::OneFOneB, Backward::default()),
        (ScheduleKind::ZbH1, Backward::Fused),
        (
            ScheduleKind::Interleaved { virtual_stages: 2 },
            Backward::default(),
        ),
    ] {
        let mut p = builder(schedule, backward)
            .balance(match schedule.virtual_stages() {
                1 => vec![2, 2],
                _ => vec![1, 1, 1, 1],
            })
            .build()
            .unwrap();
        let plan = p.plan().clone();
        let partition = p.partition().clone();
        let fused = p.fused_stages();
        let bubble = p.predicted_bubble().to_vec();
        // Before any step the parameters are the workers' (no separate copy of the model).
        assert_eq!(p.parameters(), p.trainable_parameters(), "{schedule}");
        assert_eq!(p.parameters(), pipetrain::engine::parameters(&model()));
        let report = p.train_step(&batch(0)).unwrap();
        assert_eq!(p.plan(), &plan, "{schedule}: plan() means one thing");
        assert_eq!(p.partition(), &partition);
        assert_eq!(p.fused_stages(), fused);
        assert_eq!(p.predicted_bubble(), bubble.as_slice());
        assert_eq!(p.parameters(), p.trainable_parameters());
        for w in &report.workers {
            assert_eq!(
                w.predicted_bubble_fraction,
                bubble[w.worker.stage.index()],
                "{schedule}: the report's prediction is the setup's"
            );
        }
    }
    // ZB-H1 with the fused backward: every stage runs `B`s, known before the first step.
    let p = builder(ScheduleKind::ZbH1, Backward::Fused)
        .build_with(&batch(0))
        .unwrap();
    assert_eq!(p.fused_stages().len(), 2);
    assert_eq!(p.setup().plans().fused(), p.fused_stages().as_slice());
}

#[test]
fn build_without_a_batch_refuses_a_split_by_time_naming_the_remedies() {
    let err = builder(ScheduleKind::OneFOneB, Backward::default())
        .build()
        .err()
        .expect("a split by time needs a batch");
    assert!(
        matches!(
            err,
            Error::Build(BuildError::NeedsBatch { budget: None, .. })
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(".build_with(&batch)") && text.contains(".balance(["),
        "{text}"
    );
    // Settings are checked first: a refused setting is named, not the missing batch.
    let err = builder(ScheduleKind::OneFOneB, Backward::default())
        .micro_batches(0)
        .build()
        .err()
        .expect("refused");
    assert!(err.to_string().contains("micro_batches = 0"), "{err}");
}

#[test]
fn build_with_measures_the_split_and_the_activations() {
    let p = builder(ScheduleKind::OneFOneB, Backward::default())
        .build_with(&batch(0))
        .unwrap();
    let setup = p.setup();
    let costs = setup.costs().expect("measured layer costs");
    assert_eq!(costs.len(), 4);
    assert!(costs.iter().all(|c| c.forward > 0.0 && c.backward > 0.0));
    assert!(setup.measured());
    assert_eq!(setup.partition().stages(), 2);
    assert_eq!(setup.workers().len(), 2);
    // 1F1B stashes p − s micro-batches on stage s; under `ExceptLast` each layer is charged one.
    let stashed: Vec<usize> = setup
        .memory()
        .iter()
        .map(|m| m.stashed_micro_batches)
        .collect();
    assert_eq!(stashed, [2, 1]);
    assert!(setup.memory().iter().all(|m| m.stash > 0 && m.deferred > 0));
    let shown = setup.to_string();
    assert!(
        shown.starts_with("split ") && shown.contains("measured"),
        "{shown}"
    );

    // A given split measures nothing: no costs, no activations; parameters all the same.
    let given = builder(ScheduleKind::OneFOneB, Backward::default())
        .balance([2, 2])
        .build()
        .unwrap();
    assert!(given.setup().costs().is_none());
    assert!(!given.setup().measured());
    let memory = &given.setup().memory()[0];
    assert_eq!((memory.stash, memory.deferred), (0, 0));
    assert_eq!(memory.parameters, 4 * (16 * 16 + 16) * 2);
}
