//! `Position`: where a run is in its data, saved with a checkpoint to resume bit-for-bit.

use std::fmt;
use std::str::FromStr;

use crate::error::DataError;
use crate::problem::ParameterProblem;

/// Batch `batch` of epoch `epoch`. Its text form `epoch/batch` (e.g. `3/17`) round-trips.
///
/// ```
/// use pipetrain_data::Position;
/// let p = Position { epoch: 0, batch: 2 };
/// assert_eq!(p.next(3), Position { epoch: 1, batch: 0 });
/// assert_eq!("0/2".parse::<Position>()?, p);
/// assert_eq!(p.to_string(), "0/2");
/// assert_eq!(Position::from_step(p.step(3), 3), p);
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The epoch, from 0.
    pub epoch: u64,
    /// The batch within the epoch, from 0.
    pub batch: usize,
}

impl Position {
    /// The first batch of the first epoch.
    pub const START: Position = Position { epoch: 0, batch: 0 };

    /// The position after this one, rolling over to the next epoch after batch
    /// `batches_per_epoch - 1`.
    pub fn next(self, batches_per_epoch: usize) -> Position {
        if self.batch + 1 >= batches_per_epoch {
            Position {
                epoch: self.epoch + 1,
                batch: 0,
            }
        } else {
            Position {
                epoch: self.epoch,
                batch: self.batch + 1,
            }
        }
    }

    /// Batches before this position since the start of the run.
    pub fn step(self, batches_per_epoch: usize) -> u64 {
        self.epoch * batches_per_epoch as u64 + self.batch as u64
    }

    /// The position after `step` batches since the start of the run.
    ///
    /// # Panics
    /// If `batches_per_epoch` is 0.
    pub fn from_step(step: u64, batches_per_epoch: usize) -> Position {
        let per = batches_per_epoch as u64;
        Position {
            epoch: step / per,
            batch: (step % per) as usize,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.epoch, self.batch)
    }
}

impl FromStr for Position {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || DataError::BadParameter {
            name: "position",
            value: s.to_string(),
            problem: ParameterProblem::PositionForm,
        };
        let (epoch, batch) = s.split_once('/').ok_or_else(bad)?;
        Ok(Position {
            epoch: epoch.trim().parse().map_err(|_| bad())?,
            batch: batch.trim().parse().map_err(|_| bad())?,
        })
    }
}
