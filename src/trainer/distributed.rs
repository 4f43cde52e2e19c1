//! Multi-process runs: `mpirun -np 4 pipetrain train --stages 2 --replicas 2` (feature `mpi`).
//!
//! Each process runs its share of the workers ([`Launch::workers_per_process`]); the engine's
//! MPI fabric connects them. Around the training loop this module does what only a
//! multi-process run needs: the launch check (MPI's rank and size against Slurm's and
//! torchrun's variables and the world), rank 0's parameters broadcast to every process, the
//! loss summed over the processes for rank 0 to print, one checkpoint written by rank 0 from
//! every process's part, and the whole trained model gathered on rank 0 for `--verify` and the
//! held-out evaluation. Only rank 0 prints progress and writes metrics, plots and checkpoints.
//!
//! A process is part of an MPI run when a launcher started it: `OMPI_COMM_WORLD_SIZE`
//! (Open MPI), `PMI_SIZE` (MPICH, Slurm's PMI) or `PMIX_RANK` (PMIx) is set. A plain
//! `pipetrain` is a one-process run, as without the feature. torchrun's environment
//! (`WORLD_SIZE` above 1 without an MPI launcher) is refused: pipetrain does not join
//! torchrun's rendezvous, and each process would otherwise train alone. So is any launcher's
//! world of more than one process that this process cannot join ([`unjoinable`]): Open MPI's,
//! PMI's or PMIx's variables in a build without MPI, Slurm's tasks of a step that no MPI plugin
//! connects (`srun -n 2` without `--mpi=pmix`), or a world size that MPI, started, does not
//! see.
//!
//! Every process must train the same thing: at start rank 0's [`Launch::settings`] go to
//! every process, and one that differs (an MPMD command line `mpirun -np 1 pipetrain … : -np 3
//! pipetrain …` that does not repeat them) ends the run with [`|e| Error::Run(RunError::Launch(e))`] naming each
//! setting and both values.
//!
//! A test hook, `PIPETRAIN_TEST_SEED_PER_RANK=1`, initialises each process's model with the
//! seed + its rank (the data keeps the seed): the run must still train from rank 0's
//! weights, which only the broadcast gives the other ranks.

use crate::RunError;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::engine::checkpoint;
use crate::trainer::{Processes, Signal, replicas};
use crate::{Checkpoint, Error, Layer, Pipeline, RunFile, RunFileProblem, schedules::WorkerId};

/// How this process was launched, and what every process must agree on.
#[derive(Clone)]
pub struct Launch {
    /// The words of a refused launch's remedy, chosen on the rank that refuses it (the verdict
    /// reaches the other ranks as text): [`Builder`](crate::remedy::Builder) for the library's,
    /// a front end's own [`Style`](crate::remedy::Style) for its flags.
    pub style: &'static (dyn crate::remedy::Style + Sync),
    /// Pipeline ranks each process runs, as threads connected by channels (MPI between
    /// processes): processes × this must equal `replicas` × `stages`. A rank is one worker, or
    /// under a schedule of several chunks per rank one worker per chunk, taking turns.
    pub workers_per_process: usize,
    /// How long to wait on another process before giving up on it.
    pub comm_timeout: Duration,
    /// Replicas of the pipeline.
    pub replicas: usize,
    /// Pipeline ranks of a replica (model stages, with one stage per rank).
    pub stages: usize,
    /// Per model stage, the pipeline rank that runs it (`Plan::rank_of` of the schedule's plan)
    /// under a schedule of several chunks per rank; empty for one stage per rank. A process
    /// runs whole ranks: all of each one's stages.
    pub stage_ranks: Vec<usize>,
    /// The settings every process must share, as `(name, value)` pairs named as the caller's
    /// user knows them; rank 0's are sent to every process and compared.
    pub settings: Vec<(String, String)>,
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("workers_per_process", &self.workers_per_process)
            .field("comm_timeout", &self.comm_timeout)
            .field("replicas", &self.replicas)
            .field("stages", &self.stages)
            .field("stage_ranks", &self.stage_ranks)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// This process's place in a multi-process run.
pub struct Distributed {
    link: Link,
    rank: usize,
    size: usize,
    local: Vec<WorkerId>,
}

/// Whether a process launcher started this process, with more than one process.
fn launched() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
        .or_else(|| std::env::var_os("PMIX_RANK").map(|_| 0))
}

