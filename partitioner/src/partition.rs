//! [`Partition`]: which contiguous range of layers each stage runs.

use std::fmt;
use std::ops::Range;

use pipetrain_schedules::StageId;
use serde::{Deserialize, Serialize};

use crate::cost::{LayerCost, StageCost};
use crate::error::{PartitionError, Result};

/// Contiguous, non-empty layer ranges, one per stage, covering `0..layers` in order.
///
/// Stored as the `stages + 1` stage boundaries `0 = b₀ < b₁ < … < b_p = layers`; stage `s` runs
/// layers `b_s..b_{s+1}`. Every constructor validates, so a `Partition` is always well-formed.
/// It serializes as its balance (layers per stage), e.g. `[3, 2, 3]`.
///
/// ```
/// use pipetrain_partitioner::Partition;
/// use pipetrain_schedules::StageId;
///
/// let partition = Partition::from_balance(&[3, 2, 3], 8)?;
/// assert_eq!(partition.to_string(), "[0..3 | 3..5 | 5..8]");
/// assert_eq!(partition.range(StageId(1)), 3..5);
/// assert_eq!(partition.stage_of_layer(5), StageId(2));
/// assert_eq!(partition.balance(), vec![3, 2, 3]);
/// # Ok::<(), pipetrain_partitioner::PartitionError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<usize>", into = "Vec<usize>")]
pub struct Partition {
    /// `stages + 1` strictly increasing boundaries from 0 to `layers`.
    boundaries: Vec<usize>,
}

impl Partition {
    /// The partition whose stage `s` has `balance[s]` layers.
    ///
    /// Fails when `balance` is empty, has more entries than there are layers, has a zero entry,
    /// or does not sum to `layers`; each error names the offending numbers.
    pub fn from_balance(balance: &[usize], layers: usize) -> Result<Self> {
        if balance.is_empty() {
            return Err(PartitionError::EmptyBalance { layers });
        }
        if balance.len() > layers {
            return Err(PartitionError::BalanceLength {
                balance: balance.to_vec(),
                layers,
            });
        }
        if let Some(stage) = balance.iter().position(|&n| n == 0) {
            return Err(PartitionError::EmptyStage {
                stage: StageId::from(stage),
                balance: balance.to_vec(),
                layers,
            });
        }
        // Checked: a balance of huge entries must be an error, not an overflow.
        let sum = balance
            .iter()
            .try_fold(0usize, |acc, &n| acc.checked_add(n))
            .unwrap_or(usize::MAX);
        if sum != layers {
            return Err(PartitionError::BalanceSum {
                balance: balance.to_vec(),
                sum,
                layers,
            });
        }
        let mut boundaries = Vec::with_capacity(balance.len() + 1);
        boundaries.push(0);
        for &n in balance {
            boundaries.push(boundaries[boundaries.len() - 1] + n);
        }
        Ok(Self { boundaries })
    }

    /// `layers` split into `stages` stages whose layer counts differ by at most one; the extra
    /// layers go to the *last* stages, matching the tie-breaking of
    /// [`partition_by_time`](crate::partition_by_time) on uniform costs. Why the last: under
    /// 1F1B stage `s` of `p` stashes up to `p − s` micro-batches' activations, so the first
    /// stages hold the most and the last the least; an extra layer costs least there.
    /// (DeepSpeed's uniform partition gives the extra layers to the first stages; torchgpipe and
    /// PyTorch's pipelining balance by measured cost or leave the split to the user.) This is
    /// the one even split: the builder uses it for a multi-process pipeline without a balance,
    /// and so does the `pipetrain` binary.
    ///
    /// ```
    /// use pipetrain_partitioner::Partition;
    /// assert_eq!(Partition::even(8, 3)?.balance(), vec![2, 3, 3]);
    /// # Ok::<(), pipetrain_partitioner::PartitionError>(())
    /// ```
    pub fn even(layers: usize, stages: usize) -> Result<Self> {
        check_shape(layers, stages)?;
        let (base, extra) = (layers / stages, layers % stages);
        let balance: Vec<usize> = (0..stages)
            .map(|s| base + usize::from(s >= stages - extra))
            .collect();
        Self::from_balance(&balance, layers)
    }

    /// The partition with the given boundaries; the caller guarantees they are well-formed.
    pub(crate) fn from_boundaries(boundaries: Vec<usize>) -> Self {
        debug_assert!(boundaries.len() >= 2 && boundaries[0] == 0);
        debug_assert!(boundaries.windows(2).all(|w| w[0] < w[1]));
        Self { boundaries }
    }

    /// Number of stages.
    pub fn stages(&self) -> usize {
        self.boundaries.len() - 1
    }

    /// Number of layers, over all stages.
    pub fn layers(&self) -> usize {
        self.boundaries[self.boundaries.len() - 1]
    }

    /// The layers run by `stage`.
    ///
    /// # Panics
    /// If `stage` is not below [`stages`](Self::stages).
    pub fn range(&self, stage: StageId) -> Range<usize> {
        let s = stage.index();
        assert!(
            s < self.stages(),
            "{stage} out of range: the partition has {} stages",
            self.stages()
        );
        self.boundaries[s]..self.boundaries[s + 1]
    }

