//! `.memory_budget(bytes)`: the split the budget forces, the error when nothing fits, the
//! per-worker accounting `Pipeline::worker_memory` reports and the setup predicts.
//!
//! The model is chosen so that the numbers are exact: MLP with input 64, width 8, 3 hidden
//! blocks, 64 classes; batch 64 in 8 micro-batches of 8 rows, GPipe (8 micro-batches stashed on
//! every stage), remat never, SGD (no state), the fused backward. Per layer (parameters × 4
//! bytes × 2 for the gradient, + output bytes × 8 stashed micro-batches; fc0–fc2 are a `Linear`
//! and a ReLU, whose output before the ReLU burn's autodiff graph keeps too: twice theirs):
//!
//! ```text
//! layer   params  weights+grads  output/mb  stash   total
//! fc0     520     4160           256        4096     8256
//! fc1     72      576            256        4096     4672
//! fc2     72      576            256        4096     4672
//! head    576     4608           2048       16384   20992
//! ```
//! A stage that does not begin the model also holds its received input for each stashed
//! micro-batch (8 × 256 B after fc0–fc2), and the budget keeps 1/32 headroom over the whole
//! (`pipetrain::memory::with_headroom`). Splits into 2 stages (largest stage, with both):
//! [2, 2] 28578 (the fastest: it is what balance by time picks), [3, 1] 23760 (the head and
//! its inputs: (20992 + 2048) × 33/32), [1, 3] 33396. So 24000 bytes forces [3, 1] and 20000
//! fits nothing: the least budget is 23760, the head alone.

use crate::common;

use burn::prelude::*;
use pipetrain::BuildError;
use pipetrain::memory::Bytes;
use pipetrain::{Backward, Error, OptimizerConfig, Pipeline, Remat, ScheduleKind};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

fn model() -> Vec<MlpLayer> {
    common::seeded(7, |device| {
        MlpConfig::new(8, 3, 64).with_input(64).init(device)
    })
}

/// The fused backward keeps the hand-checked numbers below free of the split backward's deferred
/// weight-gradient inputs (tested on their own in `the_split_backward_s_deferred_inputs_count`).
fn pipeline(budget: Option<u64>, remat: Remat, stages: usize) -> Result<Pipeline<MlpLayer>, Error> {
    pipeline_with(budget, remat, stages, Backward::Fused)
}

fn pipeline_with(
    budget: Option<u64>,
    remat: Remat,
    stages: usize,
    backward: Backward,
) -> Result<Pipeline<MlpLayer>, Error> {
    let mut builder = Pipeline::builder()
        .layers(model())
        .stages(stages)
        .micro_batches(8)
        .schedule(ScheduleKind::GPipe)
        .remat(remat)
        .backward(backward)
        .optimizer(OptimizerConfig::sgd());
    if let Some(bytes) = budget {
        builder = builder.memory_budget(bytes);
    }
    // The split is measured on the batch the tests train on.
    builder.build_with(&batch())
}

fn batch() -> pipetrain::Batch {
    synthetic::classification(3, 0, 64, 64, 64, &Device::flex())
}