/// The launchers' variables that say how many processes were started, with the variable of
/// the same launcher that names this one: Open MPI's, PMI's (MPICH, Slurm's PMI) and PMIx's.
/// Slurm's are [`slurm_world`]'s.
const MPI_WORLDS: [(&str, &str); 3] = [
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
    ("PMI_SIZE", "PMI_RANK"),
    ("PMIX_SIZE", "PMIX_RANK"),
];

/// Slurm's tasks in this job step, when they are more than one and this process is one of
/// them: `SLURM_STEP_NUM_TASKS` (set by `srun`), or `SLURM_NTASKS` with a `SLURM_PROCID` above
/// 0. A batch script of `sbatch -n 4` has `SLURM_NTASKS=4` but is one process (rank 0, no step
/// of tasks): it may train alone, or start `mpirun` itself.
fn slurm_world(var: &impl Fn(&str) -> Option<String>) -> Option<(usize, Vec<String>)> {
    let count = |name: &str| var(name)?.trim().parse::<usize>().ok();
    let size = count("SLURM_STEP_NUM_TASKS").or_else(|| {
        count("SLURM_PROCID")
            .filter(|&rank| rank > 0)
            .and(count("SLURM_NTASKS"))
    })?;
    let said = ["SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"]
        .iter()
        .filter_map(|v| var(v).map(|value| format!("{v}={value}")))
        .collect();
    (size > 1).then_some((size, said))
}

/// The largest world size above 1 that a launcher's variables give (Open MPI, PMI, PMIx,
/// Slurm; torchrun's are [`torchrun_refused`]'s), and each of those variables as `NAME=value`.
fn launcher_world(var: &impl Fn(&str) -> Option<String>) -> Option<(usize, Vec<String>)> {
    let mut size = 1;
    let mut said = Vec::new();
    for (world, rank) in MPI_WORLDS {
        let Some(value) = var(world) else { continue };
        if let Some(n) = value.trim().parse::<usize>().ok().filter(|&n| n > 1) {
            size = size.max(n);
            said.push(format!("{world}={value}"));
            said.extend(var(rank).map(|r| format!("{rank}={r}")));
        }
    }
    if let Some((n, slurm)) = slurm_world(var) {
        size = size.max(n);
        said.extend(slurm);
    }
    (size > 1).then_some((size, said))
}

/// The refusal of a world of more than one process (by its launcher's variables) that this
/// process cannot join, where it would otherwise train alone and write its outputs as if it
/// were the only process: every such world in a build without MPI (`mpi` false); with MPI, a
/// Slurm step that no MPI launcher connects (`launched` false), or a world that MPI, started,
/// sees as `mpi_size` = 1. `var` reads a variable (`std::env::var` in a run).
pub(crate) fn unjoinable(
    var: impl Fn(&str) -> Option<String>,
    mpi: bool,
    launched: bool,
    mpi_size: Option<usize>,
) -> Option<String> {
    let (size, said) = launcher_world(&var)?;
    let said = said.join(" ");
    let why = match (mpi, launched, mpi_size) {
        (false, _, _) => "this pipetrain was built without MPI".to_string(),
        (true, false, _) => "no MPI launcher connected the processes (Slurm's tasks without an \
                             MPI plugin, as `srun` without `--mpi=pmix` starts them)"
            .to_string(),
        (true, true, Some(1)) => "MPI, started, sees this process alone".to_string(),
        (true, true, _) => return None,
    };
    let build = match mpi {
        true => String::new(),
        false => "build it with `cargo build --release --features mpi`, then ".to_string(),
    };
    Some(format!(
        "{said}: a launcher started this process as one of {size}, but {why}, so each process \
         would train alone; {build}launch it with `mpirun -np {size} pipetrain ...` or `srun \
         --mpi=pmix -n {size} pipetrain ...`, or unset these variables to train in one process"
    ))
}

