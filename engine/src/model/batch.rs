//! A labelled batch.

use crate::error::{EngineError, Result};
use crate::model::activation::Activation;

/// One labelled batch: inputs and targets, batch dimension first.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Model inputs.
    pub inputs: Activation,
    /// Targets (class labels or regression targets).
    pub targets: Activation,
}

/// Whether a batch of `rows` rows splits into `replicas × micro_batches` micro-batches of at
/// least one row: the one batch rule, which [`Batch::shard`] applies at each step and a front
/// end may ask before it starts (the `pipetrain` binary checks `--batch` with it).
///
/// ```
/// use pipetrain_engine::check_batch_split;
/// assert!(check_batch_split(24, 3, 8).is_ok());
/// assert!(check_batch_split(16, 3, 8).is_err()); // 16 rows for 24 micro-batches
/// ```
///
/// # Errors
/// [`EngineError::BatchSplit`], whose remedy is the least batch that splits, or as many
/// micro-batches as the batch has rows per replica.
pub fn check_batch_split(rows: usize, replicas: usize, micro_batches: usize) -> Result<()> {
    let parts = replicas * micro_batches;
    if parts == 0 || rows < parts {
        return Err(EngineError::BatchSplit {
            rows,
            replicas,
            micro_batches,
        });
    }
    Ok(())
}

impl Batch {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.inputs.batch_size()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One replica's share of a step: its micro-batches' inputs and targets.
#[derive(Clone, Debug, Default)]
pub struct Shard {
    /// Inputs, one per micro-batch (fed to stage 0).
    pub inputs: Vec<Activation>,
    /// Targets, one per micro-batch (fed to the loss on the last stage).
    pub targets: Vec<Activation>,
    /// Each micro-batch's share of the whole batch's rows: its loss weight, so that the
    /// weighted sum of micro-batch mean losses over every replica is the batch's mean loss.
    pub weights: Vec<f64>,
}

impl Batch {
    /// Cuts the batch into `replicas × micro_batches` contiguous micro-batches whose row counts
    /// differ by at most one, the first ones longer ([`chunk_rows`](crate::chunk_rows)):
    /// replica r takes micro-batches `r·m .. (r+1)·m`. Each carries its rows / the batch's rows
    /// as its loss weight. Any batch of at least `replicas × micro_batches` rows splits.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain_engine::{Activation, Batch};
    ///
    /// let device = Device::flex();
    /// let batch = Batch {
    ///     inputs: Tensor::<2>::zeros([13, 3], &device).into(),
    ///     targets: Tensor::<2>::zeros([13, 1], &device).into(),
    /// };
    /// let shards = batch.shard(2, 3)?;
    /// assert_eq!(shards.len(), 2);
    /// assert_eq!(shards[0].inputs[0].dims(), vec![3, 3]); // 13 rows: 3 2 2 | 2 2 2
    /// assert_eq!(shards[1].inputs[2].dims(), vec![2, 3]);
    /// assert_eq!(shards[0].weights[0], 3.0 / 13.0);
    /// assert!(batch.shard(7, 2).is_err()); // 13 rows cannot fill 14 micro-batches
    /// # Ok::<(), pipetrain_engine::EngineError>(())
    /// ```
    pub fn shard(&self, replicas: usize, micro_batches: usize) -> Result<Vec<Shard>> {
        let rows = self.len();
        check_batch_split(rows, replicas, micro_batches)?;
        let parts = replicas * micro_batches;
        let split = |a: &Activation| a.clone().split(parts).map_err(EngineError::bad_batch);
        let (mut inputs, mut targets) = (
            split(&self.inputs)?.into_iter(),
            split(&self.targets)?.into_iter(),
        );
        let shards = (0..replicas)
            .map(|_| {
                let inputs: Vec<Activation> = inputs.by_ref().take(micro_batches).collect();
                let weights = inputs
                    .iter()
                    .map(|x| x.batch_size() as f64 / rows as f64)
                    .collect();
                Shard {
                    inputs,
                    targets: targets.by_ref().take(micro_batches).collect(),
                    weights,
                }
            })
            .collect();
        Ok(shards)
    }
}

#[cfg(test)]
mod tests {
    use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

    use super::check_batch_split;

    /// The remedy is computed from the values (issue 38), here and so in every front end: the
    /// least batch, or as many micro-batches as each replica has rows.
    #[test]
    fn a_batch_that_does_not_split_names_the_batch_and_the_micro_batches_that_would() {
        let refused = check_batch_split(16, 3, 8).unwrap_err();
        assert_eq!(
            refused.remedy(),
            Some(Remedy::one_of([
                Remedy::set(Setting::Batch, Value::Count(24)),
                Remedy::set(Setting::MicroBatches, Value::Count(5)),
            ]))
        );
        // Fewer rows than replicas: no micro-batch count fits, only a larger batch.
        let refused = check_batch_split(2, 3, 1).unwrap_err();
        assert_eq!(
            refused.remedy(),
            Some(Remedy::set(Setting::Batch, Value::Count(3)))
        );
        assert!(check_batch_split(24, 3, 8).is_ok());
        // No micro-batch at all: at least one, not a batch of 0 rows.
        let refused = check_batch_split(16, 1, 0).unwrap_err();
        assert_eq!(
            refused.remedy(),
            Some(Remedy::set(Setting::MicroBatches, Value::Count(1)))
        );
    }
}
