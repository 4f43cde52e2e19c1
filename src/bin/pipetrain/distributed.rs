//! Multi-process runs from the flags: `--workers-per-process` and `--comm-timeout` checked,
//! then the library's [`pipetrain::trainer::Distributed`] started with the training flags
//! every process must share (`settings`).

use std::time::Duration;

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
    let launch = Launch {
        style: &crate::style::Flags,
        workers_per_process: args.workers_per_process,
        // Checked above wherever it is used (a launched run of an MPI build).
        comm_timeout: match timeout_valid {
            true => Duration::from_secs_f64(args.comm_timeout.min(1e9)),
            false => Duration::from_secs(30),
        },
        replicas: args.replicas,
        stages: args.stages(),
        settings: if launched {
            crate::settings::of(args)
        } else {
            Vec::new()
        },
    };
    Distributed::start(&launch).map_err(of_run)
}