/// The launchers' variables that give the number of processes, when two of them disagree
/// (`OMPI_COMM_WORLD_SIZE=1 WORLD_SIZE=2`): which one is this run's cannot be told, so it is
/// refused, naming them. `var` reads a variable (`std::env::var` in a run).
fn disagreeing(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let sizes: Vec<(&str, String)> = [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "WORLD_SIZE",
    ]
    .into_iter()
    .filter_map(|v| Some((v, var(v)?.trim().to_string())))
    .collect();
    let first = sizes.first()?;
    sizes.iter().any(|(_, n)| *n != first.1).then(|| {
        let said: Vec<String> = sizes.iter().map(|(v, n)| format!("{v}={n}")).collect();
        format!(
            "{}: the launchers' variables disagree on the number of processes, so whether this \
             process is one of several cannot be told; unset the variables of the launcher \
             that did not start it",
            said.join(" ")
        )
    })
}

/// torchrun's variables, when they say a multi-process run that no MPI launcher started:
/// the usage error that refuses it. `var` reads a variable (`std::env::var` in a run).
fn torchrun_refused(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let size = var("WORLD_SIZE")?;
    if size.trim().parse::<usize>().is_ok_and(|n| n <= 1) {
        return None;
    }
    let set: Vec<String> = [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    ]
    .iter()
    .filter_map(|v| var(v).map(|value| format!("{v}={value}")))
    .collect();
    Some(format!(
        "{} (torchrun's environment) without an MPI launcher: pipetrain does not join \
         torchrun's rendezvous, so each of the WORLD_SIZE={size} processes would train alone; \
         launch it with `mpirun -np {size} pipetrain ...` (or srun), or unset WORLD_SIZE to \
         train in one process",
        set.join(" ")
    ))
}

impl Distributed {
    /// The run's processes, or `None` when no MPI launcher started this one (or it started
    /// one process that runs every worker).
    ///
    /// # Errors
    /// [`|e| Error::Run(RunError::Launch(e))`]: the launcher's variables disagree with MPI, the processes cannot
    /// hold the world, or they were given different settings (every process reports the same
    /// error); torchrun's variables without an MPI launcher; a multi-process launch of a build
    /// without MPI. [`Error::Engine`] (MPI's error, with its remedy): MPI cannot be initialised.
    pub fn start(launch: &Launch) -> Result<Option<Self>, Error> {
        if let Some(refused) = Self::start_refused() {
            return Err(Error::Run(crate::RunError::Launch(refused)));
        }
        let Some(processes) = launched() else {
            return Ok(None);
        };
        Link::start(launch, processes)
    }

    /// Whether this process prints and writes the run's outputs (rank 0).
    pub fn is_leader(&self) -> bool {
        self.rank == 0
    }

    /// Whether a process launcher started this process (it is one of several).
    pub fn launched() -> bool {
        launched().is_some()
    }

    /// Refuses to run `command`, a subcommand that runs in one process (`tune`, `bench`), in a
    /// launcher's world of several: each process would run it alone, as `train` refuses to.
    ///
    /// # Errors
    /// [`RunError::Launch`], naming the command, the variables and the remedy.
    pub fn alone(command: &str) -> Result<(), Error> {
        if let Some(refused) = Self::start_refused() {
            return Err(Error::Run(RunError::Launch(refused)));
        }
        match Self::processes() {
            0 | 1 => Ok(()),
            n => Err(Error::Run(RunError::Launch(format!(
                "`pipetrain {command}` runs in one process, but a launcher started this one as \
                 one of {n}, so each would run it alone; run it without mpirun or srun"
            )))),
        }
    }

