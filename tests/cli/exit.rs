//! `pipetrain`'s exit codes, run as a user runs it: 1 for a run that failed, 2 for a command
//! line refused before training, 3 for a `--verify` above its tolerance (0 is every successful
//! test); and the table under `--help` is the guide's (docs/exit-codes.md).

use crate::common;
use common::{RUNTIME, TINY, USAGE, VERIFY_FAILED, failure_with, pipetrain, scratch, success};

/// `pipetrain train <TINY> <extra>`.
fn train<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [&["train"], &TINY[..], extra].concat()
}

#[test]
fn an_unknown_schedule_or_remat_mode_is_a_usage_error_listing_the_values() {
    for args in [
        &["train", "--schedule", "zb"][..],
        &["--schedule", "zb"],
        &["plan", "--schedule", "zb"],
    ] {
        let e = failure_with(USAGE, args);
        assert!(
            e.contains("'zb'")
                && e.contains(
                    "[possible values: gpipe, 1f1b, zb-h1, zb-2p, interleaved, zb-v, looped-bfs, interleaved-zb, dualpipev, v-min, v-half]"
                ),
            "{args:?}: {e}"
        );
    }
    let e = failure_with(USAGE, &["train", "--remat", "sometimes"]);
    assert!(
        e.contains("'sometimes'") && e.contains("[possible values: never, except_last, always]"),
        "{e}"
    );
}

#[test]
fn help_lists_the_schedules_and_remat_modes() {
    let help = success(&["train", "--help"]);
    let section = |from: &str, to: &str| {
        let start = help
            .find(from)
            .unwrap_or_else(|| panic!("{from} in:\n{help}"));
        let end = start + help[start..].find(to).unwrap();
        help[start..end].to_string()
    };
    let schedule = section("--schedule <SCHEDULE>", "--remat");
    for value in ["- gpipe:", "- 1f1b:"] {
        assert!(schedule.contains(value), "{value} in:\n{schedule}");
    }
    let remat = section("--remat <REMAT>", "--optimizer");
    for value in ["- never:", "- except_last:", "- always:"] {
        assert!(remat.contains(value), "{value} in:\n{remat}");
    }
    let plan = success(&["plan", "--help"]);
    assert!(
        plan.contains("- gpipe:") && plan.contains("- 1f1b:"),
        "{plan}"
    );
}

#[test]
fn schedule_and_remat_keep_the_library_spellings() {
    // Aliases and any case, as `ScheduleKind` and `Remat` parse them.
    let stdout = success(&train(&[
        "--schedule",
        "Fill-Drain",
        "--remat",
        "except-last",
    ]));
    assert!(
        stdout.contains("gpipe, remat except_last"),
        "the banner names the schedule and the mode: {stdout}"
    );
    let stdout = success(&train(&[
        "--schedule",
        "PipeDream-Flush",
        "--remat",
        "ALWAYS",
    ]));
    assert!(stdout.contains("1f1b, remat always"), "{stdout}");
}

#[test]
fn configuration_errors_are_usage_errors() {
    // The builder's `Error::Config`.
    let e = failure_with(USAGE, &train(&["--stages", "0"]));
    assert!(e.contains("stages = 0") && e.contains("--stages 1"), "{e}");
    let e = failure_with(USAGE, &["plan", "--stages", "0"]);
    assert!(e.contains("stages"), "{e}");
    // A --config file: missing, with a bad value, with an unknown key.
    let dir = scratch("exit-usage");
    let missing = dir.path().join("missing.toml");
    let e = failure_with(USAGE, &train(&["--config", missing.to_str().unwrap()]));
    assert!(e.contains("--config") && e.contains("missing.toml"), "{e}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "schedule = \"zb\"\n").unwrap();
    let e = failure_with(USAGE, &train(&["--config", bad.to_str().unwrap()]));
    assert!(
        e.contains(
            "[possible values: gpipe, 1f1b, zb-h1, zb-2p, interleaved, zb-v, looped-bfs, interleaved-zb, dualpipev, v-min, v-half]"
        ),
        "{e}"
    );
    std::fs::write(&bad, "stagez = 2\n").unwrap();
    let e = failure_with(USAGE, &train(&["--config", bad.to_str().unwrap()]));
    assert!(e.contains("stagez"), "{e}");
    // Files that do not exist: an input, an output's directory, data.
    let gone = dir.path().join("gone.safetensors");
    let gone = gone.to_str().unwrap();
    let e = failure_with(USAGE, &train(&["--resume", gone]));
    assert!(e.contains("--resume") && e.contains("no such file"), "{e}");
    let e = failure_with(USAGE, &train(&["--metrics", "/nonexistent-dir/run.csv"]));
    assert!(
        e.contains("--metrics") && e.contains("does not exist"),
        "{e}"
    );
    let data = format!("tensors:{gone}");
    let e = failure_with(USAGE, &train(&["--data", &data]));
    assert!(e.contains("does not exist"), "{e}");
    // A tolerance that is no tolerance.
    for value in ["-1", "NaN"] {
        let e = failure_with(USAGE, &train(&["--verify", "--verify-tolerance", value]));
        assert!(e.contains("--verify-tolerance") && e.contains(value), "{e}");
    }
}

