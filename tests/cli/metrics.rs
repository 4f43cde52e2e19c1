//! `pipetrain train --metrics run.csv|run.jsonl --plot loss.png`: one row per optimizer step,
//! and a PNG of the loss curve.

use crate::common;
use common::{USAGE, failure_with, scratch, success};

/// Trains 3 optimizer steps of 2 replicas × 2 stages with accumulation 2, writing `file`.
fn run_with(file: &std::path::Path, extra: &[&str]) -> String {
    success(
        &[
            &[
                "train",
                "--stages",
                "2",
                "--replicas",
                "2",
                "--accumulate",
                "2",
                "--micro-batches",
                "2",
                "--width",
                "16",
                "--hidden-layers",
                "2",
                "--batch",
                "16",
                "--steps",
                "3",
                "--metrics",
                file.to_str().unwrap(),
            ][..],
            extra,
        ]
        .concat(),
    )
}

const COLUMNS: [&str; 13] = [
    "step",
    "loss",
    "lr",
    "samples_per_sec",
    "wall_ms",
    "bubble",
    "all_reduce_ms",
    "grad_norm",
    "skipped",
    "stage0_compute_ms",
    "stage0_idle_ms",
    "stage1_compute_ms",
    "stage1_idle_ms",
];

#[test]
fn csv_has_a_header_and_a_row_of_numbers_per_optimizer_step() {
    let tmp = scratch("metrics-csv");
    let dir = tmp.path();
    let path = dir.join("run.csv");
    run_with(&path, &[]);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap().split(',').collect::<Vec<_>>(),
        COLUMNS
    );
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split(',').map(|v| v.parse::<f64>().unwrap()).collect())
        .collect();
    assert_eq!(
        rows.len(),
        3,
        "one row per optimizer step (not per batch):\n{text}"
    );
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), COLUMNS.len());
        assert_eq!(row[0], (i + 1) as f64);
        assert!(row[1].is_finite() && row[1] > 0.0, "loss: {row:?}");
        assert_eq!(row[2], 0.001, "Adam's default lr");
        assert!(row[3] > 0.0 && row[4] > 0.0);
        assert!((0.0..=1.0).contains(&row[5]), "bubble: {row:?}");
        assert!(row[7].is_finite() && row[7] > 0.0, "grad_norm: {row:?}");
        assert_eq!(row[8], 0.0, "no step skipped");
        assert!(row[6] >= 0.0 && row[9] > 0.0 && row[11] > 0.0);
    }
}

#[test]
fn jsonl_has_one_object_per_optimizer_step_and_the_plot_is_a_png() {
    let tmp = scratch("metrics-jsonl");
    let dir = tmp.path();
    let path = dir.join("run.jsonl");
    let png = dir.join("loss.png");
    let stdout = run_with(&path, &["--plot", png.to_str().unwrap()]);
    let text = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["step"], (i + 1) as u64);
        for column in COLUMNS {
            assert!(row[column].is_number(), "{column} in {row}");
        }
    }
    assert!(stdout.contains("plot:"), "{stdout}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn unknown_metrics_format_names_the_path() {
    let stderr = failure_with(
        USAGE,
        &["train", "--steps", "1", "--metrics", "run.parquet"],
    );
    assert!(
        stderr.contains("run.parquet") && stderr.contains(".csv"),
        "{stderr}"
    );
}
