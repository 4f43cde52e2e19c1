//! Test support: a replica whose weights leave the others', for the tests of what must detect
//! it (the per-step verification, the merge of the processes' checkpoint parts). Hidden from
//! the documentation: no training run has a use for it.

use pipetrain_schedules::ReplicaId;

use super::lifecycle::Runtime;
use crate::adapter;
use crate::model::layer::Layer;

/// What [`Runtime::perturb_replica`] adds to each trained weight: far above any rounding, so
/// no comparison can mistake it for one.
const SHIFT: f32 = 1e-3;

impl<L: Layer> Runtime<L> {
    /// Adds 1e-3 to every trained weight of replica `replica`'s workers in this process (none
    /// when other processes run them): the replicas no longer hold equal weights, which every
    /// step of a correct run keeps them doing. Between steps only; the optimizer state stays.
    #[doc(hidden)]
    pub fn perturb_replica(&mut self, replica: ReplicaId) {
        for w in self.workers.iter_mut() {
            if w.id.replica == replica {
                let layers = std::mem::take(&mut w.layers);
                w.layers = layers
                    .into_iter()
                    .map(|l| adapter::shifted(l, SHIFT))
                    .collect();
            }
        }
    }
}
