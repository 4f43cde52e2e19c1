//! The process around a run (issue 12, items 7 and 9): `--threads` far beyond the cores is
//! capped with a warning instead of spawning 100 000 threads, and a closed stdout
//! (`pipetrain train | head -1`) loses the lines but neither panics nor stops the training.

use crate::common;
use common::{TINY, scratch};

use std::io::Read;
use std::process::{Command, Stdio};

#[test]
fn threads_beyond_the_cores_are_capped_with_a_warning() {
    let out = Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(["train", "--stages", "2", "--threads", "100000"])
        .args(TINY)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: --threads 100000 × 2 workers") && stderr.contains("per worker"),
        "{stderr}"
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let expected = format!("{} threads/worker", (cores / 2).max(1));
    assert!(stdout.contains(&expected), "{expected}: {stdout}");
}

#[test]
fn a_closed_stdout_neither_panics_nor_stops_training() {
    let tmp = scratch("closed-stdout");
    let checkpoint = tmp.path().join("ck.safetensors");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(["train", "--stages", "2", "--checkpoint"])
        .arg(&checkpoint)
        .args(TINY)
        .args(["--steps", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before the child writes its first line: every write to stdout fails (EPIPE).
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let saved = pipetrain::Checkpoint::read(&checkpoint).expect("the run finished and saved");
    assert_eq!(saved.progress().step, 3);
}