    /// How many processes the launcher that started this one says it started (1 without a
    /// launcher; 0 when its variables name this process's rank but not the world's size):
    /// known before MPI starts, so that the names every rank will write are checked first.
    pub fn processes() -> usize {
        launched().unwrap_or(1)
    }

    /// Why [`start`](Self::start) refuses this process before any MPI call (torchrun's
    /// environment without an MPI launcher; a launcher's world of several processes that this
    /// process cannot join), if it does.
    pub fn start_refused() -> Option<String> {
        let var = |v: &str| std::env::var(v).ok();
        if let Some(refused) = disagreeing(var) {
            return Some(refused);
        }
        let launched = launched().is_some();
        let torchrun = match launched {
            true => None,
            false => torchrun_refused(var),
        };
        torchrun.or_else(|| unjoinable(var, cfg!(feature = "mpi"), launched, None))
    }

    /// The seed this process initialises its model with: `seed`, or `seed` + its rank under
    /// the test hook `PIPETRAIN_TEST_SEED_PER_RANK=1` (see the module's documentation).
    pub fn init_seed(&self, seed: u64) -> u64 {
        match std::env::var("PIPETRAIN_TEST_SEED_PER_RANK").as_deref() {
            Ok("1") => seed.wrapping_add(self.rank as u64),
            _ => seed,
        }
    }

    /// The workers this process runs.
    pub fn local(&self) -> Vec<WorkerId> {
        self.local.clone()
    }

    /// What this process runs, for rank 0's opening lines.
    pub fn describe(&self) -> String {
        let workers: Vec<String> = self.local.iter().map(ToString::to_string).collect();
        format!(
            "mpi: {} processes; rank {} runs {}; every rank starts from rank 0's weights",
            self.size,
            self.rank,
            workers.join(" and ")
        )
    }

    /// The fabric connecting this process's workers to the others'.
    pub fn fabric(&self) -> Box<dyn crate::engine::Fabric> {
        self.link.fabric()
    }

    /// `path` with the rank before its extension: `trace.json` → `trace.rank3.json`
    /// ([`crate::trainer::paths::rank_path`]).
    pub fn per_rank(&self, path: &Path) -> std::path::PathBuf {
        crate::trainer::paths::rank_path(path, self.rank)
    }

    /// Rank 0's `layers` on every process (as DDP and Horovod start): whatever each process
    /// initialised or loaded, they all start from the same bits.
    pub fn broadcast_model<L: Layer>(
        &self,
        layers: Vec<L>,
        optimizer: &str,
    ) -> Result<Vec<L>, Error> {
        let mine = match self.is_leader() {
            true => Some(checkpoint::model_bytes(
                &layers,
                optimizer,
                &Default::default(),
            )?),
            false => None,
        };
        let bytes = self.link.broadcast(mine)?;
        if self.is_leader() {
            return Ok(layers);
        }
        let checkpoint = Checkpoint::from_bytes("rank 0's initial model", bytes)?;
        Ok(checkpoint.load_model(layers)?)
    }

