//! torchrun's environment: `torchrun --nproc-per-node 2 pipetrain train ...` sets `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK` and `MASTER_ADDR` but no MPI launcher's variables. pipetrain does
//! not join torchrun's rendezvous, so it refuses that environment with a usage error naming
//! the variables and the launch that works, rather than start two independent one-process runs.
//!
//! Runs the real torchrun: `$PIPETRAIN_TORCHRUN`, else `torchrun` on the `PATH`, else the
//! PyTorch peer venv's (`/tmp/peer-venv/bin/torchrun`, see README). Without one the test says
//! so in one line and passes.

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
    let out = Command::new(&torchrun)
        .args(["--standalone", "--nproc-per-node", "2", "--no-python"])
        .arg(env!("CARGO_BIN_EXE_pipetrain"))
        .args(["train", "--stages", "2"])
        .args(common::TINY)
        // A torchrun started under mpirun would pass Open MPI's variables on.
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .env_remove("PMI_SIZE")
        .env_remove("PMIX_SIZE")
        .env_remove("PMIX_RANK")
        .output()
        .expect("torchrun runs");
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "torchrun {}: {all}", out.status);
    // Both processes refuse, each naming its own rank.
    for rank in 0..2 {
        assert!(
            all.contains(&format!("RANK={rank} WORLD_SIZE=2")),
            "process {rank} names torchrun's variables: {all}"
        );
    }
    assert!(
        all.contains("(torchrun's environment) without an MPI launcher")
            && all.contains("mpirun -np 2 pipetrain"),
        "{all}"
    );
    assert!(!all.contains("step    1/"), "nothing trained: {all}");
}
