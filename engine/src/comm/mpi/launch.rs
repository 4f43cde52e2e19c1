//! Launch: which workers each process runs, and the launcher's variables checked against MPI.
//!
//! Processes hold consecutive workers in the world's replica-major order: with k workers per
//! process, process p runs workers p·k … p·k + k − 1. One worker per process (the default) maps
//! rank → (replica, stage) = (rank / stages, rank % stages); `--workers-per-process 2` on a
//! 2 × 2 world puts each replica's two stages in one process (channels inside, MPI between).
//!
//! ```
//! use pipetrain_engine::mpi::Placement;
//! use pipetrain_schedules::{ReplicaId, StageId, WorkerId};
//! let placement = Placement::new(3, 4, 1, 2, 2)?; // rank 3 of 4, 1 worker each, 2 replicas × 2 stages
//! assert_eq!(placement.local(), [WorkerId::new(ReplicaId(1), StageId(1))]);
//! assert!(Placement::new(0, 3, 1, 2, 2).is_err()); // 3 processes cannot hold 4 workers
//! # Ok::<(), pipetrain_engine::EngineError>(())
//! ```

use pipetrain_schedules::WorkerId;

use crate::error::EngineError;

/// Where this process sits: its rank, the process count, and the world it shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    rank: usize,
    processes: usize,
    per_process: usize,
    replicas: usize,
    stages: usize,
}

impl Placement {
    /// Process `rank` of `processes`, each running `per_process` workers of a world of
    /// `replicas × stages`; an error names the process count that fits.
    pub fn new(
        rank: usize,
        processes: usize,
        per_process: usize,
        replicas: usize,
        stages: usize,
    ) -> Result<Self, EngineError> {
        let workers = replicas * stages;
        if per_process == 0 || processes * per_process != workers || rank >= processes {
            let needed =
                (per_process > 0 && workers % per_process == 0).then(|| workers / per_process);
            return Err(EngineError::ProcessLayout {
                processes,
                per_process,
                replicas,
                stages,
                workers,
                needed,
            });
        }
        Ok(Self {
            rank,
            processes,
            per_process,
            replicas,
            stages,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn processes(&self) -> usize {
        self.processes
    }

    /// Replicas of the world.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Stages of the world.
    pub fn stages(&self) -> usize {
        self.stages
    }

    /// The workers this process runs, replica-major.
    pub fn local(&self) -> Vec<WorkerId> {
        let first = self.rank * self.per_process;
        (first..first + self.per_process)
            .map(|w| WorkerId::from_rank(w, self.stages))
            .collect()
    }

    /// The process that runs worker `id`.
    pub fn process_of(&self, id: WorkerId) -> usize {
        id.rank(self.stages) / self.per_process
    }

    /// The workers process `rank` runs, as text (`r1s0,r1s1`), for messages.
    pub fn describe(&self, rank: usize) -> String {
        let first = rank * self.per_process;
        (first..first + self.per_process)
            .map(|w| WorkerId::from_rank(w, self.stages).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The launcher variables read, with what each stands for: Slurm's and torchrun's.
const VARIABLES: [(&str, &str); 6] = [
    ("SLURM_PROCID", "rank"),
    ("SLURM_NTASKS", "world size"),
    ("SLURM_LOCALID", "local rank"),
    ("RANK", "rank"),
    ("WORLD_SIZE", "world size"),
    ("LOCAL_RANK", "local rank"),
];

/// Checks the Slurm (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`) and torchrun-style
/// (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`) variables that are set against MPI's rank, world size
/// and node-local rank; `var` reads a variable (`std::env::var` in a run).
///
/// ```
/// use pipetrain_engine::mpi::check_environment;
/// let env = |k: &str| (k == "RANK").then(|| "2".to_string());
/// assert!(check_environment(2, 4, None, env).is_ok());
/// let err = check_environment(1, 4, None, env).unwrap_err();
/// assert!(err.to_string().contains("RANK=2"), "{err}");
/// ```
pub fn check_environment(
    rank: usize,
    size: usize,
    local_rank: Option<usize>,
    var: impl Fn(&str) -> Option<String>,
) -> Result<(), EngineError> {
    for (variable, what) in VARIABLES {
        let Some(value) = var(variable) else { continue };
        let mpi = match (what, local_rank) {
            ("rank", _) => rank,
            ("world size", _) => size,
            (_, Some(local)) => local,
            (_, None) => continue,
        };
        if value.trim().parse::<usize>().ok() != Some(mpi) {
            return Err(EngineError::LauncherEnvironment {
                variable: variable.to_string(),
                value,
                what,
                mpi: mpi.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

    use super::*;

    #[test]
    fn layouts_cover_the_world_once() {
        for (processes, k, r, p) in [(4, 1, 2, 2), (2, 2, 2, 2), (2, 1, 1, 2), (1, 4, 2, 2)] {
            let mut all = Vec::new();
            for rank in 0..processes {
                let placement = Placement::new(rank, processes, k, r, p).unwrap();
                for id in placement.local() {
                    assert_eq!(placement.process_of(id), rank);
                    all.push(id.rank(p));
                }
            }
            assert_eq!(all, (0..r * p).collect::<Vec<_>>());
        }
        let err = Placement::new(0, 3, 1, 2, 2).unwrap_err();
        let processes = Remedy::set(Setting::Processes, Value::Count(4));
        let per_process = Remedy::set(Setting::WorkersPerProcess, Value::Any);
        assert_eq!(err.remedy(), Some(Remedy::one_of([processes, per_process])));
        let err = Placement::new(0, 2, 3, 2, 2).unwrap_err().to_string();
        assert!(err.contains("do not divide 4"), "{err}");
    }

    #[test]
    fn launcher_variables_must_agree_with_mpi() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let slurm = env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "1"),
        ]);
        assert!(check_environment(1, 4, Some(1), slurm).is_ok());
        let err = check_environment(1, 2, Some(1), slurm).unwrap_err();
        assert!(err.to_string().contains("SLURM_NTASKS=4"), "{err}");
        let torch = env(&[("LOCAL_RANK", "x")]);
        assert!(check_environment(0, 1, Some(0), torch).is_err());
        assert!(check_environment(5, 8, Some(1), env(&[])).is_ok());
    }
}