    /// Every process reads the same data: `fingerprint` (this process's data by its contents,
    /// [`crate::trainer::fingerprint`]) is compared with every other process's, and all of
    /// them refuse the run when one differs. Per-node copies of a data set (`mpirun -wdir`)
    /// that are not the same trained with rc 0 before, each rank on its own data.
    ///
    /// # Errors
    /// [`RunError::Launch`] on every process, naming the first rank whose data differs from
    /// rank 0's, with both; an MPI error.
    pub fn same_data(&self, fingerprint: &str) -> Result<(), Error> {
        let all = self.link.gather(fingerprint.as_bytes().to_vec())?;
        let verdict = all.map(|all| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let zero = all.first().map(|b| text(b)).unwrap_or_default();
            all.iter()
                .enumerate()
                .find(|(_, b)| text(b) != zero)
                .map(|(rank, b)| {
                    format!(
                        "rank {rank} reads other data than rank 0: {} (rank 0: {zero}); every \
                         process must train on the same data: give each the same file (a copy \
                         on each node must be identical)",
                        text(b)
                    )
                })
                .unwrap_or_default()
                .into_bytes()
        });
        let verdict = self.link.broadcast(verdict)?;
        match verdict.is_empty() {
            true => Ok(()),
            false => Err(Error::Run(RunError::Launch(
                String::from_utf8_lossy(&verdict).into_owned(),
            ))),
        }
    }

    /// The checkpoint at `path` as rank 0 read it, on every process.
    ///
    /// # Errors
    /// [`RunError::RunFile`](crate::RunError::RunFile) ([`RunFile::Resume`]): rank 0 cannot read it, or it is no checkpoint.
    pub fn broadcast_checkpoint(&self, path: &Path) -> Result<Checkpoint, Error> {
        let failed = |reason: RunFileProblem| {
            Error::Run(RunError::RunFile {
                file: RunFile::Resume,
                path: path.to_path_buf(),
                reason,
            })
        };
        let mine = match self.is_leader() {
            true => Some(std::fs::read(path).map_err(|e| {
                let error = failed(e.into());
                self.link.notify(error.to_string());
                error
            })?),
            false => None,
        };
        let bytes = self.link.broadcast(mine)?;
        Checkpoint::from_bytes(path, bytes).map_err(|e| failed(e.into()))
    }

    /// The sum over the processes of `loss` (each its local last stages' share), in rank
    /// order, on rank 0; 0 elsewhere.
    pub fn total_loss(&self, loss: f64) -> Result<f64, Error> {
        let all = self.link.gather(loss.to_le_bytes().to_vec())?;
        Ok(all.map_or(0.0, |all| {
            all.iter()
                .map(|b| f64::from_le_bytes(b[..8].try_into().expect("8 bytes per loss")))
                .sum()
        }))
    }

    /// The stop every process agrees on (see
    /// [`Processes::agree_stop`](crate::trainer::Processes::agree_stop)): each process's signal
    /// gathered on rank 0, the lowest rank's that arrived sent back to every process.
    pub fn agree_stop(&self, local: Option<Signal>) -> Result<Option<Signal>, Error> {
        let all = self.link.gather(vec![Signal::to_byte(local)])?;
        let agreed = all.map(|all| vec![all.iter().map(|b| b[0]).find(|&b| b != 0).unwrap_or(0)]);
        let agreed = self.link.broadcast(agreed)?;
        Ok(Signal::from_byte(agreed[0]))
    }

    /// Every process's part of the checkpoint, merged on rank 0 (`None` elsewhere).
    fn gather_checkpoint<L: Layer>(
        &self,
        pipeline: &Pipeline<L>,
        path: &Path,
        extra: BTreeMap<String, String>,
    ) -> Result<Option<Vec<Vec<u8>>>, Error> {
        let part = pipeline.checkpoint_part(path, extra)?;
        self.link.gather(part)
    }

    /// The lowest replica whose weights differ from replica 0's in some stage, on rank 0 (each
    /// process sends a digest of each local worker's weights); `None` elsewhere and where the
    /// replicas agree.
    pub fn replicas_apart<L: Layer>(&self, pipeline: &Pipeline<L>) -> Result<Option<usize>, Error> {
        let all = self.link.gather(replicas::digests(pipeline))?;
        Ok(all.and_then(|all| replicas::first_apart(&all.concat())))
    }

    /// Writes one checkpoint at `path` from every process's part (rank 0 writes it,
    /// atomically).
    pub fn save_checkpoint<L: Layer>(
        &self,
        pipeline: &Pipeline<L>,
        path: &Path,
        extra: BTreeMap<String, String>,
    ) -> Result<(), Error> {
        if let Some(parts) = self.gather_checkpoint(pipeline, path, extra)? {
            checkpoint::write_parts(path, &parts)?;
        }
        Ok(())
    }

    /// The whole trained model (replica 0's values of every stage) on rank 0, `None`
    /// elsewhere; `template` is a model of the same shape.
    pub fn gather_model<L: Layer>(
        &self,
        pipeline: &Pipeline<L>,
        template: Vec<L>,
    ) -> Result<Option<Vec<L>>, Error> {
        let what = Path::new("the trained model");
        let Some(parts) = self.gather_checkpoint(pipeline, what, Default::default())? else {
            return Ok(None);
        };
        // Replica 0's copy of each stage: the replicas' agreement is checked apart
        // ([`replicas_apart`](Self::replicas_apart)), where it is wanted.
        let bytes = checkpoint::merge_parts(what, &parts, checkpoint::Copies::FirstKept)?;
        Ok(Some(
            Checkpoint::from_bytes(what, bytes)?.load_model(template)?,
        ))
    }

    /// Ends MPI: a clean exit finalizes it; after a failure the other processes are told (with
    /// `error`, prefixed by this rank) and the process exits without waiting for them.
    pub fn finish(&self, error: Option<&str>) {
        if let Some(error) = error {
            self.link.notify(error.to_string());
        }
        self.link.finish(error.is_none());
    }

    /// `message` prefixed with this process's rank and workers, for errors.
    pub fn name(&self, message: &str) -> String {
        let workers: Vec<String> = self.local.iter().map(ToString::to_string).collect();
        format!(
            "rank {} of {} ({}): {message}",
            self.rank,
            self.size,
            workers.join(" and ")
        )
    }
}