#[test]
fn a_verify_difference_above_the_tolerance_exits_3_after_the_run() {
    // With the fused backward, four micro-batches sum their gradients in another order than
    // one full batch: the weights differ by rounding, far below the default tolerance and above
    // a tolerance of 0. (The split backward computes the weight gradients over the step's rows
    // at once, as the full batch does, and may match bit for bit.)
    let args = train(&[
        "--backward",
        "fused",
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--steps",
        "2",
        "--verify",
    ]);
    let diff = common::max_rel_diff(&success(&args));
    assert!(
        diff > 0.0,
        "the run differs by rounding only, but it does differ"
    );
    let strict = [&args[..], &["--verify-tolerance", "0"]].concat();
    let out = pipetrain(&strict);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(VERIFY_FAILED), "{out:?}");
    assert!(stdout.contains("verify: max_rel_diff="), "{stdout}");
    assert!(
        stdout.contains("held-out"),
        "the run went to its end: {stdout}"
    );
    let stderr = common::stderr_of_failure(&strict, out);
    assert!(stderr.contains("verify FAILED"), "{stderr}");
    // Not a usage or runtime error: nothing printed as `error:`.
    assert!(!stderr.contains("error:"), "{stderr}");
}

/// `--verify` finds a replica whose weights left replica 0's (the test hook
/// `PIPETRAIN_TEST_DRIFT=<replica>:<step>` shifts them after that step), per step and end to
/// end: exit 3, naming the replica and the step, after the run went to its end.
#[test]
fn a_replica_that_drifts_exits_3_naming_it_and_the_step() {
    for (replicas, drift, mode, named) in [
        (
            "2",
            "1:2",
            None,
            "replica 1 holds different weights than replica 0 (from step 2 on)",
        ),
        (
            "3",
            "2:1",
            Some("--end-to-end"),
            "replica 2 holds different weights than replica 0 (from step 1 on)",
        ),
    ] {
        let mut args = train(&["--replicas", replicas, "--micro-batches", "2"]);
        args.extend(["--steps", "3", "--verify"]);
        args.extend(mode);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipetrain"))
            .args(&args)
            .env("PIPETRAIN_TEST_DRIFT", drift)
            .output()
            .expect("the pipetrain binary runs");
        assert_eq!(out.status.code(), Some(VERIFY_FAILED), "{args:?}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            stdout.contains("held-out"),
            "the run went to its end: {stdout}"
        );
        let stderr = common::stderr_of_failure(&args, out);
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}

/// A run that diverges (a learning rate of 1e30 overflows the loss and the gradients) stops at
/// the step whose gradient is not finite, a runtime error (exit 1), before any stage applies it
/// and before `--verify` compares anything (issue 17, item 6).
#[test]
fn a_diverged_run_stops_before_verify() {
    let args = train(&["--lr", "1e30", "--steps", "3", "--verify"]);
    let out = pipetrain(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(common::RUNTIME), "{out:?}");
    assert!(!stdout.contains("verify:"), "{stdout}");
    let stderr = common::stderr_of_failure(&args, out);
    assert!(
        stderr.contains("error: step ") && stderr.contains("non-finite"),
        "{stderr}"
    );
}

#[test]
fn unreadable_files_are_runtime_errors() {
    let dir = scratch("exit-runtime");
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a safetensors file").unwrap();
    let junk = junk.to_str().unwrap();
    let data = format!("tensors:{junk}");
    let e = failure_with(RUNTIME, &train(&["--data", &data]));
    assert!(
        e.contains(junk) && e.contains("not a valid safetensors file"),
        "{e}"
    );
    let e = failure_with(RUNTIME, &train(&["--steps", "2", "--resume", junk]));
    assert!(e.contains("--resume") && e.contains(junk), "{e}");
    let e = failure_with(RUNTIME, &["eval", "--width", "16", "--init", junk]);
    assert!(e.contains("--init") && e.contains(junk), "{e}");
}

/// The `(code, meaning)` rows of the `Exit codes:` table ending `help`, whitespace collapsed.
fn help_table(help: &str) -> Vec<(String, String)> {
    let (_, table) = help
        .split_once("\nExit codes:\n")
        .unwrap_or_else(|| panic!("no `Exit codes:` table in:\n{help}"));
    let mut rows: Vec<(String, String)> = Vec::new();
    for line in table.lines().take_while(|l| !l.trim().is_empty()) {
        let entry = line
            .strip_prefix("  ")
            .and_then(|rest| rest.split_once("  "))
            .filter(|(code, _)| !code.is_empty() && code.chars().all(|c| c.is_ascii_digit()));
        match entry {
            Some((code, meaning)) => rows.push((code.to_string(), meaning.trim().to_string())),
            None => {
                let last = rows.last_mut().expect("a continuation follows an entry");
                last.1 = format!("{} {}", last.1, line.trim());
            }
        }
    }
    rows
}

/// The rows of the table in docs/exit-codes.md, backticks dropped.
fn guide_table() -> Vec<(String, String)> {
    include_str!("../../docs/exit-codes.md")
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and rule
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 2, "{row}");
            let meaning = cells[1].replace('`', "");
            (cells[0].trim().to_string(), meaning.trim().to_string())
        })
        .collect()
}

#[test]
fn help_and_the_guide_give_the_same_exit_codes() {
    let top = help_table(&success(&["--help"]));
    let codes: Vec<&str> = top.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        codes,
        ["0", "1", "2", "3", "4", "129", "130", "138", "143"],
        "{top:?}"
    );
    assert_eq!(help_table(&success(&["train", "--help"])), top);
    assert_eq!(help_table(&success(&["plan", "--help"])), top);
    assert_eq!(
        guide_table(),
        top,
        "docs/exit-codes.md's table differs from --help's"
    );
}
