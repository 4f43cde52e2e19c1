//! [`partition_by_time`]: the optimal contiguous min-max partition, by dynamic programming.
//!
//! ## Design
//!
//! A pipeline runs at the pace of its slowest stage, so the best partition of `n` layers into `p`
//! stages minimises the largest stage time. Stages are contiguous, so the problem is the classic
//! linear partition problem, solved exactly over suffixes:
//!
//! ```text
//! best[1][i] = cost(i..n)                                      if i..n fits the budget
//! best[k][i] = min over j in i+1 ..= n-(k-1), i..j fits the budget,
//!                  of max(cost(i..j), best[k-1][j])
//! answer     = best[p][0]
//! ```
//!
//! That is `O(p·n²)` time and `O(n²)` memory for the table of stage costs, plenty for models of a
//! few hundred layers. Stage times are summed left to right exactly as [`StageCost::of`] does, and
//! `max` and `<` never round, so the optimum is *exactly* the largest stage time of the returned
//! partition — no epsilon anywhere.

use pipetrain_schedules::StageId;

use crate::cost::{LayerCost, StageCost};
use crate::error::{PartitionError, Result};
use crate::partition::{Partition, check_shape};

/// The contiguous partition of the layers into exactly `stages` non-empty stages that minimises
/// the largest stage time ([`LayerCost::time`] summed over a stage), subject, when
/// `memory_budget` is given, to every stage needing at most that many bytes
/// ([`StageCost::memory`]).
///
/// **Tie-breaking.** Among all optimal partitions, the one whose stage boundaries are
/// lexicographically smallest: from the first stage on, each stage takes as few layers as it can
/// while an optimal completion remains. Earlier stages thus come out the lighter ones — under 1F1B
/// stage `s` of `p` keeps up to `p − s` micro-batches in flight, so the first stages are where
/// slack in time (and memory) helps most. The result depends only on the inputs.
///
/// **Errors.** [`NoStages`](PartitionError::NoStages), [`NoLayers`](PartitionError::NoLayers) and
/// [`MoreStagesThanLayers`](PartitionError::MoreStagesThanLayers) for an impossible shape;
/// [`InvalidCost`](PartitionError::InvalidCost) naming the first layer whose forward or backward
/// time is NaN, infinite or negative; [`OverBudget`](PartitionError::OverBudget) when no
/// partition fits the budget. That error describes the partition that minimises the largest
/// stage memory (tie-broken as above), which is as close as any partition gets: its first fullest
/// stage, the bytes that stage needs, and `short_by = needed − budget`, the least the budget must
/// grow for `stages` stages to fit.
///
/// ```
/// use pipetrain_partitioner::{partition_by_time, LayerCost, PartitionError};
///
/// // Layer times 4, 1, 1, 1, 1: the best 2-stage split is 4 | 1+1+1+1, slowest stage 4.
/// let costs: Vec<LayerCost> =
///     [4.0, 1.0, 1.0, 1.0, 1.0].iter().map(|&t| LayerCost::new(t, 0.0)).collect();
/// assert_eq!(partition_by_time(&costs, 2, None)?.to_string(), "[0..1 | 1..5]");
///
/// // With 100 bytes per layer and a 300-byte budget, a stage may hold 3 layers at most.
/// let costs: Vec<LayerCost> = costs.iter().map(|c| c.with_memory(100, 0)).collect();
/// assert_eq!(partition_by_time(&costs, 2, Some(300))?.to_string(), "[0..2 | 2..5]");
///
/// // 5 layers of 100 bytes cannot fit 2 stages of 200 bytes.
/// let err = partition_by_time(&costs, 2, Some(200)).unwrap_err();
/// assert!(matches!(err, PartitionError::OverBudget { needed: 300, short_by: 100, .. }));
/// # Ok::<(), PartitionError>(())
/// ```
pub fn partition_by_time(
    costs: &[LayerCost],
    stages: usize,
    memory_budget: Option<u64>,
) -> Result<Partition> {
    let layers = costs.len();
    check_shape(layers, stages)?;
    for (layer, cost) in costs.iter().enumerate() {
        cost.check(layer)?;
    }
    let table = StageCosts::new(costs);

    if let Some(budget) = memory_budget {
        // Feasible iff the least achievable largest stage memory fits; the partition achieving it
        // is also the one the error describes.
        let (needed, boundaries) = min_max(layers, stages, |i, j| table.get(i, j).memory, |_, _| true)
            .expect("an unconstrained shape-checked partition always exists");
        if needed > budget {
            return Err(over_budget(&table, &boundaries, needed, budget));
        }
    }

    let fits = |i, j| memory_budget.is_none_or(|budget| table.get(i, j).memory <= budget);
    let (_, boundaries) = min_max(layers, stages, |i, j| table.get(i, j).time, fits)
        .expect("the memory check above guarantees a feasible partition");
    Ok(Partition::from_boundaries(boundaries))
}

/// The [`PartitionError::OverBudget`] for the min-max-memory partition `boundaries`.
fn over_budget(table: &StageCosts, boundaries: &[usize], needed: u64, budget: u64) -> PartitionError {
    let stage = boundaries
        .windows(2)
        .position(|w| table.get(w[0], w[1]).memory == needed)
        .expect("the largest stage memory is some stage's memory");
    PartitionError::OverBudget {
        stage: StageId::from(stage),
        layers: boundaries[stage]..boundaries[stage + 1],
        needed,
        budget,
        short_by: needed - budget,
    }
}

/// The cost of every contiguous run of layers `i..j`, each summed left to right.
struct StageCosts {
    /// `rows[i][j - i - 1]` is the cost of layers `i..j`.
    rows: Vec<Vec<StageCost>>,
}

