//! Checkpoint writes that lose nothing (issue 12, item 4): a destination that cannot be
//! written is refused before training, a non-regular file is never replaced, two runs on one
//! path do not share a temp file, and a kill inside a write (injected deterministically between
//! the write and the rename) leaves the previous checkpoint, which resumes.

use crate::common;
use common::{USAGE, failure_with, scratch, success, temp_files, tensors};

use std::os::unix::fs::FileTypeExt;
use std::process::{Command, Stdio};

/// A tiny Adam run of `steps` steps saving to `checkpoint` every step, then `extra`.
fn run_args<'a>(checkpoint: &'a str, steps: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let base = [
        "train",
        "--width",
        "8",
        "--hidden-layers",
        "1",
        "--batch",
        "8",
        "--micro-batches",
        "2",
        "--optimizer",
        "adam",
        "--steps",
        steps,
        "--checkpoint",
        checkpoint,
        "--checkpoint-every",
        "1",
    ];
    base.iter().chain(extra).copied().collect()
}

#[test]
fn an_unwritable_destination_fails_before_training() {
    // It used to fail after the whole run, losing the trained weights.
    let out = common::pipetrain(&run_args("/proc/ck.safetensors", "1", &[]));
    assert_eq!(out.status.code(), Some(USAGE));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("--checkpoint /proc/ck.safetensors") && e.contains("choose a writable"),
        "{e}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("step "));
}

#[test]
fn a_device_node_or_directory_is_never_replaced() {
    // `--checkpoint /dev/full` once replaced the device node with a regular file.
    let e = failure_with(USAGE, &run_args("/dev/full", "1", &[]));
    assert!(
        e.contains("/dev/full is a device") && e.contains("give the path of a file"),
        "{e}"
    );
    assert!(
        std::fs::metadata("/dev/full")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    let tmp = scratch("ckpt-dir");
    let dir = tmp.path().join("ck");
    std::fs::create_dir(&dir).unwrap();
    let e = failure_with(USAGE, &run_args(dir.to_str().unwrap(), "1", &[]));
    assert!(e.contains("is a directory"), "{e}");
    assert!(dir.is_dir());
    let link = tmp.path().join("link.safetensors");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let e = failure_with(USAGE, &run_args(link.to_str().unwrap(), "1", &[]));
    assert!(e.contains("is a symbolic link"), "{e}");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(temp_files(tmp.path()).is_empty());
}

#[test]
fn two_runs_on_one_path_both_write_and_leave_no_temp_file() {
    let tmp = scratch("ckpt-two");
    let path = tmp.path().join("ck.safetensors");
    let p = path.to_str().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_pipetrain"))
                .args(run_args(p, "6", &[]))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(pipetrain::Checkpoint::read(&path).is_ok());
    assert!(temp_files(tmp.path()).is_empty());
}

#[test]
fn a_kill_inside_a_write_keeps_the_previous_checkpoint_which_resumes() {
    let tmp = scratch("ckpt-kill");
    let path = tmp.path().join("ck.safetensors");
    let p = path.to_str().unwrap();
    // Aborted inside the second write (step 2's), after the temp file, before the rename.
    let out = Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(run_args(p, "3", &[]))
        .env("PIPETRAIN_FAULT_ABORT_BEFORE_RENAME", "2")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("aborting before renaming"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        temp_files(tmp.path()).len(),
        1,
        "the kill landed inside the write"
    );
    let saved = pipetrain::Checkpoint::read(&path).expect("step 1's checkpoint loads");
    assert_eq!(saved.progress().step, 1);
    // Resuming it ends exactly where an uninterrupted run ends.
    let resumed = success(&run_args(p, "3", &["--resume", p]));
    assert!(resumed.contains("resumed:"), "{resumed}");
    // The killed writer is gone: its temp file was swept at the next start (issue 27).
    assert!(
        temp_files(tmp.path()).is_empty(),
        "{:?}",
        temp_files(tmp.path())
    );
    let whole = tmp.path().join("whole.safetensors");
    success(&run_args(whole.to_str().unwrap(), "3", &[]));
    assert_eq!(tensors(&path), tensors(&whole));
}

/// An fsync that fails is reported, never passed over (docs/training.md): the fault injection
/// `PIPETRAIN_FAULT_FSYNC=N` fails the process's N-th fsync with an I/O error, as a failing disk
/// does. A 3-step run that checkpoints every step syncs the start's probe (1st), then each
/// checkpoint's temp file and directory: step 2's file (4th) fails the run naming the checkpoint and
/// leaves step 1's checkpoint; step 2's directory (5th) fails it naming the directory, step 2's
/// file in place. No temp file is left either way.
#[test]
fn a_failed_fsync_ends_the_run_naming_the_file_or_directory() {
    for (n, step) in [("4", 2 - 1), ("5", 2)] {
        let tmp = scratch("ckpt-fsync");
        let path = tmp.path().join("ck.safetensors");
        let args = run_args(path.to_str().unwrap(), "3", &[]);
        let out = Command::new(env!("CARGO_BIN_EXE_pipetrain"))
            .args(&args)
            .env("PIPETRAIN_FAULT_FSYNC", n)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(common::RUNTIME), "{out:?}");
        let e = common::stderr_of_failure(&args, out);
        let injected = format!("Input/output error (injected by PIPETRAIN_FAULT_FSYNC={n})");
        // The checkpoint given (not the temp file `.ck.safetensors.<pid>@<host>.<random>.tmp`
        // it is written through, which it named before: issue 38), or the directory.
        let named = match n {
            "4" => format!("--checkpoint: {}: ", path.display()),
            _ => format!("fsync of directory {} failed", tmp.path().display()),
        };
        assert!(
            e.contains("error: --checkpoint: ") && e.contains(&injected) && e.contains(&named),
            "{e}"
        );
        let saved = pipetrain::Checkpoint::read(&path).expect("a whole checkpoint");
        assert_eq!(saved.progress().step, step, "fsync {n}: {e}");
        assert!(
            temp_files(tmp.path()).is_empty(),
            "{:?}",
            temp_files(tmp.path())
        );
    }
}

