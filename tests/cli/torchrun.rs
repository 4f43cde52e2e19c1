//! torchrun's environment: `torchrun --nproc-per-node 2 pipetrain train ...` sets `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK` and `MASTER_ADDR` but no MPI launcher's variables. pipetrain does
//! not join torchrun's rendezvous, so it refuses that environment with a usage error naming
//! the variables and the launch that works, rather than start two independent one-process runs.
//!
//! Every machine runs the binary under torchrun's variables set directly, as torchrun sets them
//! for each process. Where torchrun is installed (`$PIPETRAIN_TORCHRUN`, else `torchrun` on the
//! `PATH`, else the PyTorch peer venv's `/tmp/peer-venv/bin/torchrun`, see README) a second
//! test runs the real one; without it that test says so in one line and passes.
//!
//! The other launchers the same (issue 38): Open MPI's, PMI's and Slurm's variables of a world
//! of 2 in a build without MPI (or Slurm's tasks that no MPI plugin connects) once gave a lone
//! run that wrote its checkpoint as if it were the only process.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

/// Every launcher variable pipetrain reads, removed from a test's run before it sets its own.
const LAUNCHER_VARIABLES: [&str; 15] = [
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "PMI_SIZE",
    "PMI_RANK",
    "PMIX_SIZE",
    "PMIX_RANK",
    "SLURM_NTASKS",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
];

/// A launcher's world of 2 that this process cannot join is refused naming its variables, in
/// either build (issue 48 item 5: CI builds only `--features mpi`, where a test of the build
/// without MPI never ran). Without MPI: Open MPI's, PMI's, PMIx's and Slurm's variables, "built
/// without MPI". With MPI: Slurm's tasks that no MPI launcher connects, refused before MPI
/// starts; the launchers' worlds for which MPI is started are `tests/mpi.rs`'s.
#[test]
fn a_launchers_world_this_process_cannot_join_is_refused_naming_its_variables() {
    let tmp = common::scratch("launchers");
    let ck = tmp.path().join("ck.st");
    let mpi = cfg!(feature = "mpi");
    let mut worlds = vec![[("SLURM_NTASKS", "2"), ("SLURM_PROCID", "1")]];
    if !mpi {
        worlds.extend([
            [("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")],
            [("PMI_SIZE", "2"), ("PMI_RANK", "1")],
            [("PMIX_SIZE", "2"), ("PMIX_RANK", "1")],
        ]);
    }
    let why = match mpi {
        true => "no MPI launcher connected the processes",
        false => "this pipetrain was built without MPI",
    };
    for env in worlds {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pipetrain"));
        command
            .arg("train")
            .args(common::TINY)
            .args(["--checkpoint", ck.to_str().unwrap()]);
        for v in LAUNCHER_VARIABLES {
            command.env_remove(v);
        }
        let out = command.envs(env).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(common::USAGE), "{env:?}: {stderr}");
        let named = format!("{}={} {}={}: ", env[0].0, env[0].1, env[1].0, env[1].1);
        assert!(
            stderr.contains(&named)
                && stderr.contains(why)
                && stderr.contains("mpirun -np 2 pipetrain")
                && stderr.contains("srun --mpi=pmix -n 2 pipetrain"),
            "{env:?}: {stderr}"
        );
        assert_eq!(
            stderr.contains("--features mpi"),
            !mpi,
            "{env:?}: a build with MPI is told to build with it, or one without is not: {stderr}"
        );
        assert!(!ck.exists(), "{env:?}: a lone run wrote its checkpoint");
    }
}

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

/// `tune` and `bench` inside a launcher's world ran alone in each process, which `train`
/// refuses; and a world whose variables disagree (`OMPI_COMM_WORLD_SIZE=1 WORLD_SIZE=2`) was
/// not refused (issue 47, class 3).
#[test]
fn tune_bench_and_disagreeing_worlds_are_refused() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = without_launchers(Command::new(env!("CARGO_BIN_EXE_pipetrain")));
        let out = command
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (out.status.code(), printed(&out))
    };
    let world = [("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")];
    for command in ["tune", "bench"] {
        let (code, all) = run(&[command, "--width", "16"], &world);
        assert_eq!(code, Some(common::USAGE), "{command}: {all}");
        assert!(
            all.contains(&format!("`pipetrain {command}` runs in one process"))
                && all.contains("one of 2"),
            "{command}: {all}"
        );
    }
    let disagree = [("OMPI_COMM_WORLD_SIZE", "1"), ("WORLD_SIZE", "2")];
    let (code, all) = run(&[&["train"][..], &common::TINY].concat(), &disagree);
    assert_eq!(code, Some(common::USAGE), "{all}");
    assert!(
        all.contains("OMPI_COMM_WORLD_SIZE=1 WORLD_SIZE=2: the launchers' variables disagree"),
        "{all}"
    );
}
