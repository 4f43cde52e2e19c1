//! `partition_by_time` against brute force: for every small problem, enumerate all C(n−1, p−1)
//! cut sets and check that the optimum, the chosen partition (the documented tie-breaking: least
//! stage times sorted slowest first, then the lexicographically first boundaries) and feasibility
//! under a memory budget all agree.

use pipetrain_partitioner::{LayerCost, Partition, PartitionError, partition_by_time};
use pipetrain_schedules::StageId;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// The brute-force answer for one problem.
#[derive(Debug)]
enum Expected {
    /// The lexicographically first boundaries among feasible partitions whose stage times, sorted
    /// slowest first, are lexicographically least.
    Feasible {
        boundaries: Vec<usize>,
        max_time: f64,
    },
    /// No partition fits; the first fullest stage of the partition chosen the same way by memory.
    OverBudget { stage: usize, needed: u64 },
}

/// Every boundary vector `[0, b₁, …, b_{p−1}, n]`, in lexicographic order.
fn all_boundaries(n: usize, p: usize) -> Vec<Vec<usize>> {
    fn extend(n: usize, p: usize, current: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if current.len() == p {
            let mut full = current.clone();
            full.push(n);
            out.push(full);
            return;
        }
        let last = current[current.len() - 1];
        let remaining = p - current.len(); // stages still to start after `last`'s stage
        for b in last + 1..=n - remaining {
            current.push(b);
            extend(n, p, current, out);
            current.pop();
        }
    }
    let mut out = Vec::new();
    extend(n, p, &mut vec![0], &mut out);
    out
}

