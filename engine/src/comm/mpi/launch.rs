//! Launch: which workers each process runs, and the launcher's variables checked against MPI.
//!
//! Processes hold consecutive pipeline ranks in the world's replica-major order: with k ranks
//! per process (`--workers-per-process k`), process p runs ranks p·k … p·k + k − 1. With one
//! stage per rank, one rank per process (the default) maps rank → (replica, stage) =
//! (rank / stages, rank % stages); `--workers-per-process 2` on a 2 × 2 world puts each
//! replica's two stages in one process (channels inside, MPI between).
//!
//! A schedule with several chunks per rank (interleaved, looped BFS, interleaved zero bubble,
//! ZB-V, DualPipeV) runs each chunk on a worker of its own, and a rank's chunks take turns
//! (`worker/turns.rs`), which only works inside one process: a process holds whole ranks, each
//! with every stage the plan places on it ([`Placement::with_ranks`], from `Plan::rank_of`).
//!
//! ```
//! use pipetrain_engine::mpi::Placement;
//! use pipetrain_schedules::{ReplicaId, StageId, WorkerId};
//! let placement = Placement::new(3, 4, 1, 2, 2)?; // rank 3 of 4, 1 worker each, 2 replicas × 2 stages
//! assert_eq!(placement.local(), [WorkerId::new(ReplicaId(1), StageId(1))]);
//! assert!(Placement::new(0, 3, 1, 2, 2).is_err()); // 3 processes cannot hold 4 workers
//! // ZB-V on 2 ranks: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.
//! let v = Placement::with_ranks(1, 2, 1, 1, vec![0, 1, 1, 0])?;
//! let stages: Vec<StageId> = v.local().iter().map(|w| w.stage).collect();
//! assert_eq!(stages, [StageId(1), StageId(2)]);
//! # Ok::<(), pipetrain_engine::EngineError>(())
//! ```

use pipetrain_schedules::{ReplicaId, StageId, WorkerId};

use crate::error::EngineError;

/// Where this process sits: its rank, the process count, and the world it shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    rank: usize,
    processes: usize,
    per_process: usize,
    replicas: usize,
    /// Per model stage, the pipeline rank that runs it (the identity with one stage per rank).
    rank_of: Vec<usize>,
    /// Pipeline ranks per replica.
    ranks: usize,
}

impl Placement {
    /// Process `rank` of `processes`, each running `per_process` workers of a world of
    /// `replicas × stages`, one stage per pipeline rank; an error names the process count that
    /// fits.
    pub fn new(
        rank: usize,
        processes: usize,
        per_process: usize,
        replicas: usize,
        stages: usize,
    ) -> Result<Self, EngineError> {
        Self::with_ranks(
            rank,
            processes,
            per_process,
            replicas,
            (0..stages).collect(),
        )
    }

