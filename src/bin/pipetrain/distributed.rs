//! Multi-process runs from the flags: `--workers-per-process` and `--comm-timeout` checked,
//! then the library's [`pipetrain::trainer::Distributed`] started with the training flags
//! every process must share (`settings`).

use std::time::Duration;

use pipetrain::schedules::StageId;
use pipetrain::trainer::{Distributed, Launch};

use crate::args::TrainArgs;
use crate::failure::Failure;
use crate::run_failure::of_run;

/// The run's processes, or `None` when no MPI launcher started this one.
///
/// # Errors
/// Usage: a flag of a multi-process run out of range or given to a one-process run, or what
/// [`Distributed::start`] refuses; runtime: MPI cannot be initialised.
pub fn start(args: &TrainArgs) -> Result<Option<Distributed>, Failure> {
    if args.workers_per_process == 0 {
        return Err(Failure::usage(
            "--workers-per-process 0: each process runs at least one worker (a stage of a \
             replica); give 1 or more, with mpirun -np (replicas × stages) / that many",
        ));
    }
    let launched = Distributed::launched();
    if !launched && args.workers_per_process != 1 && Distributed::start_refused().is_none() {
        return Err(Failure::usage(format!(
            "--workers-per-process {}: this is a one-process run (no MPI launcher started it); \
             launch it with mpirun or srun",
            args.workers_per_process
        )));
    }
    let timeout_valid = args.comm_timeout.is_finite() && args.comm_timeout > 0.0;
    if launched && cfg!(feature = "mpi") && !timeout_valid {
        return Err(Failure::usage(format!(
            "--comm-timeout {}: must be a positive number of seconds",
            args.comm_timeout
        )));
    }
    let (stages, stage_ranks) = match launched {
        true => ranks(args)?,
        false => (args.stages(), Vec::new()),
    };
    let launch = Launch {
        style: &crate::style::Flags,
        workers_per_process: args.workers_per_process,
        // Checked above wherever it is used (a launched run of an MPI build).
        comm_timeout: match timeout_valid {
            true => Duration::from_secs_f64(args.comm_timeout.min(1e9)),
            false => Duration::from_secs(30),
        },
        replicas: args.replicas,
        stages,
        stage_ranks,
        settings: if launched {
            crate::settings::of(args)
        } else {
            Vec::new()
        },
    };
    Distributed::start(&launch).map_err(of_run)
}

/// The pipeline ranks of a replica and, under a schedule of several chunks per rank, the rank
/// of each model stage as the schedule's plan places it (`Plan::rank_of`): a process runs whole
/// ranks. A plan the schedule cannot make (a micro-batch count it refuses) is refused here, as
/// the builder refuses it in one process.
fn ranks(args: &TrainArgs) -> Result<(usize, Vec<usize>), Failure> {
    let schedule = crate::schedule::of(
        args.schedule,
        args.virtual_stages.unwrap_or(2),
        args.plan.as_deref(),
    )?;
    let v = schedule.virtual_stages();
    // `--balance` lists the chunks; `--stages` counts the ranks.
    let chunks = match (&args.balance, args.stages) {
        (Some(balance), _) => balance.len(),
        (None, stages) => stages.unwrap_or(crate::args::DEFAULT_STAGES) * v,
    };
    if v == 1 {
        return Ok((args.stages(), Vec::new()));
    }
    match schedule.plan(chunks, args.micro_batches) {
        Ok(plan) => Ok((
            plan.ranks(),
            StageId::range(chunks)
                .map(|s| plan.rank_of(s).unwrap_or(s.index()))
                .collect(),
        )),
        Err(e) => Err(Failure::of_build(e.into())),
    }
}
