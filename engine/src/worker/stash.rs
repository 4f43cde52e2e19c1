//! What a stage keeps for each micro-batch between its forward and its backward.

use std::collections::HashMap;

use pipetrain_schedules::MicroBatchId;

use super::tape::Tape;
use crate::model::activation::Activation;

/// The forward's product that backward needs.
pub(crate) enum Stashed {
    /// Forward ran for training: its segments and, on the last stage, the loss.
    Tape(Tape),
    /// Re-materialized: only the plain input (and the targets on the last stage); backward
    /// recomputes the forward first.
    Input {
        /// The stage input, plain.
        input: Activation,
        /// The targets, on the last stage.
        target: Option<Activation>,
    },
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