#[test]
fn a_budget_forces_another_split_than_time_alone() {
    let mut fastest = pipeline(None, Remat::Never, 2).expect("a valid configuration");
    fastest.train_step(&batch()).expect("a step");
    assert_eq!(fastest.partition().balance(), vec![2, 2]);

    let mut budgeted = pipeline(Some(24_000), Remat::Never, 2).expect("a split within the budget");
    let report = budgeted
        .train_step(&batch())
        .expect("a step within the budget");
    assert_eq!(budgeted.partition().balance(), vec![3, 1]);
    // The accounting the budget used is what the workers report after the step.
    let memory = budgeted.worker_memory(&report).expect("worker memory");
    let totals: Vec<u64> = memory.iter().map(|w| w.total()).collect();
    assert_eq!(memory[0].stashed_micro_batches, 8);
    // The head's output for 8 micro-batches, and stage 1's input (8 rows × 8 floats) for each:
    // a received copy the graph keeps, which the budget counts per stage (stage 0's input is
    // rows of the caller's batch, not the engine's).
    assert_eq!(memory[1].stash, 16_384 + 8 * 256);
    assert_eq!(memory[1].parameters, 576 * 4);
    // SGD without momentum keeps no per-parameter state: its serialized record is a header per
    // parameter tensor (2 per layer), well under 128 bytes each.
    assert!(memory[0].optimizer_state <= 6 * 128, "{memory:?}");
    assert!(memory[1].optimizer_state <= 2 * 128, "{memory:?}");
    // Beside that record, the totals are the table's stage sums, plus stage 1's inputs, plus
    // the gradients one micro-batch's backward holds on the autodiff path (the fused
    // backward: the largest layer's input and output, in fp32, 8 rows), which the budget
    // leaves to its headroom.
    assert_eq!(memory[0].backward, 8 * (64 + 8) * 4, "{memory:?}");
    assert_eq!(memory[1].backward, 8 * (64 + 8) * 4, "{memory:?}");
    let budgeted = |w: &pipetrain::memory::WorkerMemory| w.total() - w.optimizer_state - w.backward;
    assert_eq!(budgeted(&memory[0]), 17_600, "{memory:?}");
    assert_eq!(budgeted(&memory[1]), 20_992 + 8 * 256, "{memory:?}");
    assert!(totals.iter().zip(&memory).all(|(t, w)| *t >= w.backward));
}

#[test]
fn an_infeasible_budget_names_the_least_one_and_the_remedies() {
    let err = pipeline(Some(20_000), Remat::Never, 2)
        .err()
        .expect("nothing fits 20000 bytes");
    let msg = err.to_string();
    let Error::Build(BuildError::MemoryBudget {
        smallest_bytes,
        budget,
        stages,
        ref layers,
        ..
    }) = err
    else {
        panic!("a MemoryBudget error expected, got {msg}");
    };
    assert_eq!((smallest_bytes, budget, stages), (23_760, Bytes(20_000), 2));
    assert_eq!(*layers, 3..4, "{msg}");
    for part in ["19.53 KiB", ".memory_budget(23760)", "Remat::Always"] {
        assert!(msg.contains(part), "`{part}` missing from: {msg}");
    }
    // The head alone needs 23760 bytes: no split helps, and `.stages(3)` is not offered (it
    // was, and came back to this error).
    assert!(!msg.contains(".stages("), "{msg}");
    // Under GPipe all m micro-batches are stashed: smaller ones hold as many rows in all.
    assert!(!msg.contains(".micro_batches("), "{msg}");
}

#[test]
fn re_materialization_is_a_remedy_that_works() {
    // With remat each layer is charged one micro-batch: the head needs 4608 + 2048 bytes.
    let mut p = pipeline(Some(20_000), Remat::Always, 2).expect("fits with re-materialization");
    p.train_step(&batch()).expect("a step");
    assert_eq!(p.stages(), 2);
}

#[test]
fn one_stage_must_hold_the_whole_model() {
    // Sum of the per-layer totals, 8256 + 4672 + 4672 + 20992, and 1/32 headroom.
    let err = pipeline(Some(38_000), Remat::Never, 1)
        .err()
        .expect("the whole model needs 39798 bytes");
    assert!(
        matches!(
            err,
            Error::Build(BuildError::MemoryBudget {
                smallest_bytes: 39_798,
                ..
            })
        ),
        "{err}"
    );
    let mut p = pipeline(Some(39_798), Remat::Never, 1).expect("exactly enough");
    p.train_step(&batch()).expect("a step");
}

#[test]
fn a_budget_with_a_fixed_balance_or_zero_bytes_is_refused() {
    let err = Pipeline::builder()
        .layers(model())
        .balance([2, 2])
        .memory_budget(1 << 20)
        .build()
        .err()
        .expect("balance and budget together are refused");
    // Either one alone (a stage count, offered before, kept both).
    let msg = err.to_string();
    assert!(msg.contains("drop memory budget or drop balance"), "{msg}");
    let err = Pipeline::builder()
        .layers(model())
        .memory_budget(0)
        .build()
        .err()
        .expect("a zero budget is refused");
    assert!(err.to_string().contains("0 bytes"), "{err}");
}

