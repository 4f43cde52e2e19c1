//! `pipetrain bench` on a tiny model: every kind of row is there, its numbers parse and hang
//! together, and `--compare-pytorch` with a Python that has no torch says how to get it. No
//! timing is asserted: only that the measurements are real numbers.

use crate::common;
use common::{TINY, USAGE, failure_with, pipetrain, scratch, success};

/// `pipetrain bench` on the tiny model, 2 measured steps after 1 warm-up, m ∈ {1, 4}: runs in
/// seconds in the dev profile.
fn tiny_bench() -> Vec<&'static str> {
    let mut args = vec!["bench"];
    args.extend(TINY);
    args.extend(["--steps", "2", "--warmup", "1", "--micro-batches", "1,4"]);
    args.extend([
        "--gpt-width",
        "8",
        "--gpt-context",
        "8",
        "--llama-width",
        "16",
    ]);
    args
}

/// The table's rows: header cells, then each row's cells.
fn table(document: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = document.lines().filter(|l| l.starts_with('|'));
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let header = cells(lines.next().expect("a table header"));
    let _rule = lines.next().expect("a header rule");
    (header, lines.map(cells).collect())
}

fn number(cell: &str) -> f64 {
    cell.parse()
        .unwrap_or_else(|e| panic!("`{cell}` is not a number: {e}"))
}

/// Bytes of a `1.50 KiB`-style cell.
fn bytes(cell: &str) -> f64 {
    let (value, unit) = cell.split_once(' ').expect("a value and a unit");
    let scale = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        other => panic!("unknown unit {other}"),
    };
    number(value) * scale
}

fn row<'a>(rows: &'a [Vec<String>], label: &str) -> &'a [String] {
    rows.iter()
        .find(|r| r[0] == label)
        .unwrap_or_else(|| panic!("no row `{label}` in {rows:?}"))
}

