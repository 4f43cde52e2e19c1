//! A labelled batch.

use crate::activation::Activation;
use crate::error::{EngineError, Result};

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
}

impl Batch {
    /// Cuts the batch into `replicas` contiguous shards of `micro_batches` micro-batches each:
    /// replica r takes the r-th shard. The rows must divide by `replicas × micro_batches`.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain_engine::{Activation, Batch};
    ///
    /// let device = Device::flex();
    /// let batch = Batch {
    ///     inputs: Tensor::<2>::zeros([12, 3], &device).into(),
    ///     targets: Tensor::<2>::zeros([12, 1], &device).into(),
    /// };
    /// let shards = batch.shard(2, 3)?;
    /// assert_eq!(shards.len(), 2);
    /// assert_eq!(shards[1].inputs[2].dims(), vec![2, 3]);
    /// assert!(batch.shard(5, 1).is_err()); // 12 rows do not split into 5 replicas
    /// # Ok::<(), pipetrain_engine::EngineError>(())
    /// ```
    pub fn shard(&self, replicas: usize, micro_batches: usize) -> Result<Vec<Shard>> {
        let rows = self.len();
        let parts = replicas * micro_batches;
        if parts == 0 || rows % parts != 0 {
            return Err(EngineError::BatchSplit {
                rows,
                replicas,
                micro_batches,
            });
        }
        let inputs = self.inputs.clone().split(replicas)?;
        let targets = self.targets.clone().split(replicas)?;
        inputs
            .into_iter()
            .zip(targets)
            .map(|(x, y)| {
                Ok(Shard {
                    inputs: x.split(micro_batches)?,
                    targets: y.split(micro_batches)?,
                })
            })
            .collect()
    }
}
