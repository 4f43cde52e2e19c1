//! A run spread over several processes (MPI): what the loop needs from the others. A
//! one-process run has none of it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::trainer::Signal;
use crate::{Checkpoint, Error, Layer, Pipeline};

/// The other processes of a multi-process run, as the [`Trainer`](crate::trainer::Trainer)
/// needs them: every call is collective (each process makes it at the same point of the run).
pub trait Processes<L: Layer> {
    /// Whether this process writes the run's outputs (rank 0).
    fn is_leader(&self) -> bool;

    /// The checkpoint at `path`, read by the leader and sent to every process.
    ///
    /// # Errors
    /// The file cannot be read, or a process failed.
    fn read_checkpoint(&self, path: &Path) -> Result<Checkpoint, Error>;

    /// The sum over the processes of `loss` (each its local last stages' share) on the
    /// leader; anything elsewhere.
    ///
    /// # Errors
    /// A process failed.
    fn total_loss(&self, loss: f64) -> Result<f64, Error>;

    /// The stop every process agrees on at a step boundary: the first process's signal that
    /// arrived (`local` is this process's), or none, the same on every process — so that under
    /// `mpirun`, which sends each rank the SIGINT or SIGTERM it gets, all ranks stop after the
    /// same step and write one checkpoint together.
    ///
    /// # Errors
    /// A process failed.
    fn agree_stop(&self, local: Option<Signal>) -> Result<Option<Signal>, Error>;

    /// Writes one checkpoint at `path` from every process's part of `pipeline` (the leader
    /// writes it, atomically).
    ///
    /// # Errors
    /// The checkpoint cannot be assembled or written, or a process failed.
    fn save_checkpoint(
        &self,
        pipeline: &Pipeline<L>,
        path: &Path,
        extra: BTreeMap<String, String>,
    ) -> Result<(), Error>;

    /// The lowest replica whose weights differ, bit for bit, from replica 0's in some stage, on
    /// the leader (compared over every process's workers); `None` elsewhere, and where every
    /// replica holds replica 0's weights.
    ///
    /// # Errors
    /// A process failed.
    fn replicas_apart(&self, pipeline: &Pipeline<L>) -> Result<Option<usize>, Error>;

    /// The whole model (replica 0's values of every stage) on the leader, `None` elsewhere.
    ///
    /// # Errors
    /// A process failed.
    fn gather_model(&self, pipeline: &Pipeline<L>) -> Result<Option<Vec<L>>, Error>;
}
