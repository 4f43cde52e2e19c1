//! A labelled batch.

use crate::activation::Activation;

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
