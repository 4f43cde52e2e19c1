//! torchrun's environment: `torchrun --nproc-per-node 2 pipetrain train ...` sets `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK` and `MASTER_ADDR` but no MPI launcher's variables. pipetrain does
//! not join torchrun's rendezvous, so it refuses that environment with a usage error naming
//! the variables and the launch that works, rather than start two independent one-process runs.
//!
//! Every machine runs the binary under torchrun's variables set directly, as torchrun sets them
//! for each process. Where torchrun is installed (`$PIPETRAIN_TORCHRUN`, else `torchrun` on the
//! `PATH`, else the PyTorch peer venv's `/tmp/peer-venv/bin/torchrun`, see README) a second
//! test runs the real one; without it that test says so in one line and passes.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// The torchrun to run, if one is installed.
fn torchrun() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PIPETRAIN_TORCHRUN") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("torchrun"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let venv = PathBuf::from("/tmp/peer-venv/bin/torchrun");
        venv.is_file().then_some(venv)
    })
}

/// What the refusal must say for a process of a 2-process torchrun launch (docs/mpi.md): the
/// variables it found, and the launch that works.
fn assert_refused(all: &str) {
    assert!(
        all.contains("(torchrun's environment) without an MPI launcher")
            && all.contains("mpirun -np 2 pipetrain"),
        "{all}"
    );
    assert!(!all.contains("step    1/"), "nothing trained: {all}");
}

/// Stdout and stderr of `out`.
fn printed(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `pipetrain` with the launcher variables of the environment removed: a test run under
/// mpirun (or torchrun) would pass its own on.
fn without_launchers(mut command: Command) -> Command {
    for var in [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "PMIX_RANK",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    ] {
        command.env_remove(var);
    }
    command
}

/// torchrun's variables for rank 0 of 2, set on the binary directly (no torchrun needed): a
/// usage error (exit 2) naming each variable and `mpirun -np 2`, before anything trains.
#[test]
fn torchrun_variables_without_an_mpi_launcher_exit_2_naming_them() {
    let mut command = without_launchers(Command::new(env!("CARGO_BIN_EXE_pipetrain")));
    let out = command
        .args(["train", "--stages", "2"])
        .args(common::TINY)
        .envs([
            ("WORLD_SIZE", "2"),
            ("RANK", "0"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "127.0.0.1"),
        ])
        .output()
        .expect("pipetrain runs");
    let all = printed(&out);
    assert_eq!(out.status.code(), Some(common::USAGE), "{all}");
    assert!(
        all.contains("RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 (torchrun's"),
        "{all}"
    );
    assert_refused(&all);
}

#[test]
fn torchrun_launches_are_refused_naming_the_launch_that_works() {
    let Some(torchrun) = torchrun() else {
        eprintln!(
            "SKIPPED torchrun_launches_are_refused_naming_the_launch_that_works: no torchrun \
             (set PIPETRAIN_TORCHRUN, or install torch: python3 -m venv /tmp/peer-venv && \
             /tmp/peer-venv/bin/pip install torch)"
        );
        return;
    };
    let mut command = without_launchers(Command::new(&torchrun));
    let out = command
        .args(["--standalone", "--nproc-per-node", "2", "--no-python"])
        .arg(env!("CARGO_BIN_EXE_pipetrain"))
        .args(["train", "--stages", "2"])
        .args(common::TINY)
        .output()
        .expect("torchrun runs");
    let all = printed(&out);
    assert!(!out.status.success(), "torchrun {}: {all}", out.status);
    // Both processes refuse, each naming its own rank.
    for rank in 0..2 {
        assert!(
            all.contains(&format!("RANK={rank} WORLD_SIZE=2")),
            "process {rank} names torchrun's variables: {all}"
        );
    }
    assert_refused(&all);
}