#[test]
fn a_split_is_measured_on_a_batch_of_any_size() {
    // 5 rows split into neither 8 micro-batches nor fewer: the layers are measured on all 5.
    let small = synthetic::classification(3, 1, 5, 64, 64, &Device::flex());
    let mut p = Pipeline::builder()
        .layers(model())
        .stages(2)
        .micro_batches(8)
        .schedule(ScheduleKind::GPipe)
        .remat(Remat::Never)
        .backward(Backward::Fused)
        .memory_budget(24_000)
        .build_with(&small)
        .expect("measured on 5 rows");
    let out = p.forward(small.inputs).expect("inference on 5 rows");
    assert_eq!(out.dims(), vec![5, 64]);
    assert_eq!(p.partition().stages(), 2);
}

#[test]
fn build_without_a_batch_names_the_remedy() {
    let err = Pipeline::builder()
        .layers(model())
        .stages(2)
        .memory_budget(22_000)
        .build()
        .err()
        .expect("a budget is measured on a batch");
    assert!(err.to_string().contains(".build_with(&batch)"), "{err}");
}

/// The setup predicts, before any step, what the workers report after one: the budget's
/// accounting, stage by stage (all but the optimizer's serialized record, which SGD keeps
/// none of before it steps).
#[test]
fn the_setup_predicts_the_memory_a_step_reports() {
    for backward in [Backward::Fused, Backward::default()] {
        let mut p = pipeline_with(None, Remat::Never, 2, backward).expect("a valid configuration");
        let predicted = p.setup().memory().to_vec();
        assert!(p.setup().measured());
        let report = p.train_step(&batch()).expect("a step");
        let measured = p.worker_memory(&report).expect("worker memory");
        for (p, m) in predicted.iter().zip(&measured) {
            assert_eq!(
                (
                    p.worker,
                    p.parameters,
                    p.gradients,
                    p.stashed_micro_batches,
                    p.stash,
                    p.deferred
                ),
                (
                    m.worker,
                    m.parameters,
                    m.gradients,
                    m.stashed_micro_batches,
                    m.stash,
                    m.deferred
                ),
                "{backward:?}: predicted {predicted:?}, measured {measured:?}"
            );
            assert_eq!(p.optimizer_state, 0);
        }
    }
}

/// With the split backward (the default) each dense layer also holds its input and
/// pre-activation gradient for every micro-batch of the step until its `W`: the budget counts
/// them, so the budget that fits the fused backward's [3, 1] does not fit. The head's stage
/// holds the larger of its stash (16 384 B) and its deferred bytes (8 × 8 × 4 × (8 + 64) =
/// 18 432 B), the weight gradients waiting for the step's end, and `W`'s copy of its output
/// gradients stacked over the 8 micro-batches (8 × 2 048 B) with its received inputs: the
/// error names the least budget, 47 586 B, and a weight-gradient group of one micro-batch
/// (no stack to copy), which fits 26 136 B. What the workers report after a step is what the
/// budget counted, within it.
#[test]
fn the_split_backward_s_deferred_inputs_count() {
    let split = Backward::default();
    let err = pipeline_with(Some(22_000), Remat::Never, 2, split)
        .err()
        .expect("over the budget");
    assert!(
        err.to_string().contains(".memory_budget(47586)")
            && err
                .to_string()
                .contains("weight_group: 1 }) and .memory_budget(26136)"),
        "the least budget is named: {err}"
    );

    // Without a budget: the deferred bytes a step measures are the per-layer model's.
    let mut p = pipeline_with(None, Remat::Never, 2, split).expect("a valid configuration");
    let report = p.train_step(&batch()).expect("a step");
    let memory = p.worker_memory(&report).expect("worker memory");
    // 8 rows per micro-batch × 8 micro-batches; stage 0 = layers 64→8, 8→8 (input + output
    // per layer; fc0's input, rows of the caller's batch, is held too), stage 1 = 8→8, 8→64.
    let rows = 8 * 8 * 4;
    assert_eq!(
        report.workers[0].peak_deferred_bytes as u64,
        rows * ((64 + 8) + (8 + 8)),
        "{memory:?}"
    );
    assert_eq!(
        memory[0].deferred,
        rows * ((64 + 8) + (8 + 8)),
        "{memory:?}"
    );
    assert_eq!(
        memory[1].deferred,
        rows * ((8 + 8) + (8 + 64)),
        "{memory:?}"
    );

    let one = Backward::Split { weight_group: 1 };
    let mut p = pipeline_with(Some(26_136), Remat::Never, 2, one).expect("within the budget");
    let report = p.train_step(&batch()).expect("within the budget");
    let memory = p.worker_memory(&report).expect("worker memory");
    // Stage 1's received inputs (8 micro-batches × 256 B) in both.
    assert!(memory.iter().all(|w| w.total() <= 26_136), "{memory:?}");
}