/// A multi-process run as the [`Trainer`](crate::trainer::Trainer) takes part in it: the
/// processes, and a model of the same shape that rank 0 gathers the trained model into.
pub struct Shared<'d, L> {
    dist: &'d Distributed,
    template: Vec<L>,
}

impl<'d, L: Layer> Shared<'d, L> {
    /// `dist`'s processes, gathering models into copies of `template`.
    pub fn new(dist: &'d Distributed, template: Vec<L>) -> Self {
        Self { dist, template }
    }
}

impl<L: Layer> Processes<L> for Shared<'_, L> {
    fn is_leader(&self) -> bool {
        self.dist.is_leader()
    }

    fn read_checkpoint(&self, path: &Path) -> Result<Checkpoint, Error> {
        self.dist.broadcast_checkpoint(path)
    }

    fn total_loss(&self, loss: f64) -> Result<f64, Error> {
        self.dist.total_loss(loss)
    }

    fn agree_stop(&self, local: Option<Signal>) -> Result<Option<Signal>, Error> {
        self.dist.agree_stop(local)
    }

    fn save_checkpoint(
        &self,
        pipeline: &Pipeline<L>,
        path: &Path,
        extra: BTreeMap<String, String>,
    ) -> Result<(), Error> {
        self.dist.save_checkpoint(pipeline, path, extra)
    }

    fn replicas_apart(&self, pipeline: &Pipeline<L>) -> Result<Option<usize>, Error> {
        self.dist.replicas_apart(pipeline)
    }

    fn gather_model(&self, pipeline: &Pipeline<L>) -> Result<Option<Vec<L>>, Error> {
        self.dist.gather_model(pipeline, self.template.clone())
    }
}

#[cfg(feature = "mpi")]
mod link {
    use crate::engine::EngineError;
    use crate::engine::mpi::{Comm, MpiFabric, Placement, check_environment};

    use super::{Distributed, Launch};
    use crate::Error;
    use crate::remedy::Remedied;
    use crate::trainer::agreement;

    /// An MPI error: another process, or the communication with it, failed. It keeps its
    /// type, so each front end words its remedy (the communication timeout) its own way.
    fn failed(e: EngineError) -> Error {
        Error::Engine(e)
    }

    /// The MPI communication thread and this process's placement.
    pub struct Link {
        comm: Comm,
        placement: Placement,
    }