#[test]
fn the_table_has_every_configuration_with_real_numbers() {
    let dir = scratch("bench");
    let out = dir.path().join("bench.md");
    let out = out.to_str().expect("a UTF-8 path");
    // A peers folder of our own: the test must not depend on ../shared beside the clone.
    let peers = dir.path().join("peers");
    std::fs::create_dir(&peers).unwrap();
    std::fs::write(peers.join("common.py"), "").unwrap();
    let peers = peers.to_str().expect("a UTF-8 path");
    let mut args = tiny_bench();
    args.extend([
        "--compare-pytorch",
        "/bin/false",
        "--peers",
        peers,
        "--out",
        out,
    ]);
    let document = success(&args);
    assert_eq!(
        std::fs::read_to_string(out).expect("--out written"),
        document
    );
    let (header, rows) = table(&document);
    assert_eq!(
        header,
        [
            "configuration",
            "workers",
            "samples/s",
            "min–max",
            "limit",
            "ceiling",
            "of limit",
            "of ceiling",
            "peak memory / worker",
            "final loss",
            "others"
        ],
        "no PyTorch or ratio column without torch"
    );
    assert!(
        document.contains("pip install torch numpy safetensors torchgpipe transformers"),
        "the how-to line:\n{document}"
    );
    assert!(document.contains("- machine: "), "{document}");
    assert!(document.contains("other tenants"), "{document}");
    // Issue 50: each ZeRO level's measured communication against level 0's all-reduce, and
    // the simulated step against the measured one, with real numbers.
    let zero3 = document
        .lines()
        .find(|l| l.starts_with("- `ZeRO: ZeRO-3, 2 replicas x 2 stages, 1F1B, m=4`: "))
        .unwrap_or_else(|| panic!("no ZeRO-3 communication line:\n{document}"));
    let words: Vec<&str> = zero3.split_whitespace().collect();
    let at = |after: &str| -> f64 {
        let i = words.iter().position(|w| *w == after).unwrap();
        number(words[i + 1].trim_end_matches(','))
    };
    assert!(at("m=4`:") > 0.0, "{zero3}");
    assert!(at("step") > 0.0, "{zero3}");
    assert!(zero3.contains(" of level 0's "), "{zero3}");
    for label in [
        "single device: 1 worker, m=1 (16 rows)",
        "single device: 1 worker, m=4 (4 rows)",
        "single device: 1 worker, 2 threads, m=1",
        "independent workers: 2 x 1 worker, no communication, m=4 (4 rows)",
        "data parallel: 2 replicas x 1 stage, m=1",
        "model parallel: 2 stages, m=1",
        "pipelined: GPipe, 2 stages, m=4",
        "pipelined: 1F1B, 2 stages, m=1",
        "pipelined: 1F1B, 2 stages, m=4",
        "hybrid: 2 replicas x 2 stages, 1F1B, m=4",
        "ZeRO-1: 2 replicas x 1 stage, m=1, optimizer state sharded",
        "GPT schedules: 1F1B, 2 ranks, m=4",
        "GPT schedules: ZB-H1, 2 ranks, m=4",
        "GPT schedules: ZB-V, 2 ranks, m=4",
        "Llama: 1F1B, 2 ranks, m=4",
    ] {
        let r = row(&rows, label);
        let median = number(&r[2]);
        let (lo, hi) = r[3].split_once('–').expect("min–max");
        let (lo, hi) = (number(lo), number(hi));
        assert!(
            median > 0.0 && lo <= median && median <= hi,
            "{label}: {r:?}"
        );
        assert!(bytes(&r[8]) > 0.0, "{label}: {r:?}");
        let loss = number(&r[9]);
        assert!(loss.is_finite() && loss > 0.0, "{label}: {r:?}");
        assert!(number(&r[10]) >= 0.0, "{label}: {r:?}");
    }
    // Each schedule beyond 1F1B is set against 1F1B, measured and predicted from its costs.
    for label in [
        "schedules: ZB-H1, 2 ranks, m=4",
        "GPT schedules: ZB-H1, 2 ranks, m=4",
        "GPT schedules: interleaved v=2, 2 ranks, m=4",
        "GPT schedules: ZB-V, 2 ranks, m=4",
    ] {
        let line = document
            .lines()
            .find(|l| l.starts_with(&format!("- `{label}`: measured ")))
            .unwrap_or_else(|| panic!("no speed-up line for {label}:\n{document}"));
        let predicted = line.split("predicted ").nth(1).expect("a prediction");
        let ratio = number(predicted.split_whitespace().next().unwrap());
        assert!(ratio > 0.0 && ratio.is_finite(), "{line}");
    }
    // The Llama row is sized by --llama-width (16: head width 2, SwiGLU 48).
    assert!(
        document.contains("- `Llama` row: Llama-4x16 (vocab 512, intermediate 48, 8 heads"),
        "{document}"
    );
    // The GPT rows have no MLP reference to be a fraction of.
    assert_eq!(row(&rows, "GPT schedules: ZB-H1, 2 ranks, m=4")[4], "–");
    // Limits: 2 workers × the 4-row single-device throughput × 4/5 for 2 stages at m = 4.
    // Cells are rounded to whole samples/s, so each is within 0.5 of the number behind it: a
    // limit derived as k × a cell may be off by k × 0.5 from that cell, plus its own 0.5.
    let rounding = |k: f64| 0.5 * k + 0.5;
    let single = number(&row(&rows, "single device: 1 worker, m=4 (4 rows)")[2]);
    let pipelined = row(&rows, "pipelined: 1F1B, 2 stages, m=4");
    let limit = number(&pipelined[4]);
    assert!(
        (limit - 2.0 * single * 0.8).abs() <= rounding(2.0 * 0.8),
        "{pipelined:?} vs {single}"
    );
    let pair = number(
        &row(
            &rows,
            "independent workers: 2 x 1 worker, no communication, m=4 (4 rows)",
        )[2],
    );
    assert!(
        (number(&pipelined[5]) - pair * 0.8).abs() <= rounding(0.8),
        "{pipelined:?}"
    );
    assert!(number(&pipelined[6]) > 0.0 && number(&pipelined[7]) > 0.0);
    // The reference rows have no limit of their own.
    assert_eq!(row(&rows, "single device: 1 worker, m=1 (16 rows)")[4], "–");
    // Two stages hold fewer parameters each than one worker holding all.
    let whole = bytes(&row(&rows, "single device: 1 worker, m=1 (16 rows)")[8]);
    let split = bytes(&row(&rows, "model parallel: 2 stages, m=1")[8]);
    assert!(split < whole, "{split} >= {whole}");
    // Every row starts from the same init and data: the 1-worker and 2-stage m=1 losses agree.
    let a = number(&row(&rows, "single device: 1 worker, m=1 (16 rows)")[9]);
    let b = number(&row(&rows, "model parallel: 2 stages, m=1")[9]);
    assert!((a - b).abs() < 1e-3, "{a} vs {b}");
}

