//! [`partition_by_time`]: the optimal contiguous min-max partition, by dynamic programming.
//!
//! ## Design
//!
//! A pipeline runs at the pace of its slowest stage, so the best partition of `n` layers into `p`
//! stages minimises the largest stage time. Stages are contiguous, so this is the classic linear
//! partition problem, solved exactly by dynamic programming over suffixes of the layers:
//!
//! ```text
//! best[1][i] = time(i..n)                                            if i..n fits the budget
//! best[k][i] = min over j in i+1 ..= n-(k-1) with i..j fitting the budget
//!                  of max(time(i..j), best[k-1][j])
//! optimum    = best[p][0]
//! ```
//!
//! Many partitions usually share the optimum (every stage but the slowest has slack). To pick the
//! most balanced of them, `best[k][i]` holds not just the largest stage time of the best split of
//! layers `i..n` into `k` stages but all `k` of its stage times, sorted slowest first, and `min`
//! compares those vectors lexicographically ("leximax"): the slowest stage as fast as possible,
//! then the second slowest, and so on. Adding a common stage to two splits keeps their order, so
//! the recurrence stays exact. Splits with the same stage times go to the lexicographically
//! smallest boundaries: walking forward, each stage ends at the first boundary that completes a
//! best split.
//!
//! That is `O(p²·n²)` time and `O(n² + p²·n)` memory — well under a second for a few hundred
//! layers and tens of stages. Stage times are summed left to right exactly as [`StageCost::of`]
//! does and then only compared, never combined, so the optimum is *exactly* the largest stage
//! time of the returned partition: no epsilon anywhere.

use std::ops::Range;

use pipetrain_schedules::StageId;

use crate::cost::{LayerCost, StageCost};
use crate::error::{PartitionError, Result};
use crate::partition::{Partition, check_shape};

/// The contiguous partition of the layers into exactly `stages` non-empty stages that minimises
/// the largest stage time ([`LayerCost::time`] summed over a stage), subject, when
/// `memory_budget` is given, to every stage needing at most that many bytes
/// ([`StageCost::memory`]).
///
/// **Tie-breaking.** Among all optimal partitions, the most balanced: the one whose stage times,
/// sorted slowest first, are lexicographically least — after the slowest stage, the second
/// slowest is as fast as possible, and so on. Partitions with the same stage times in a different
/// order go to the lexicographically smallest stage boundaries: from the first stage on, each
/// stage takes as few layers as it can. On equal costs this is [`Partition::even`]. The result
/// depends only on the inputs.
///
/// **Errors.** [`NoStages`](PartitionError::NoStages), [`NoLayers`](PartitionError::NoLayers) and
/// [`MoreStagesThanLayers`](PartitionError::MoreStagesThanLayers) for an impossible shape;
/// [`InvalidCost`](PartitionError::InvalidCost) naming the first layer whose forward or backward
/// time is NaN, infinite or negative; [`OverBudget`](PartitionError::OverBudget) when no
/// partition fits the budget. That error describes the partition that minimises the largest
/// stage memory — as close as any partition gets — chosen among several by the same rules with
/// memory in place of time: its first fullest stage, the bytes that stage needs, and
/// `short_by = needed − budget`, the least the budget must grow for `stages` stages to fit.
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
    partition_by_time_with(costs, stages, memory_budget, |_| 0)
}

/// [`partition_by_time`] where a stage of layers `i..j` needs, beyond its layers' summed
/// [`LayerCost::memory`], `stage_bytes(i..j)` bytes more: what depends on where the stage is
/// cut rather than on each layer alone (its received input, the one layer's largest scratch).
/// The budget, and [`PartitionError::OverBudget`]'s `needed`, count both.
///
/// ```
/// use pipetrain_partitioner::{partition_by_time_with, LayerCost, PartitionError};
///
/// let costs = vec![LayerCost::new(1.0, 0.0).with_memory(100, 0); 4];
/// // A stage that does not begin the model holds its received input, 50 bytes.
/// let input = |r: std::ops::Range<usize>| if r.start > 0 { 50 } else { 0 };
/// assert_eq!(partition_by_time_with(&costs, 2, Some(250), input)?.to_string(), "[0..2 | 2..4]");
/// let err = partition_by_time_with(&costs, 2, Some(249), input).unwrap_err();
/// assert!(matches!(err, PartitionError::OverBudget { needed: 250, .. }));
/// # Ok::<(), PartitionError>(())
/// ```
pub fn partition_by_time_with(
    costs: &[LayerCost],
    stages: usize,
    memory_budget: Option<u64>,
    stage_bytes: impl Fn(Range<usize>) -> u64,
) -> Result<Partition> {
    let layers = costs.len();
    check_shape(layers, stages)?;
    for (layer, cost) in costs.iter().enumerate() {
        cost.check(layer)?;
    }
    let table = StageCosts::new(costs);
    let memory = |i, j| table.get(i, j).memory.saturating_add(stage_bytes(i..j));

    if let Some(budget) = memory_budget {
        // Some split fits iff the least achievable largest stage memory does.
        let (memories, boundaries) = leximax(layers, stages, memory, |_, _| true)
            .expect("an unconstrained shape-checked split always exists");
        let needed = memories[0];
        if needed > budget {
            return Err(over_budget(memory, &boundaries, needed, budget));
        }
    }

    let fits = |i, j| memory_budget.is_none_or(|budget| memory(i, j) <= budget);
    let (_, boundaries) = leximax(layers, stages, |i, j| table.get(i, j).time, fits)
        .expect("the memory check above guarantees a feasible split");
    Ok(Partition::from_boundaries(boundaries))
}

