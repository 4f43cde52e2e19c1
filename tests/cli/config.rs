//! `pipetrain train --config run.toml`: flags from a TOML file, overridden by the command line
//! (and the same in `eval` and `tune`); and the worked examples of `pipetrain train --help`.

use crate::common;
use common::{USAGE, failure_with, pipetrain, scratch, success};

use std::path::PathBuf;

/// Writes `text` to a fresh `run.toml`.
/// The directory is removed when the returned guard drops.
fn config(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = scratch(name);
    let path = dir.path().join("run.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// The `step i/N` lines of a run's stdout.
fn step_lines(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("step "))
        .map(String::from)
        .collect()
}

const FILE: &str = "\
steps = 2
width = 16
hidden_layers = 2
batch = 16
micro-batches = 4
balance = [2, 1]
verify = true
";

#[test]
fn config_file_sets_the_flags() {
    let (_dir, path) = config("config-sets", FILE);
    let stdout = success(&["train", "--config", path.to_str().unwrap()]);
    assert!(
        stdout.contains("MLP-2x16"),
        "width and layers from the file: {stdout}"
    );
    assert!(stdout.contains("balance [2, 1]"), "{stdout}");
    assert!(stdout.contains("verify: max_rel_diff="), "{stdout}");
    assert_eq!(step_lines(&stdout).len(), 2);
}

#[test]
fn command_line_overrides_the_file_in_both_forms() {
    let (_dir, path) = config("config-override", FILE);
    let p = path.to_str().unwrap();
    let lines = step_lines(&success(&["train", "--config", p, "--steps", "3"]));
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[2].contains("3/3"));
    // The bare form, the flag before --config.
    let lines = step_lines(&success(&["--steps", "1", "--config", p]));
    assert_eq!(lines.len(), 1, "{lines:?}");
}

#[test]
fn no_verify_turns_off_a_verify_from_the_file() {
    let (_dir, path) = config(
        "config-verify",
        "verify = true\nwidth = 16\nhidden-layers = 2\nbatch = 16\nsteps = 1\n",
    );
    let p = path.to_str().unwrap();
    assert!(success(&["train", "--config", p]).contains("verify: max_rel_diff="));
    assert!(!success(&["train", "--config", p, "--no-verify"]).contains("verify:"));
}

#[test]
fn unknown_key_names_the_key_and_the_file() {
    let (_dir, path) = config("config-unknown", "steps = 1\nmicro_batchez = 4\n");
    let stderr = failure_with(USAGE, &["train", "--config", path.to_str().unwrap()]);
    assert!(
        stderr.contains("micro_batchez") && stderr.contains(path.to_str().unwrap()),
        "{stderr}"
    );
}

#[test]
fn help_shows_worked_examples() {
    let out = pipetrain(&["train", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--replicas 2",
        "--zero 1",
        "--accumulate",
        "--profile trace.json",
        "--metrics run.csv",
        "--config run.toml",
        "--model resnet",
        "--model gpt",
        "--data mnist:",
        "pipetrain eval",
    ] {
        assert!(help.contains(needle), "`{needle}` missing from:\n{help}");
    }
}

#[test]
fn tune_reads_the_config_file_too() {
    // Issue 38: `tune --config F` tuned the default MLP-8x1024 instead of the file's model, and a
    // missing file or a directory there exited 0.
    let (dir, path) = config("tune-config", "width = 16\nhidden_layers = 3\nbatch = 32\n");
    let cache = dir.path().to_str().unwrap();
    let tune = |file: &str| {
        [
            "tune",
            "--config",
            file,
            "--cache-dir",
            cache,
            "--workers",
            "2",
            "--max-micro-batches",
            "4",
            "--top",
            "1",
            "--run",
            "0",
        ]
        .map(String::from)
    };
    let args = tune(path.to_str().unwrap());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = success(&args);
    assert!(out.contains("tune: MLP-3x16 "), "{out}");
    let missing = dir.path().join("missing.toml");
    for bad in [missing.to_str().unwrap(), cache] {
        let args = tune(bad);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = failure_with(USAGE, &args);
        assert!(err.contains(&format!("--config {bad}: ")), "{err}");
    }
}