    /// Number of layers of each stage, in stage order.
    pub fn balance(&self) -> Vec<usize> {
        self.boundaries.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// The stage boundaries `0 = b₀ < b₁ < … < b_p = layers`.
    pub fn boundaries(&self) -> &[usize] {
        &self.boundaries
    }

    /// The stage that runs `layer`.
    ///
    /// # Panics
    /// If `layer` is not below [`layers`](Self::layers).
    pub fn stage_of_layer(&self, layer: usize) -> StageId {
        assert!(
            layer < self.layers(),
            "layer {layer} out of range: the partition has {} layers",
            self.layers()
        );
        // The number of boundaries b₁…b_p that are ≤ layer is the stage index.
        StageId::from(self.boundaries[1..].partition_point(|&b| b <= layer))
    }

    /// Every stage with its layers, in stage order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            windows: self.boundaries.windows(2).enumerate(),
        }
    }

    /// The cost of every stage under per-layer `costs` (one per layer).
    ///
    /// ```
    /// use pipetrain_partitioner::{LayerCost, Partition};
    ///
    /// let partition = Partition::from_balance(&[1, 2], 3)?;
    /// let times: Vec<f64> = partition
    ///     .stage_costs(&LayerCost::uniform(3))?
    ///     .iter()
    ///     .map(|stage| stage.time)
    ///     .collect();
    /// assert_eq!(times, vec![3.0, 6.0]);
    /// # Ok::<(), pipetrain_partitioner::PartitionError>(())
    /// ```
    pub fn stage_costs(&self, costs: &[LayerCost]) -> Result<Vec<StageCost>> {
        if costs.len() != self.layers() {
            return Err(PartitionError::CostCount {
                costs: costs.len(),
                layers: self.layers(),
            });
        }
        Ok(self.iter().map(|(_, r)| StageCost::of(&costs[r])).collect())
    }
}

/// Checks a request for `stages` non-empty stages over `layers` layers.
pub(crate) fn check_shape(layers: usize, stages: usize) -> Result<()> {
    if stages == 0 {
        Err(PartitionError::NoStages { layers })
    } else if layers == 0 {
        Err(PartitionError::NoLayers { stages })
    } else if stages > layers {
        Err(PartitionError::MoreStagesThanLayers { stages, layers })
    } else {
        Ok(())
    }
}

impl fmt::Display for Partition {
    /// `[0..3 | 3..5 | 5..8]`: the layer range of each stage.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (stage, range) in self.iter() {
            if stage.index() > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{range:?}")?;
        }
        f.write_str("]")
    }
}

/// Iterator over the stages of a [`Partition`] and their layer ranges; see [`Partition::iter`].
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    windows: std::iter::Enumerate<std::slice::Windows<'a, usize>>,
}

impl Iterator for Iter<'_> {
    type Item = (StageId, Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        self.windows
            .next()
            .map(|(s, w)| (StageId::from(s), w[0]..w[1]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.windows.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.windows
            .next_back()
            .map(|(s, w)| (StageId::from(s), w[0]..w[1]))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Partition {
    type Item = (StageId, Range<usize>);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl TryFrom<Vec<usize>> for Partition {
    type Error = PartitionError;

    /// The partition with this balance, covering as many layers as the balance sums to.
    fn try_from(balance: Vec<usize>) -> Result<Self> {
        let layers = balance.iter().fold(0usize, |acc, &n| acc.saturating_add(n));
        Self::from_balance(&balance, layers)
    }
}

impl From<Partition> for Vec<usize> {
    /// The balance of the partition.
    fn from(partition: Partition) -> Self {
        partition.balance()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_of_layer_matches_ranges() {
        let partition = Partition::from_balance(&[1, 4, 2, 1], 8).unwrap();
        for (stage, range) in &partition {
            for layer in range {
                assert_eq!(partition.stage_of_layer(layer), stage);
            }
        }
    }

    #[test]
    fn even_splits() {
        assert_eq!(Partition::even(8, 1).unwrap().balance(), vec![8]);
        assert_eq!(Partition::even(8, 4).unwrap().balance(), vec![2, 2, 2, 2]);
        assert_eq!(Partition::even(7, 7).unwrap().balance(), vec![1; 7]);
        assert_eq!(Partition::even(10, 4).unwrap().balance(), vec![2, 2, 3, 3]);
        assert!(Partition::even(3, 4).is_err());
        assert!(Partition::even(3, 0).is_err());
        assert!(Partition::even(0, 1).is_err());
    }

    #[test]
    fn serde_as_balance() {
        let partition = Partition::from_balance(&[3, 2, 3], 8).unwrap();
        let json = serde_json::to_string(&partition).unwrap();
        assert_eq!(json, "[3,2,3]");
        assert_eq!(serde_json::from_str::<Partition>(&json).unwrap(), partition);
        let err = serde_json::from_str::<Partition>("[3,0]").unwrap_err();
        assert!(err.to_string().contains("stage 1 has 0 layers"), "{err}");
    }

    #[test]
    #[should_panic(expected = "stage 2 out of range")]
    fn range_panics_out_of_range() {
        Partition::from_balance(&[1, 1], 2)
            .unwrap()
            .range(StageId(2));
    }
}
