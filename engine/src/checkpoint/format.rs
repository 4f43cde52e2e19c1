//! The file format: metadata keys, the run's [`Progress`], parameter names.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::adapter::{self, ParamId};
use crate::layer::Layer;

/// Metadata key of the format version.
pub(super) const FORMAT_KEY: &str = "pipetrain.format";
/// This format's version.
pub(super) const FORMAT: &str = "1";
/// Metadata key of the [`Progress`] (JSON).
pub(super) const PROGRESS_KEY: &str = "pipetrain.progress";
/// Metadata key of the optimizer's name.
pub(super) const OPTIMIZER_KEY: &str = "pipetrain.optimizer";
/// Metadata key of the optimizer's per-parameter scalars (JSON).
pub(super) const SCALARS_KEY: &str = "pipetrain.optimizer_scalars";
/// Prefix of the optimizer-state tensors in a checkpoint file.
pub const OPTIMIZER_PREFIX: &str = "__optimizer__/";

/// Where a run stands: saved with the weights so a resumed run continues where it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Optimizer steps taken.
    pub step: u64,
    /// Anything else the trainer needs to continue bit for bit (data position, seed, model
    /// shape…), as text.
    pub extra: BTreeMap<String, String>,
}

/// Full-model names of the parameters of `layers`, by parameter id; `offset` is the index of
/// `layers[0]` in the whole model.
pub(super) fn names<L: Layer>(layers: &[L], offset: usize) -> HashMap<ParamId, String> {
    adapter::named_parameters(layers, offset)
        .into_iter()
        .map(|n| (n.id, n.name))
        .collect()
}