    /// Process `rank` of `processes`, each running `per_process` pipeline ranks of `replicas`
    /// replicas whose model stage `s` runs on pipeline rank `rank_of[s]` (the plan's
    /// `Plan::rank_of`): a process holds each of its ranks' stages, whose workers take turns.
    /// An error names the process count that fits.
    pub fn with_ranks(
        rank: usize,
        processes: usize,
        per_process: usize,
        replicas: usize,
        rank_of: Vec<usize>,
    ) -> Result<Self, EngineError> {
        let ranks = rank_of.iter().max().map_or(0, |&r| r + 1);
        let units = replicas * ranks;
        if per_process == 0 || processes * per_process != units || rank >= processes {
            let needed = (per_process > 0 && units % per_process == 0).then(|| units / per_process);
            return Err(EngineError::ProcessLayout {
                processes,
                per_process,
                replicas,
                stages: ranks,
                workers: units,
                needed,
            });
        }
        Ok(Self {
            rank,
            processes,
            per_process,
            replicas,
            rank_of,
            ranks,
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

    /// Model stages of the world (pipeline ranks × chunks per rank).
    pub fn stages(&self) -> usize {
        self.rank_of.len()
    }

    /// The workers this process runs, in the world's order (replica-major, then stage).
    pub fn local(&self) -> Vec<WorkerId> {
        self.workers_of(self.rank)
    }

    /// The process that runs worker `id`: the one holding its replica's pipeline rank.
    pub fn process_of(&self, id: WorkerId) -> usize {
        (id.replica.index() * self.ranks + self.rank_of[id.stage.index()]) / self.per_process
    }

    /// The workers process `rank` runs, in the world's order.
    fn workers_of(&self, rank: usize) -> Vec<WorkerId> {
        ReplicaId::range(self.replicas)
            .flat_map(|r| StageId::range(self.stages()).map(move |s| WorkerId::new(r, s)))
            .filter(|&id| self.process_of(id) == rank)
            .collect()
    }

    /// The workers process `rank` runs, as text (`r1s0,r1s1`), for messages.
    pub fn describe(&self, rank: usize) -> String {
        self.workers_of(rank)
            .iter()
            .map(ToString::to_string)
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
        // 3 processes for 4 workers: no count per process fits them (issue 47, class 6: it
        // offered one anyway); 4 processes do.
        let err = Placement::new(0, 3, 1, 2, 2).unwrap_err();
        let processes = Remedy::set(Setting::Processes, Value::Count(4));
        assert_eq!(err.remedy(), Some(processes.clone()));
        // 2 processes for 4 workers: 2 each fit, as 4 processes do.
        let err = Placement::new(0, 2, 1, 2, 2).unwrap_err();
        let per_process = Remedy::set(Setting::WorkersPerProcess, Value::Count(2));
        assert_eq!(err.remedy(), Some(Remedy::one_of([processes, per_process])));
        let err = Placement::new(0, 2, 3, 2, 2).unwrap_err().to_string();
        assert!(err.contains("do not divide 4"), "{err}");
    }

    /// Ranks of several stages: each process holds whole ranks, each rank's every stage
    /// (interleaved's r, r + p; the V's r, 2p − 1 − r), and every worker exactly once.
    #[test]
    fn chunked_layouts_hold_whole_ranks() {
        let interleaved = vec![0, 1, 0, 1];
        let v = vec![0, 1, 1, 0];
        for (processes, k, r, rank_of) in [
            (2, 1, 1, &interleaved),
            (4, 1, 2, &interleaved),
            (2, 2, 2, &v),
            (4, 1, 2, &v),
        ] {
            let mut all = Vec::new();
            for rank in 0..processes {
                let placement =
                    Placement::with_ranks(rank, processes, k, r, rank_of.clone()).unwrap();
                assert_eq!(placement.stages(), 4);
                let local = placement.local();
                assert_eq!(local.len(), 4 * r / processes);
                for id in &local {
                    assert_eq!(placement.process_of(*id), rank);
                    let pipeline_rank = rank_of[id.stage.index()];
                    for s in StageId::range(4).filter(|s| rank_of[s.index()] == pipeline_rank) {
                        assert!(local.contains(&WorkerId::new(id.replica, s)));
                    }
                }
                all.extend(local.iter().map(|id| id.rank(4)));
            }
            all.sort();
            assert_eq!(all, (0..4 * r).collect::<Vec<_>>());
        }
        let p = Placement::with_ranks(1, 2, 1, 1, v.clone()).unwrap();
        let (first, last) = (
            WorkerId::new(ReplicaId(0), StageId(0)),
            WorkerId::new(ReplicaId(0), StageId(3)),
        );
        assert_eq!(p.describe(0), format!("{first},{last}"));
        // 4 processes for 2 ranks of 2 chunks: the count that fits is 2, the ranks.
        let err = Placement::with_ranks(0, 4, 1, 1, v).unwrap_err();
        let processes = Remedy::set(Setting::Processes, Value::Count(2));
        assert_eq!(err.remedy(), Some(processes));
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
