//! No input can exhaust the machine (issue 27, part 2): six command lines that once ran into
//! the OOM killer after minutes, and one that ran for hours (issue 38), end at once with a usage
//! error that names the cause and the remedy, before anything is allocated — with the machine's
//! memory, and under an address-space limit of about 4 GB (`ulimit -v 4000000`).

use crate::common;
use common::USAGE;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The cases: the arguments, and what the error must say (the cause, the remedy).
const CASES: [(&[&str], &[&str]); 7] = [
    (
        &["train", "--width", "1000000"],
        &["GiB", "use a smaller --width"],
    ),
    (
        &["train", "--hidden-layers", "10000000"],
        &["GiB", "--hidden-layers"],
    ),
    (
        &["train", "--model", "gpt", "--d-model", "200000"],
        &["GiB", "use a smaller --d-model"],
    ),
    (
        &["train", "--data", "text:/dev/zero"],
        &["/dev/zero is not a regular file", "give a data file"],
    ),
    (
        &["train", "--config", "/dev/zero"],
        &["--config /dev/zero", "not a regular file"],
    ),
    (
        &["plan", "--stages", "1000", "--micro-batches", "10000"],
        &[
            "--stages 1000 --micro-batches 10000: ",
            "use --stages ",
            "--format csv",
        ],
    ),
    // Issue 38: the simulation's time grows with the square of the stages; this ran for hours.
    (
        &["plan", "--stages", "100000", "--micro-batches", "1"],
        &["--stages 100000 --micro-batches 1: ", "use --stages "],
    ),
];

/// Runs `pipetrain <args>` through `sh` with `limit` (a `ulimit` line, or nothing), killed
/// after 10 s; returns the exit code, stderr and how long it took.
fn run(limit: &str, args: &[&str]) -> (Option<i32>, String, Duration) {
    let script = format!("{limit}\nexec \"$0\" \"$@\"");
    let started = Instant::now();
    let mut child = Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_pipetrain")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = started + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

fn check(limit: &str) {
    for (args, said) in CASES {
        let (code, stderr, took) = run(limit, args);
        assert!(
            took < Duration::from_secs(10),
            "{args:?} ({limit}) ran {took:?}: {stderr}"
        );
        assert_eq!(code, Some(USAGE), "{args:?} ({limit}): {stderr}");
        for s in said {
            assert!(
                stderr.contains(s),
                "{args:?} ({limit}): no `{s}` in {stderr}"
            );
        }
    }
}

#[test]
fn every_case_ends_at_once_with_a_usage_error_and_the_remedy() {
    check("");
}

#[test]
fn every_case_ends_at_once_under_a_4_gb_address_space_limit() {
    check("ulimit -v 4000000 || exit 99");
}

#[test]
fn a_weights_file_larger_than_memory_is_refused_before_it_is_read() {
    // Sparse: 1 TiB long, no disk used.
    let tmp = common::scratch("limits-huge");
    let huge = tmp.path().join("huge.safetensors");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let h = huge.to_str().unwrap();
    for limit in ["", "ulimit -v 4000000 || exit 99"] {
        for args in [
            &["train", "--init", h][..],
            &["train", "--resume", h],
            &["export", h, "-o", "/dev/null/x"],
        ] {
            let (code, stderr, took) = run(limit, args);
            assert!(took < Duration::from_secs(10), "{args:?}: {took:?}");
            assert_eq!(code, Some(USAGE), "{args:?} ({limit}): {stderr}");
            assert!(
                stderr.contains("a file of 1024.0 GiB needs about") && stderr.contains("memory"),
                "{args:?}: {stderr}"
            );
        }
    }
}
