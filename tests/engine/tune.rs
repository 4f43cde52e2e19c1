//! `pipetrain::commands::tune` end to end on a small MLP: the measured cost table, the search under a
//! memory budget that rules out the fastest configuration (or, when the fastest also needs the
//! least memory, the fastest of those that need more), and the chosen configurations trained:
//! each worker's accounted peak memory (`Pipeline::worker_memory`, the model the budget uses;
//! tests/memory_measured.rs holds it against the allocator) is what the search predicted, under
//! the budget.

use crate::common;

use burn::prelude::*;
use pipetrain::commands::tune::{Calibration, default_space, measure, search};
use pipetrain::{OptimizerConfig, Pipeline};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

fn model() -> Vec<MlpLayer> {
    common::seeded(7, |device| MlpConfig::new(32, 4, 4).init(device))
}

#[test]
fn a_budget_that_rules_out_the_fastest_picks_one_that_trains_under_it() {
    let device = Device::flex();
    let layers = model();
    let batch = synthetic::classification(3, 0, 32, 32, 4, &device);
    let optimizer = OptimizerConfig::adam();
    let mut space = default_space(32, 2, None);
    space.max_micro_batches = 8;
    let quick = Calibration {
        steps: 1,
        repeats: 1,
        passes: 1,
    };
    let table = measure(&layers, &batch, &space, &optimizer, &device, quick).unwrap();
    assert_eq!(table.layers(), 5);
    assert_eq!(
        table.rows.iter().map(|r| r.rows).collect::<Vec<_>>(),
        vec![32, 16, 8, 4, 2]
    );
    let free = search(&table, &space).unwrap();
    assert!(free.infeasible.iter().all(|i| !matches!(
        i.reason,
        pipetrain::commands::tune::Reason::OverBudget { .. }
    )));
    // The fastest candidate a budget can rule out: the fastest, unless it also needs the least
    // memory of all (the measured times decide which is fastest, so either can happen), then the
    // fastest of those that need more.
    let smallest = free.candidates.iter().map(|c| c.peak_memory()).min();
    let fastest = free
        .candidates
        .iter()
        .find(|c| Some(c.peak_memory()) > smallest)
        .expect("candidates of more than one peak")
        .clone();
    // The largest peak below that one's: a budget it does not fit.
    let budget = free
        .candidates
        .iter()
        .map(|c| c.peak_memory())
        .filter(|&p| p < fastest.peak_memory())
        .max()
        .expect("the smallest peak is below it");
    space.memory_budget = Some(budget);
    let ranking = search(&table, &space).unwrap();
    assert!(ranking.candidates.iter().all(|c| c.peak_memory() <= budget));
    // The configuration ruled out is its knobs with its split. The memory-aware split may cut
    // the same knobs another way that fits (which split was fastest unbudgeted is measured, so
    // either can happen): then that cut is ranked, else the knobs are reported over budget.
    match ranking.candidates.iter().find(|c| c.knobs == fastest.knobs) {
        Some(recut) => assert!(
            recut.partition != fastest.partition && recut.peak_memory() <= budget,
            "{:?} ranked with the split the budget rules out",
            fastest.knobs
        ),
        None => {
            let over = ranking
                .infeasible
                .iter()
                .find(|i| i.knobs == fastest.knobs)
                .expect("the ruled-out configuration is reported infeasible");
            let reason = over.reason.to_string();
            assert!(reason.starts_with("over budget on stage "), "{reason}");
            assert!(reason.contains(&format!("budget {budget}")), "{reason}");
        }
    }
    // The chosen one and the next few train, each worker within the predicted bytes.
    for chosen in ranking.candidates.iter().take(4) {
        let mut pipeline = Pipeline::builder()
            .layers(layers.clone())
            .configure(chosen)
            .optimizer(optimizer.clone())
            .build()
            .unwrap();
        let report = pipeline.train_step(&batch).unwrap();
        assert!(report.loss.is_finite());
        // Per rank: interleaved and ZB-V workers hold several chunks.
        let k = chosen.knobs;
        let plan = k.schedule.plan(k.stages, k.micro_batches).unwrap();
        let mut accounted = vec![0u64; k.stages];
        for w in pipeline.worker_memory(&report).unwrap() {
            if w.worker.replica.0 == 0 {
                accounted[plan.rank_of(w.worker.stage).unwrap()] += w.total();
            }
        }
        for (rank, (&got, &predicted)) in accounted.iter().zip(&chosen.memory).enumerate() {
            assert!(
                got <= budget,
                "{k}: rank {rank} accounts {got} > budget {budget}"
            );
            assert!(
                got <= predicted,
                "{k}: rank {rank} accounts {got} > predicted {predicted}"
            );
        }
    }
}