    impl Link {
        pub fn start(launch: &Launch, _processes: usize) -> Result<Option<Distributed>, Error> {
            let comm = Comm::start(launch.comm_timeout).map_err(failed)?;
            let id = comm.identity();
            if id.size == 1 {
                // A launcher's world of several processes that MPI does not see: each would
                // train alone.
                let env = |v: &str| std::env::var(v).ok();
                if let Some(refused) = super::unjoinable(env, true, true, Some(1)) {
                    comm.shutdown(true);
                    return Err(Error::Run(crate::RunError::Launch(refused)));
                }
            }
            if id.size == 1 && launch.workers_per_process == 1 {
                // `mpirun -np 1`: the whole world in this process, as without a launcher.
                comm.shutdown(true);
                return Ok(None);
            }
            let checked =
                check_environment(id.rank, id.size, id.local_rank, |v| std::env::var(v).ok())
                    .and_then(|()| {
                        let stage_ranks = match launch.stage_ranks.is_empty() {
                            true => (0..launch.stages).collect(),
                            false => launch.stage_ranks.clone(),
                        };
                        Placement::with_ranks(
                            id.rank,
                            id.size,
                            launch.workers_per_process,
                            launch.replicas,
                            stage_ranks,
                        )
                    });
            // Rank 0's settings, against this process's.
            let ours = &launch.settings;
            let zero = comm
                .broadcast((id.rank == 0).then(|| agreement::encode(ours)))
                .map_err(failed)?;
            let theirs = match id.rank {
                0 => ours.clone(),
                _ => agreement::parse(&zero),
            };
            let differs = agreement::disagreement(id.rank, ours, &theirs);
            // Every process must stop if one cannot go on: rank 0 collects the verdicts and
            // tells every process the first error.
            let mine = match (&checked, differs) {
                (Err(e), _) => {
                    format!("rank {}: {}", id.rank, e.explain(launch.style)).into_bytes()
                }
                (Ok(_), Some(differs)) => differs.into_bytes(),
                (Ok(_), None) => Vec::new(),
            };
            let verdict = comm
                .gather(mine)
                .map_err(failed)?
                .map(|all| all.into_iter().find(|e| !e.is_empty()).unwrap_or_default());
            let verdict = comm.broadcast(verdict).map_err(failed)?;
            if !verdict.is_empty() {
                comm.shutdown(true);
                return Err(Error::Run(crate::RunError::Launch(
                    String::from_utf8_lossy(&verdict).into_owned(),
                )));
            }
            let placement = checked.expect("no process reported an error");
            Ok(Some(Distributed {
                rank: id.rank,
                size: id.size,
                local: placement.local(),
                link: Link { comm, placement },
            }))
        }

        pub fn fabric(&self) -> Box<dyn crate::engine::Fabric> {
            Box::new(MpiFabric::new(self.comm.clone(), self.placement.clone()))
        }

        pub fn broadcast(&self, bytes: Option<Vec<u8>>) -> Result<Vec<u8>, Error> {
            self.comm.broadcast(bytes).map_err(failed)
        }

        pub fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, Error> {
            self.comm.gather(bytes).map_err(failed)
        }

        pub fn notify(&self, message: String) {
            self.comm.notify_failure(message);
        }

        pub fn finish(&self, clean: bool) {
            self.comm.shutdown(clean);
        }
    }
}

#[cfg(not(feature = "mpi"))]
mod link {
    use super::{Distributed, Launch};
    use crate::Error;

    /// No MPI in this build: a multi-process launch is refused, so no value exists.
    pub enum Link {}

    impl Link {
        pub fn start(_launch: &Launch, processes: usize) -> Result<Option<Distributed>, Error> {
            if processes <= 1 {
                return Ok(None);
            }
            Err(Error::Run(crate::RunError::Launch(format!(
                "an MPI launcher started {processes} processes, but this pipetrain was built \
                 without MPI; build it with `cargo build --release --features mpi`"
            ))))
        }