impl StageCosts {
    fn new(costs: &[LayerCost]) -> Self {
        let rows = (0..costs.len())
            .map(|i| {
                costs[i..]
                    .iter()
                    .scan(StageCost::default(), |acc, layer| {
                        *acc = acc.push(layer);
                        Some(*acc)
                    })
                    .collect()
            })
            .collect();
        Self { rows }
    }

    /// The cost of layers `i..j` (`i < j`).
    fn get(&self, i: usize, j: usize) -> StageCost {
        self.rows[i][j - i - 1]
    }
}

/// Splits layers `0..n` into `p` contiguous non-empty stages, using only stages `i..j` for which
/// `allowed(i, j)`, so as to minimise the largest `cost(i, j)`. Returns that least largest cost
/// and the lexicographically smallest boundaries achieving it, or `None` if no allowed partition
/// exists. Requires `1 ≤ p ≤ n` and a `cost` without NaN.
fn min_max<T: Copy + PartialOrd>(
    n: usize,
    p: usize,
    cost: impl Fn(usize, usize) -> T,
    allowed: impl Fn(usize, usize) -> bool,
) -> Option<(T, Vec<usize>)> {
    let max = |a: T, b: T| if a < b { b } else { a };
    // best[k][i]: the least largest stage cost over allowed splits of layers i..n into k stages.
    let mut best: Vec<Vec<Option<T>>> = vec![vec![None; n + 1]; p + 1];
    for i in 0..n {
        if allowed(i, n) {
            best[1][i] = Some(cost(i, n));
        }
    }
    for k in 2..=p {
        for i in 0..=n - k {
            let mut least: Option<T> = None;
            // The first stage is i..j; the k - 1 stages after it need n - j ≥ k - 1 layers.
            for j in i + 1..=n - (k - 1) {
                let Some(rest) = best[k - 1][j] else { continue };
                if !allowed(i, j) {
                    continue;
                }
                let candidate = max(cost(i, j), rest);
                if least.is_none_or(|least| candidate < least) {
                    least = Some(candidate);
                }
            }
            best[k][i] = least;
        }
    }

    // Walk forward: each stage ends at the first boundary that still allows an optimal rest.
    // This yields the lexicographically smallest optimal boundaries.
    let optimum = best[p][0]?;
    let mut boundaries = Vec::with_capacity(p + 1);
    boundaries.push(0);
    let mut i = 0;
    for k in (2..=p).rev() {
        let j = (i + 1..=n - (k - 1))
            .find(|&j| {
                allowed(i, j)
                    && cost(i, j) <= optimum
                    && best[k - 1][j].is_some_and(|rest| rest <= optimum)
            })
            .expect("best[k][i] <= optimum, so some first stage completes an optimal split");
        boundaries.push(j);
        i = j;
    }
    boundaries.push(n);
    Some((optimum, boundaries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(ts: &[f64]) -> Vec<LayerCost> {
        ts.iter().map(|&t| LayerCost::new(t, 0.0)).collect()
    }

    #[test]
    fn one_stage_takes_everything() {
        let partition = partition_by_time(&times(&[1.0, 2.0, 3.0]), 1, None).unwrap();
        assert_eq!(partition.balance(), vec![3]);
    }

    #[test]
    fn as_many_stages_as_layers() {
        let partition = partition_by_time(&times(&[5.0, 1.0, 9.0]), 3, None).unwrap();
        assert_eq!(partition.balance(), vec![1, 1, 1]);
    }

    #[test]
    fn ties_prefer_lighter_early_stages() {
        // Uniform costs: the same split as Partition::even.
        for (n, p) in [(8, 3), (10, 4), (7, 2), (5, 5)] {
            let partition = partition_by_time(&LayerCost::uniform(n), p, None).unwrap();
            assert_eq!(partition, Partition::even(n, p).unwrap(), "n={n} p={p}");
        }
        // All-zero costs: every split is optimal; the first stages take one layer each.
        let partition = partition_by_time(&times(&[0.0; 6]), 3, None).unwrap();
        assert_eq!(partition.balance(), vec![1, 1, 4]);
    }

    #[test]
    fn budget_reshapes_the_split() {
        // Time favours [0..2 | 2..4] but layer 0 and 1 together exceed the budget.
        let costs = vec![
            LayerCost::new(1.0, 0.0).with_memory(60, 0),
            LayerCost::new(1.0, 0.0).with_memory(60, 0),
            LayerCost::new(1.0, 0.0).with_memory(10, 0),
            LayerCost::new(1.0, 0.0).with_memory(10, 0),
        ];
        assert_eq!(partition_by_time(&costs, 2, None).unwrap().balance(), vec![2, 2]);
        assert_eq!(partition_by_time(&costs, 2, Some(100)).unwrap().balance(), vec![1, 3]);
    }

    #[test]
    fn over_budget_names_the_fullest_stage() {
        let costs: Vec<LayerCost> = [10, 10, 70, 10]
            .iter()
            .map(|&m| LayerCost::new(1.0, 1.0).with_memory(m, 5))
            .collect();
        // Layer 2 alone needs 75 bytes: no split into any number of stages fits 60.
        let err = partition_by_time(&costs, 3, Some(60)).unwrap_err();
        assert_eq!(
            err,
            PartitionError::OverBudget {
                stage: StageId(1),
                layers: 2..3,
                needed: 75,
                budget: 60,
                short_by: 15,
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("stage 1") && msg.contains("75") && msg.contains("short by 15"), "{msg}");
    }
}
