//! Where a run's batches come from: batch `i` of the run (counting every accumulated batch) is
//! a pure function of `i`, so a resumed run continues on the very batches the straight run
//! would have seen.

use crate::RunError;
use burn::prelude::Device;
use pipetrain_data::{Dataset, Loader, Position};

use crate::{Batch, Error};

/// The run's training batches, by index.
pub trait Source {
    /// Training batch `index` of the run, from 0 (epochs roll over).
    ///
    /// # Errors
    /// [`RunError::Batch`](crate::RunError::Batch): the batch cannot be read or shaped.
    fn batch(&self, index: u64) -> Result<Batch, Error>;

    /// Where batch `index` comes from, as text: stored in checkpoints and checked on resume.
    fn position(&self, index: u64) -> String {
        format!("batch {index}")
    }
}

/// Any function of the index is a source (synthetic data, a generator).
impl<F: Fn(u64) -> Result<Batch, Error>> Source for F {
    fn batch(&self, index: u64) -> Result<Batch, Error> {
        self(index)
    }
}

/// A pipetrain-data [`Loader`] visited epoch after epoch (reshuffled every epoch by its seed),
/// its batches on `device`.
pub struct Epochs<D> {
    loader: Loader<D>,
    device: Device,
}

impl<D: Dataset> Epochs<D> {
    /// The batches of `loader`, on `device`.
    pub fn new(loader: Loader<D>, device: Device) -> Self {
        Self { loader, device }
    }

    /// The loader.
    pub fn loader(&self) -> &Loader<D> {
        &self.loader
    }

    /// Where batch `index` of the run lies: its epoch and batch in the epoch.
    pub fn position_of(&self, index: u64) -> Position {
        Position::from_step(index, self.loader.batches_per_epoch())
    }
}

impl<D: Dataset> Source for Epochs<D> {
    fn batch(&self, index: u64) -> Result<Batch, Error> {
        self.loader
            .batch_at(self.position_of(index), &self.device)
            .map_err(|e| {
                Error::Run(RunError::Batch {
                    index,
                    data: None,
                    reason: e.to_string(),
                })
            })
    }

    fn position(&self, index: u64) -> String {
        let p = self.position_of(index);
        format!("epoch {}, batch {}", p.epoch, p.batch)
    }
}
