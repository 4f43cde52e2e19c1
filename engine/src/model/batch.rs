//! A labelled batch.

use crate::error::{EngineError, Result};
use crate::model::activation::Activation;
use crate::model::layout::Layout;

/// One labelled batch: inputs and targets, batch dimension first.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Model inputs.
    pub inputs: Activation,
    /// Targets (class labels or regression targets).
    pub targets: Activation,
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
    /// Cuts the batch into the layout's [`parts`](Layout::parts) (`replicas × micro_batches`)
    /// contiguous micro-batches whose row counts differ by at most one, the first ones longer
    /// ([`chunk_rows`](crate::chunk_rows)): replica r takes micro-batches `r·m .. (r+1)·m`.
    /// Each carries its rows / the batch's rows as its loss weight. Any batch of at least that
    /// many rows splits ([`Layout::check_batch`]).
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain_engine::{Activation, Batch, Layout};
    ///
    /// let device = Device::flex();
    /// let batch = Batch {
    ///     inputs: Tensor::<2>::zeros([13, 3], &device).into(),
    ///     targets: Tensor::<2>::zeros([13, 1], &device).into(),
    /// };
    /// let shards = batch.shard(Layout::new(2, 1, 3))?;
    /// assert_eq!(shards.len(), 2);
    /// assert_eq!(shards[0].inputs[0].dims(), vec![3, 3]); // 13 rows: 3 2 2 | 2 2 2
    /// assert_eq!(shards[1].inputs[2].dims(), vec![2, 3]);
    /// assert_eq!(shards[0].weights[0], 3.0 / 13.0);
    /// assert!(batch.shard(Layout::new(7, 1, 2)).is_err()); // 13 rows cannot fill 14 micro-batches
    /// # Ok::<(), pipetrain_engine::EngineError>(())
    /// ```
    pub fn shard(&self, layout: Layout) -> Result<Vec<Shard>> {
        let rows = self.len();
        layout.check_batch(rows)?;
        let (replicas, micro_batches) = (layout.replicas(), layout.micro_batches());
        let parts = layout.parts();
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