/// The metrics rows of a checkpoint survive a crash (issue 47, class 1): they lived only in a
/// hidden temp file until the run ended, so after a `kill -9` the `--metrics` file did not
/// exist, and the resume swept the temp file. Now each checkpoint puts the rows so far in
/// place; the resume continues them, one row per step.
#[test]
fn a_crash_keeps_the_metrics_rows_of_the_last_checkpoint_and_the_resume_continues_them() {
    let tmp = scratch("ckpt-kill-metrics");
    let path = tmp.path().join("ck.safetensors");
    let metrics = tmp.path().join("m.csv");
    let (p, m) = (path.to_str().unwrap(), metrics.to_str().unwrap());
    // Writes: step 1's checkpoint, step 1's rows, step 2's checkpoint: aborted inside it.
    let out = Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(run_args(p, "4", &["--metrics", m]))
        .env("PIPETRAIN_FAULT_ABORT_BEFORE_RENAME", "3")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("aborting"),
        "{stderr}"
    );
    let steps = |csv: &str| -> Vec<String> {
        csv.lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap().to_string())
            .collect()
    };
    let kept = std::fs::read_to_string(&metrics).expect("the metrics file survives the crash");
    let saved = pipetrain::Checkpoint::read(&path).unwrap().progress().step;
    assert_eq!(saved, 1);
    assert_eq!(steps(&kept), ["1"], "the checkpoint's rows: {kept}");
    success(&run_args(p, "4", &["--metrics", m, "--resume", p]));
    let whole = std::fs::read_to_string(&metrics).unwrap();
    assert_eq!(steps(&whole), ["1", "2", "3", "4"], "{whole}");
    assert!(temp_files(tmp.path()).is_empty());
}