        pub fn fabric(&self) -> Box<dyn crate::engine::Fabric> {
            match *self {}
        }

        pub fn broadcast(&self, _bytes: Option<Vec<u8>>) -> Result<Vec<u8>, Error> {
            match *self {}
        }

        pub fn gather(&self, _bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, Error> {
            match *self {}
        }

        pub fn notify(&self, _message: String) {
            match *self {}
        }

        pub fn finish(&self, _clean: bool) {
            match *self {}
        }
    }
}

use link::Link;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_without_mpi_is_refused_naming_its_variables() {
        let torchrun = |k: &str| match k {
            "RANK" => Some("1".to_string()),
            "WORLD_SIZE" => Some("2".to_string()),
            "MASTER_ADDR" => Some("127.0.0.1".to_string()),
            _ => None,
        };
        let e = torchrun_refused(torchrun).unwrap();
        assert!(
            e.contains("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1"),
            "{e}"
        );
        assert!(e.contains("mpirun -np 2 pipetrain"), "{e}");
        assert_eq!(torchrun_refused(|_| None), None);
        let one = |k: &str| (k == "WORLD_SIZE").then(|| "1".to_string());
        assert_eq!(torchrun_refused(one), None);
    }

    #[test]
    fn a_launchers_world_this_process_cannot_join_is_refused_naming_its_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let ompi = env(&[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")]);
        let pmi = env(&[("PMI_SIZE", "2"), ("PMI_RANK", "1")]);
        let srun = env(&[("SLURM_NTASKS", "2"), ("SLURM_PROCID", "1")]);
        let step = env(&[("SLURM_NTASKS", "4"), ("SLURM_STEP_NUM_TASKS", "2")]);
        let batch = env(&[("SLURM_NTASKS", "4"), ("SLURM_PROCID", "0")]);
        let e = unjoinable(ompi, false, true, None).unwrap();
        assert!(
            e.starts_with("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1: ")
                && e.contains("built without MPI")
                && e.contains("--features mpi")
                && e.contains("mpirun -np 2 pipetrain"),
            "{e}"
        );
        let e = unjoinable(pmi, false, true, None).unwrap();
        assert!(e.starts_with("PMI_SIZE=2 PMI_RANK=1: "), "{e}");
        // PMIx (Open MPI 5's launcher, `srun --mpi=pmix`): its world, and its rank alone.
        let pmix = env(&[("PMIX_SIZE", "2"), ("PMIX_RANK", "1")]);
        let e = unjoinable(pmix, false, true, None).unwrap();
        assert!(
            e.starts_with("PMIX_SIZE=2 PMIX_RANK=1: ") && e.contains("one of 2"),
            "{e}"
        );
        assert_eq!(unjoinable(pmix, true, true, None), None);
        assert!(unjoinable(pmix, true, true, Some(1)).is_some());
        for mpi in [false, true] {
            let e = unjoinable(srun, mpi, false, None).unwrap();
            assert!(
                e.starts_with("SLURM_NTASKS=2 SLURM_PROCID=1: ")
                    && e.contains("srun --mpi=pmix -n 2"),
                "{e}"
            );
            assert!(
                unjoinable(step, mpi, false, None)
                    .unwrap()
                    .contains("one of 2")
            );
            // A batch script is one process.
            assert_eq!(unjoinable(batch, mpi, false, None), None);
        }
        // An MPI build under an MPI launcher joins, unless MPI sees one process.
        assert_eq!(unjoinable(ompi, true, true, None), None);
        assert_eq!(unjoinable(ompi, true, true, Some(2)), None);
        let e = unjoinable(ompi, true, true, Some(1)).unwrap();
        assert!(e.contains("MPI, started, sees this process alone"), "{e}");
        assert!(!e.contains("--features mpi"), "{e}");
        assert_eq!(
            unjoinable(env(&[("PMI_SIZE", "1")]), false, true, None),
            None
        );
    }
}
