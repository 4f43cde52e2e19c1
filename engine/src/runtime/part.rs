//! A multi-process runtime's share of a checkpoint.

use std::collections::BTreeMap;
use std::path::Path;

use super::lifecycle::Runtime;
use crate::checkpoint;
use crate::error::Result;
use crate::model::layer::Layer;

impl<L: Layer> Runtime<L> {
    /// This process's part of a checkpoint: the weights of the stages its workers hold and
    /// their optimizer state (see [`checkpoint::save_part`]); one process merges every part
    /// with [`checkpoint::write_parts`]. `path` names the checkpoint in errors. Refused in the
    /// middle of an accumulation, as [`save_checkpoint`](Self::save_checkpoint).
    pub fn checkpoint_part(&self, path: &Path, extra: BTreeMap<String, String>) -> Result<Vec<u8>> {
        let progress = self.progress(extra)?;
        let w = &self.workers;
        checkpoint::save_part(
            path,
            w.states(),
            w.partition(),
            w.optimizer().name(),
            &progress,
        )
    }
}