/// The [`PartitionError::OverBudget`] for the min-max-memory split `boundaries`.
fn over_budget(
    memory: impl Fn(usize, usize) -> u64,
    boundaries: &[usize],
    needed: u64,
    budget: u64,
) -> PartitionError {
    let stage = boundaries
        .windows(2)
        .position(|w| memory(w[0], w[1]) == needed)
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

/// Among the splits of layers `0..n` into `p` contiguous non-empty stages `i..j` that are all
/// `allowed`, the one whose stage costs, sorted largest first, are lexicographically least, and
/// of those the one with the lexicographically smallest boundaries. Returns its sorted stage
/// costs and its `p + 1` boundaries, or `None` if no allowed split exists.
/// Requires `1 ≤ p ≤ n` and costs that are totally ordered (no NaN).
fn leximax<T: Copy + PartialOrd>(
    n: usize,
    p: usize,
    cost: impl Fn(usize, usize) -> T,
    allowed: impl Fn(usize, usize) -> bool,
) -> Option<(Vec<T>, Vec<usize>)> {
    // best[k][i]: the sorted stage costs of the best allowed split of layers i..n into k stages
    // (`None` if there is none, or fewer than k layers). best[0] is unused.
    let mut best: Vec<Vec<Option<Vec<T>>>> = vec![Vec::new()];
    best.push(
        (0..=n)
            .map(|i| (i < n && allowed(i, n)).then(|| vec![cost(i, n)]))
            .collect(),
    );
    for k in 2..=p {
        let rest = &best[k - 1];
        let row = (0..=n)
            .map(|i| {
                // The first stage is i..j; the k - 1 stages after it need n - j ≥ k - 1 layers.
                (i + 1..=n.saturating_sub(k - 1))
                    .filter(|&j| allowed(i, j))
                    .filter_map(|j| Some(with_stage(rest[j].as_ref()?, cost(i, j))))
                    // Keep the first of equals: which one does not matter, only its value.
                    .reduce(|least, candidate| if candidate < least { candidate } else { least })
            })
            .collect();
        best.push(row);
    }

    // Walk forward: end each stage at the first boundary that completes a best split. Inserting
    // a stage is injective, so a best split's rest is itself a best split: `==` suffices.
    let optimum = best[p][0].clone()?;
    let mut boundaries = Vec::with_capacity(p + 1);
    boundaries.push(0);
    let mut i = 0;
    for k in (2..=p).rev() {
        let target = best[k][i].as_ref().expect("on a best split's path");
        let j = (i + 1..=n - (k - 1))
            .find(|&j| {
                allowed(i, j)
                    && best[k - 1][j]
                        .as_ref()
                        .is_some_and(|rest| with_stage(rest, cost(i, j)) == *target)
            })
            .expect("best[k][i] was achieved by some first stage");
        boundaries.push(j);
        i = j;
    }
    boundaries.push(n);
    Some((optimum, boundaries))
}

/// `sorted` (largest first) with `stage` inserted in its place.
fn with_stage<T: Copy + PartialOrd>(sorted: &[T], stage: T) -> Vec<T> {
    let at = sorted.partition_point(|&c| c >= stage);
    let mut out = Vec::with_capacity(sorted.len() + 1);
    out.extend_from_slice(&sorted[..at]);
    out.push(stage);
    out.extend_from_slice(&sorted[at..]);
    out
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
    fn ties_go_to_the_most_balanced_split() {
        // Uniform costs: the same split as Partition::even, not e.g. [1, 3, 3, 3] for (10, 4),
        // which has the same slowest stage.
        for (n, p) in [(8, 3), (10, 4), (7, 2), (5, 5)] {
            let partition = partition_by_time(&LayerCost::uniform(n), p, None).unwrap();
            assert_eq!(partition, Partition::even(n, p).unwrap(), "n={n} p={p}");
        }
        // Slowest stage 6 either way and the same stage times: the earlier boundary wins.
        let partition = partition_by_time(&times(&[2.0, 2.0, 2.0, 4.0]), 2, None).unwrap();
        assert_eq!(partition.balance(), vec![2, 2]);
        // All-zero costs: every split is equally balanced; the first stages take one layer each.
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
        assert_eq!(
            partition_by_time(&costs, 2, None).unwrap().balance(),
            vec![2, 2]
        );
        assert_eq!(
            partition_by_time(&costs, 2, Some(100)).unwrap().balance(),
            vec![1, 3]
        );
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
        assert!(
            msg.contains("stage 1") && msg.contains("75") && msg.contains("short by 15"),
            "{msg}"
        );
    }
}
