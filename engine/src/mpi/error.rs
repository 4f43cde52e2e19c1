//! Why an MPI run cannot start or go on.

/// Why an MPI run cannot start or go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MpiError {
    /// MPI could not be initialised (not started by `mpirun`/`srun`, or initialised twice).
    #[error(
        "MPI could not be initialised ({0}); start pipetrain with `mpirun -np N pipetrain ...` \
         or `srun`, built with `--features mpi`"
    )]
    Init(String),
    /// The MPI library grants less thread support than the communication thread needs.
    #[error(
        "the MPI library grants thread level {granted}, pipetrain needs at least Funneled (one \
         thread makes every MPI call); use an MPI built with thread support"
    )]
    Threading {
        /// What the library granted.
        granted: String,
    },
    /// A launcher's variable disagrees with what MPI says.
    #[error(
        "{variable}={value} disagrees with MPI, which says {what} is {mpi}; launch every rank \
         the same way (a stale {variable} from another launcher is the usual cause: unset it)"
    )]
    Environment {
        /// The variable, e.g. `SLURM_PROCID`.
        variable: String,
        /// Its value.
        value: String,
        /// What it stands for: `rank`, `world size` or `local rank`.
        what: &'static str,
        /// MPI's value.
        mpi: String,
    },
    /// The processes cannot hold the world.
    #[error(
        "{processes} processes × {per_process} workers per process cannot run {replicas} \
         replicas × {stages} stages ({workers} workers); launch {needed} processes \
         (mpirun -np {needed}) or change --workers-per-process"
    )]
    Layout {
        /// MPI's world size.
        processes: usize,
        /// `--workers-per-process`.
        per_process: usize,
        /// Replicas.
        replicas: usize,
        /// Stages.
        stages: usize,
        /// replicas × stages.
        workers: usize,
        /// The process count that fits, or 0 if none does.
        needed: String,
    },
    /// A message is malformed (a version mismatch between ranks, or corruption).
    #[error("malformed message: {0}; run the same pipetrain build on every rank")]
    Wire(String),
    /// Another rank failed, or stopped answering.
    #[error("rank {rank} failed: {message}")]
    Peer {
        /// The rank.
        rank: usize,
        /// What it reported, or how long it has been silent.
        message: String,
    },
    /// The communication thread is gone (MPI failed under it).
    #[error("the MPI communication thread is gone: {0}")]
    Gone(String),
}