/// ZeRO-1 and up charge each replica its share of the optimizer state (issue 50): under Adam
/// (two parameter-sized slots) on 2 replicas the least budget of the 2-stage split falls by
/// half the head's state, 576 parameters × 4 bytes × 2 slots / 2 = 2304 bytes, with the
/// headroom (× 33/32) on it.
#[test]
fn zero_charges_each_replica_its_share_of_the_optimizer_state() {
    let least = |zero: u8| {
        let err = Pipeline::builder()
            .layers(model())
            .stages(2)
            .replicas(2)
            .micro_batches(4)
            .schedule(ScheduleKind::GPipe)
            .remat(Remat::Never)
            .backward(Backward::Fused)
            .optimizer(OptimizerConfig::adam())
            .zero(zero)
            .memory_budget(1000)
            .build_with(&synthetic::classification(
                7,
                0,
                64,
                64,
                64,
                &Device::flex(),
            ))
            .err()
            .expect("nothing fits 1000 bytes");
        let msg = err.to_string();
        let Error::Build(BuildError::MemoryBudget { smallest_bytes, .. }) = err else {
            panic!("a MemoryBudget error expected, got {msg}");
        };
        smallest_bytes
    };
    let (plain, zero) = (least(0), least(1));
    assert_eq!(plain - zero, 2304 * 33 / 32, "{plain} vs {zero}");
    assert_eq!(least(3), zero);
}

/// ZeRO-3 under a budget (issue 50): with the split backward whose weight gradients wait for
/// the step's end, each replica holds its share of a stage's values beside the whole gradients
/// (the stage reshards before they are made), so the least budget falls below ZeRO-1's, and a
/// budget between the two names `.zero(3)` among its remedies, which then builds and trains.
#[test]
fn zero_three_lowers_the_least_budget_and_is_offered_as_a_remedy() {
    let builder = |zero: u8, budget: u64| {
        Pipeline::builder()
            .layers(model())
            .stages(2)
            .replicas(2)
            .micro_batches(4)
            .schedule(ScheduleKind::GPipe)
            .remat(Remat::Never)
            .optimizer(OptimizerConfig::adam())
            .zero(zero)
            .memory_budget(budget)
    };
    let least = |zero: u8| match builder(zero, 1000).build_with(&batch()) {
        Err(Error::Build(BuildError::MemoryBudget { smallest_bytes, .. })) => smallest_bytes,
        other => panic!("a MemoryBudget error expected, got {:?}", other.err()),
    };
    let (one, three) = (least(1), least(3));
    assert!(three < one, "level 1 needs {one} B, level 3 {three} B");
    let err = builder(1, three)
        .build_with(&batch())
        .err()
        .expect("level 1 does not fit level 3's least budget");
    let msg = err.to_string();
    assert!(msg.contains(".zero(3)"), "{msg}");
    let mut p = builder(3, three)
        .build_with(&batch())
        .expect("the remedy fits");
    p.train_step(&batch()).expect("a step");
}
