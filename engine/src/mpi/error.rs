//! Why an MPI run cannot start or go on.

use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

/// Why an MPI run cannot start or go on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MpiError {
    /// MPI could not be initialised (not started by `mpirun`/`srun`, or initialised twice).
    #[error(
        "MPI could not be initialised ({0}); pipetrain needs an MPI launcher (`mpirun -np N \
         pipetrain ...` or `srun`) and a build with the cargo feature `mpi`"
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
         replicas × {stages} stages ({workers} workers){}",
        match needed {
            Some(_) => String::new(),
            None => format!(
                "; no process count does, as {per_process} workers per process do not divide \
                 {workers}"
            ),
        }
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
        /// The process count that fits, if one does.
        needed: Option<usize>,
    },
    /// A message is malformed (a version mismatch between ranks, or corruption).
    #[error("malformed message: {0}; run the same pipetrain build on every rank")]
    Wire(String),
    /// Another rank failed.
    #[error("rank {rank} failed: {message}")]
    Peer {
        /// The rank.
        rank: usize,
        /// What it reported.
        message: String,
        /// What would fix it, as it reported.
        remedy: Option<Remedy>,
    },
    /// Another rank stopped answering.
    #[error(
        "rank {rank} failed: sent nothing for {seconds} s (the communication timeout) {during}; \
         it may be dead or stuck"
    )]
    Silent {
        /// The rank.
        rank: usize,
        /// How long it has been silent: the communication timeout, in seconds.
        seconds: f64,
        /// What this process waited in, e.g. "at a broadcast or gather of the launcher".
        during: &'static str,
    },
    /// The communication thread is gone (MPI failed under it).
    #[error("the MPI communication thread is gone: {0}")]
    Gone(String),
}

impl Remedied for MpiError {
    fn remedy(&self) -> Option<Remedy> {
        match self {
            MpiError::Layout { needed, .. } => Some(match needed {
                Some(n) => Remedy::one_of([
                    Remedy::set(Setting::Processes, Value::Count(*n)),
                    Remedy::set(Setting::WorkersPerProcess, Value::Any),
                ]),
                None => Remedy::set(Setting::WorkersPerProcess, Value::Any),
            }),
            MpiError::Peer { remedy, .. } => remedy.clone(),
            MpiError::Silent { .. } => Some(Remedy::set(Setting::CommTimeout, Value::Larger)),
            _ => None,
        }
    }
}