fn binomial(n: usize, k: usize) -> usize {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

/// Stage times and memories, summed left to right (independently of the crate's `StageCost`).
fn stages_of(costs: &[LayerCost], boundaries: &[usize]) -> Vec<(f64, u64)> {
    boundaries
        .windows(2)
        .map(|w| {
            let mut time = 0.0;
            let mut memory = 0u64;
            for c in &costs[w[0]..w[1]] {
                time += c.forward + c.backward;
                memory += c.param_bytes + c.activation_bytes;
            }
            (time, memory)
        })
        .collect()
}

/// `values` sorted largest first.
fn sorted_desc<T: PartialOrd>(mut values: Vec<T>) -> Vec<T> {
    values.sort_by(|a, b| b.partial_cmp(a).unwrap());
    values
}

fn brute_force(costs: &[LayerCost], p: usize, budget: Option<u64>) -> Expected {
    let n = costs.len();
    let candidates = all_boundaries(n, p);
    assert_eq!(candidates.len(), binomial(n - 1, p - 1));

    // Candidates come in lexicographic order and only a strictly better one replaces the best,
    // so ties keep the lexicographically first.
    let mut best: Option<(Vec<f64>, &Vec<usize>)> = None;
    let mut least_memory: Option<(Vec<u64>, &Vec<usize>)> = None;
    for boundaries in &candidates {
        let stages = stages_of(costs, boundaries);
        let times = sorted_desc(stages.iter().map(|s| s.0).collect());
        let memories = sorted_desc(stages.iter().map(|s| s.1).collect());
        let fits = budget.is_none_or(|b| memories[0] <= b);
        if least_memory.as_ref().is_none_or(|(m, _)| memories < *m) {
            least_memory = Some((memories, boundaries));
        }
        if fits && best.as_ref().is_none_or(|(t, _)| times < *t) {
            best = Some((times, boundaries));
        }
    }
    match best {
        Some((times, boundaries)) => Expected::Feasible {
            boundaries: boundaries.clone(),
            max_time: times[0],
        },
        None => {
            let (memories, boundaries) = least_memory.unwrap();
            let needed = memories[0];
            let stage = stages_of(costs, boundaries)
                .iter()
                .position(|s| s.1 == needed)
                .unwrap();
            Expected::OverBudget { stage, needed }
        }
    }
}

fn check(costs: &[LayerCost], p: usize, budget: Option<u64>) -> Result<(), TestCaseError> {
    let got = partition_by_time(costs, p, budget);
    match brute_force(costs, p, budget) {
        Expected::Feasible {
            boundaries,
            max_time,
        } => {
            let partition =
                got.map_err(|e| TestCaseError::fail(format!("unexpected error: {e}")))?;
            prop_assert_eq!(partition.stages(), p);
            prop_assert_eq!(partition.layers(), costs.len());
            let stages = partition.stage_costs(costs).unwrap();
            let got_max = stages
                .iter()
                .map(|s| s.time)
                .fold(f64::NEG_INFINITY, f64::max);
            // Exact: the same left-to-right sums, then only comparisons.
            prop_assert_eq!(got_max, max_time);
            if let Some(b) = budget {
                prop_assert!(stages.iter().all(|s| s.memory <= b));
            }
            prop_assert_eq!(partition.boundaries(), &boundaries[..]);
        }
        Expected::OverBudget { stage, needed } => {
            let budget = budget.expect("without a budget every shape is feasible");
            match got {
                Err(PartitionError::OverBudget {
                    stage: got_stage,
                    layers,
                    needed: got_needed,
                    budget: got_budget,
                    short_by,
                }) => {
                    prop_assert_eq!(got_stage, StageId::from(stage));
                    prop_assert_eq!(got_needed, needed);
                    prop_assert_eq!(got_budget, budget);
                    prop_assert_eq!(short_by, needed - budget);
                    let memory: u64 = costs[layers].iter().map(LayerCost::memory).sum();
                    prop_assert_eq!(memory, needed);
                }
                other => prop_assert!(false, "expected OverBudget, got {other:?}"),
            }
        }
    }
    Ok(())
}

fn config() -> Config {
    Config {
        cases: 2000,
        rng_seed: RngSeed::Fixed(0x9195_7ea1),
        failure_persistence: None,
        ..Config::default()
    }
}

/// A layer with integer times in 1..100 (no float rounding; many ties) and small memories.
fn integer_layer() -> impl Strategy<Value = LayerCost> {
    (1u32..100, 1u32..100, 0u64..50, 0u64..50)
        .prop_map(|(f, b, param, act)| LayerCost::new(f.into(), b.into()).with_memory(param, act))
}

/// A layer with arbitrary non-negative finite times, including zero, subnormals and values large
/// enough for stage sums to overflow to infinity.
fn float_layer() -> impl Strategy<Value = LayerCost> {
    let time = prop_oneof![
        4 => 0.0f64..1.0,
        1 => Just(0.0),
        1 => prop::num::f64::POSITIVE
            | prop::num::f64::NORMAL
            | prop::num::f64::SUBNORMAL
            | prop::num::f64::ZERO,
    ];
    (time.clone(), time, 0u64..50, 0u64..50)
        .prop_map(|(f, b, param, act)| LayerCost::new(f, b).with_memory(param, act))
}

/// Layers, a stage count `1 ≤ p ≤ min(n, 5)` and an optional budget up to the total memory.
fn problem(
    layer: impl Strategy<Value = LayerCost>,
) -> impl Strategy<Value = (Vec<LayerCost>, usize, Option<u64>)> {
    prop::collection::vec(layer, 1..=12).prop_flat_map(|costs| {
        let n = costs.len();
        let total: u64 = costs.iter().map(LayerCost::memory).sum();
        let budget = prop_oneof![1 => Just(None), 3 => (0..=total + 1).prop_map(Some)];
        (Just(costs), 1..=n.min(5), budget)
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn integer_costs_match_brute_force((costs, p, budget) in problem(integer_layer())) {
        check(&costs, p, budget)?;
        check(&costs, p, None)?;
    }

    #[test]
    fn float_costs_match_brute_force((costs, p, budget) in problem(float_layer())) {
        check(&costs, p, budget)?;
        check(&costs, p, None)?;
    }

    #[test]
    fn equal_costs_give_even_split(n in 1usize..=12, p in 1usize..=5) {
        prop_assume!(p <= n);
        let partition = partition_by_time(&LayerCost::uniform(n), p, None).unwrap();
        prop_assert_eq!(partition, Partition::even(n, p).unwrap());
    }
}

/// Every shape up to 12 layers × 5 stages, with a few fixed cost patterns, exhaustively.
#[test]
fn every_small_shape() {
    let patterns: [fn(usize) -> f64; 4] = [
        |i| (i % 3) as f64,
        |i| ((i * 7919) % 13 + 1) as f64,
        |i| if i == 5 { 40.0 } else { 1.0 },
        |i| 0.1 * i as f64,
    ];
    for pattern in patterns {
        for n in 1..=12 {
            let costs: Vec<LayerCost> = (0..n)
                .map(|i| LayerCost::new(pattern(i), 0.5 * pattern(i)).with_memory(i as u64 % 4, 1))
                .collect();
            for p in 1..=n.min(5) {
                for budget in [None, Some(2), Some(5), Some(9)] {
                    check(&costs, p, budget).unwrap();
                }
            }
        }
    }
}