#[test]
fn only_keeps_the_matching_rows_and_their_references() {
    let mut args = tiny_bench();
    args.extend(["--only", "1f1b"]);
    let (_, rows) = table(&success(&args));
    let labels: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    // The ZeRO-1 row's name has no 1F1B (the ZeRO levels' rows do).
    assert!(
        labels
            .iter()
            .all(|l| !l.contains("GPipe") && !l.starts_with("ZeRO-1:")),
        "{labels:?}"
    );
    assert!(labels.contains(&"ZeRO: ZeRO-3, 2 replicas x 2 stages, 1F1B, m=4"));
    assert!(
        labels.contains(&"pipelined: 1F1B, 2 stages, m=4"),
        "{labels:?}"
    );
    assert!(
        labels.contains(&"single device: 1 worker, m=4 (4 rows)"),
        "{labels:?}"
    );
    // The hybrid row runs 1F1B too.
    assert!(labels.iter().any(|l| l.starts_with("hybrid")), "{labels:?}");
}

/// The MPI rows run under `mpirun`, one worker per process, beside the in-process row of the
/// same layout, and the document gives their ratio.
#[cfg(feature = "mpi")]
#[test]
fn mpi_rows_run_across_processes_beside_their_in_process_layout() {
    let mut args = tiny_bench();
    args.extend(["--only", "mpi"]);
    let document = success(&args);
    let (_, rows) = table(&document);
    for (mpi, local) in [
        (
            "MPI: 2 replicas x 1 stage, m=1, 2 processes",
            "data parallel: 2 replicas x 1 stage, m=1",
        ),
        (
            "MPI: 2 replicas x 2 stages, 1F1B, m=4, 4 processes",
            "hybrid: 2 replicas x 2 stages, 1F1B, m=4",
        ),
    ] {
        let r = row(&rows, mpi);
        assert!(number(&r[2]) > 0.0, "{r:?}");
        assert_eq!(r[8], "–", "memory is not read from other processes: {r:?}");
        assert!(number(&r[9]).is_finite(), "{r:?}");
        assert!(number(&row(&rows, local)[2]) > 0.0);
        assert!(
            document.contains(&format!("- `{mpi}`: "))
                && document.contains(&format!("of `{local}`")),
            "the ratio line:\n{document}"
        );
    }
    assert!(document.contains("- MPI rows: `mpirun -np N"), "{document}");
}

/// Without the `mpi` feature the document says why the MPI rows are missing.
#[cfg(not(feature = "mpi"))]
#[test]
fn mpi_rows_say_why_they_are_left_out() {
    let mut args = tiny_bench();
    args.extend(["--only", "data parallel"]);
    let document = success(&args);
    assert!(
        document.contains("- MPI rows: not run. this binary was built without the `mpi` feature"),
        "{document}"
    );
}

#[test]
fn a_batch_that_does_not_split_is_a_usage_error() {
    let err = failure_with(
        USAGE,
        &[
            "bench",
            "--batch",
            "10",
            "--micro-batches",
            "4",
            "--steps",
            "1",
        ],
    );
    assert!(
        err.contains("--batch 10") && err.contains("--micro-batches"),
        "{err}"
    );
    let err = failure_with(
        USAGE,
        &["bench", "--only", "nothing-like-this", "--steps", "1"],
    );
    assert!(err.contains("matches no row"), "{err}");
}

#[test]
fn missing_peer_scripts_say_what_to_pass() {
    let dir = scratch("bench-peers");
    let mut args = tiny_bench();
    let peers = dir.path().to_str().expect("a UTF-8 path");
    args.extend([
        "--only",
        "model parallel",
        "--compare-pytorch",
        "/bin/false",
        "--peers",
        peers,
    ]);
    let out = pipetrain(&args);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("--peers") && stdout.contains("common.py"),
        "{stdout}"
    );
}

/// `train`'s limits apply to `bench` (issue 47, class 5): a model size of 1e8 aborted on an
/// allocation failure, and `--threads 1e8` panicked spawning them.
#[test]
fn bench_refuses_what_memory_cannot_hold_and_caps_its_threads() {
    for (flag, named) in [
        ("--width", "--width, --hidden-layers"),
        ("--hidden-layers", "--width, --hidden-layers"),
        ("--classes", "--width, --hidden-layers, --classes"),
        ("--batch", "or --batch"),
        ("--gpt-width", "--gpt-width, --gpt-context"),
        ("--llama-width", "--llama-width"),
    ] {
        let mut args = tiny_bench();
        args.extend([flag, "100000000"]);
        let e = failure_with(USAGE, &args);
        assert!(
            e.contains(named) && e.contains("use a smaller"),
            "{flag}: {e}"
        );
    }
    let mut args = tiny_bench();
    args.extend(["--threads", "100000000", "--only", "single device"]);
    let out = pipetrain(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--threads 100000000") && stderr.contains("per worker"),
        "{stderr}"
    );
}
