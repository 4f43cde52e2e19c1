//! What a stage keeps for each micro-batch between its forward and its backward.

use std::collections::HashMap;

use burn::prelude::*;
use pipetrain_schedules::MicroBatchId;

use crate::activation::Activation;

/// The forward's product that backward needs.
pub(crate) enum Stashed {
    /// Forward ran with autodiff: the input leaf and the output (with its graph).
    Graph {
        /// The stage input (an autodiff leaf).
        input: Activation,
        /// The output, or on the last stage the scaled loss.
        output: Output,
    },
    /// Re-materialized: only the plain input (and the targets on the last stage); backward
    /// recomputes the forward with autodiff first.
    Input {
        /// The stage input, plain.
        input: Activation,
        /// The targets, on the last stage.
        target: Option<Activation>,
    },
}

/// A stage output with its graph.
pub(crate) enum Output {
    /// An inner stage's output activation.
    Activation(Activation),
    /// The last stage's scaled loss.
    Loss(Tensor<1>),
}

/// Per-micro-batch storage with a high-water mark (the measured peak stash).
#[derive(Default)]
pub(crate) struct Stash {
    entries: HashMap<MicroBatchId, Stashed>,
    peak: usize,
}

impl Stash {
    pub(crate) fn put(&mut self, mb: MicroBatchId, item: Stashed) {
        self.entries.insert(mb, item);
        self.peak = self.peak.max(self.entries.len());
    }

    pub(crate) fn take(&mut self, mb: MicroBatchId) -> Option<Stashed> {
        self.entries.remove(&mb)
    }

    pub(crate) fn peak(&self) -> usize {
        self.peak
    }
}
