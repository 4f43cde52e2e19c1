//! `pipetrain train` (and the bare `pipetrain ...` form), run as a user runs it: the built
//! binary, its stdout, stderr and exit code. Every run is tiny (width ≤ 32, batch ≤ 32, ≤ 3
//! steps) so the debug build finishes in seconds, but the one that checks the defaults learn.

use crate::common;
use common::{USAGE, failure_with, max_rel_diff, success};

/// Stderr of a `pipetrain train <args>` run that must be refused as a usage error (exit 2):
/// every failure here is the command line's.
fn train_failure(args: &[&str]) -> String {
    failure_with(USAGE, &[&["train"], args].concat())
}

/// Tiny model and data, then `extra`.
fn tiny<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [&common::TINY[..], extra].concat()
}

/// Runs `pipetrain train <args> --verify`, expects success and returns the parsed
/// `verify: max_rel_diff=<x>`.
fn verified(args: &[&str]) -> f64 {
    verified_run(args).0
}

/// [`verified`], also returning the run's stdout.
fn verified_run(args: &[&str]) -> (f64, String) {
    let stdout = success(&[&["train"], args, &["--verify"]].concat());
    (max_rel_diff(&stdout), stdout)
}

#[test]
fn gpipe_over_three_stages_matches_single_device() {
    verified(&[
        "--stages",
        "3",
        "--micro-batches",
        "4",
        "--schedule",
        "gpipe",
        "--width",
        "32",
        "--hidden-layers",
        "4",
        "--batch",
        "32",
        "--steps",
        "3",
    ]);
}

#[test]
fn one_f_one_b_over_two_stages_matches_single_device() {
    verified(&[
        "--stages",
        "2",
        "--micro-batches",
        "8",
        "--schedule",
        "1f1b",
        "--width",
        "32",
        "--hidden-layers",
        "4",
        "--batch",
        "32",
        "--steps",
        "3",
    ]);
}

#[test]
fn remat_always_with_adam_matches_single_device() {
    verified(&[
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--remat",
        "always",
        "--optimizer",
        "adam",
        "--lr",
        "0.001",
        "--width",
        "32",
        "--hidden-layers",
        "4",
        "--batch",
        "32",
        "--steps",
        "3",
    ]);
}

#[test]
fn bare_form_trains_without_the_subcommand() {
    let args = [
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--width",
        "16",
        "--hidden-layers",
        "2",
        "--batch",
        "16",
        "--steps",
        "2",
    ];
    let stdout = success(&args);
    let steps: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("step") && l.contains("samples/s"))
        .collect();
    assert_eq!(steps.len(), 2, "one line per step expected in:\n{stdout}");
    assert!(
        steps[0].contains("1/2") && steps[1].contains("2/2"),
        "step lines count up to 2/2:\n{stdout}"
    );
    assert!(
        !stdout.contains("verify:"),
        "no verification unless asked:\n{stdout}"
    );
}

#[test]
fn zero_stages_is_rejected() {
    let stderr = train_failure(&tiny(&["--stages", "0", "--micro-batches", "4"]));
    assert!(stderr.contains("stages = 0"), "{stderr}");
}

#[test]
fn zero_micro_batches_is_rejected() {
    let stderr = train_failure(&tiny(&["--stages", "2", "--micro-batches", "0"]));
    assert!(stderr.contains("micro_batches = 0"), "{stderr}");
}

#[test]
fn unknown_schedule_is_named() {
    let stderr = train_failure(&tiny(&["--stages", "2", "--schedule", "zb"]));
    assert!(stderr.contains("zb"), "{stderr}");
    assert!(
        stderr.contains("--schedule") && stderr.contains("gpipe") && stderr.contains("1f1b"),
        "the flag and the allowed values: {stderr}"
    );
}

/// `--backward split` (the default) and `fused` both match single-device training; the split
/// run says so in its header and reports what its deferred weight gradients held, more with a
/// larger `--weight-group`.
#[test]
fn split_and_fused_backward_match_single_device_and_report_deferred_bytes() {
    // "deferred W 1.5 KiB" → bytes.
    let deferred = |stdout: &str| -> Vec<f64> {
        stdout
            .lines()
            .filter_map(|l| l.split("deferred W ").nth(1))
            .map(|v| {
                let (value, unit) = v.trim().split_once(' ').unwrap();
                let scale = match unit {
                    "B" => 1.0,
                    "KiB" => 1024.0,
                    "MiB" => 1024.0 * 1024.0,
                    other => panic!("unit {other}"),
                };
                value.parse::<f64>().unwrap() * scale
            })
            .collect()
    };
    // A fixed split: the runs compare per-stage bytes, and a split measured by time can differ
    // between two runs on a loaded machine.
    let base = ["--stages", "2", "--balance", "2,1", "--micro-batches", "4"];
    let (d, whole) = verified_run(&tiny(&base));
    assert!(d <= common::TOLERANCE, "{d}");
    assert!(whole.contains("split backward"), "{whole}");
    let (d, pairs) = verified_run(&tiny(&[&base[..], &["--weight-group", "2"]].concat()));
    assert!(d <= common::TOLERANCE, "{d}");
    assert!(pairs.contains("split (weight group 2) backward"), "{pairs}");
    let (whole, pairs) = (deferred(&whole), deferred(&pairs));
    assert_eq!(whole.len(), 2, "one line per stage");
    assert!(
        whole.iter().zip(&pairs).all(|(w, p)| w > p && *p > 0.0),
        "{whole:?} vs {pairs:?}"
    );
    let (d, fused) = verified_run(&tiny(&[&base[..], &["--backward", "fused"]].concat()));
    assert!(d <= common::TOLERANCE, "{d}");
    assert!(
        fused.contains("fused backward") && !fused.contains("deferred W"),
        "{fused}"
    );
    let stderr = train_failure(&tiny(&["--backward", "halfway"]));
    assert!(
        stderr.contains("halfway") && stderr.contains("split") && stderr.contains("fused"),
        "{stderr}"
    );
}

#[test]
fn unknown_remat_mode_is_named() {
    let stderr = train_failure(&tiny(&["--stages", "2", "--remat", "sometimes"]));
    assert!(stderr.contains("sometimes"), "{stderr}");
    for mode in ["never", "except_last", "always"] {
        assert!(stderr.contains(mode), "the allowed values: {stderr}");
    }
}

/// Any batch size: 250 rows over 2 replicas × 8 micro-batches (16- and 15-row micro-batches,
/// each loss weighted by its rows) trains like one device, for the MLP, the ResNet (batch norm:
/// the reference steps micro-batch by micro-batch, cut the same way) and the GPT (token means).
#[test]
fn a_batch_that_is_no_multiple_of_the_micro_batches_matches_single_device() {
    let uneven = ["--micro-batches", "8", "--replicas", "2", "--stages", "2"];
    verified(
        &[
            &uneven[..],
            &["--width", "16", "--batch", "250", "--steps", "2"],
        ]
        .concat(),
    );
    let resnet = ["--batch", "19", "--steps", "2"];
    verified(&[&common::TINY_RESNET[..], &uneven[..], &resnet[..]].concat());
    let gpt = [&common::TINY_GPT[..12], &["--batch", "21"], &uneven[..]].concat();
    verified(&gpt);
}

#[test]
fn batch_smaller_than_micro_batches_names_both() {
    let args = [
        "--width",
        "16",
        "--hidden-layers",
        "2",
        "--stages",
        "2",
        "--batch",
        "3",
        "--micro-batches",
        "4",
        "--steps",
        "1",
    ];
    let stderr = train_failure(&args);
    assert!(
        stderr.contains("--batch 3") && stderr.contains("--micro-batches 4"),
        "the message names the batch (3) and the micro-batches (4): {stderr}"
    );
}

#[test]
fn more_stages_than_layers_names_both() {
    // --hidden-layers 2: two blocks and a head, 3 layers.
    let stderr = train_failure(&tiny(&["--stages", "9", "--micro-batches", "4"]));
    assert!(
        stderr.contains('9') && stderr.contains("3 layers"),
        "the message names the stages (9) and the layer count (3): {stderr}"
    );
}

#[test]
fn balance_not_summing_to_the_layers_names_both() {
    // --hidden-layers 2: 3 layers; the balance sums to 4.
    let stderr = train_failure(&tiny(&["--balance", "2,2", "--micro-batches", "4"]));
    assert!(
        stderr.contains("sums to 4") && stderr.contains("has 3"),
        "the message names the sum (4) and the layer count (3): {stderr}"
    );
}

/// The data-parallel runs the issue names, on a small MLP: 2 replicas × 2 stages, plain, with
/// ZeRO-1 and with accumulation.
fn replicated(extra: &[&str]) -> String {
    let base = [
        "--model",
        "mlp",
        "--stages",
        "2",
        "--replicas",
        "2",
        "--micro-batches",
        "4",
        "--steps",
        "5",
        "--width",
        "32",
        "--hidden-layers",
        "3",
        "--batch",
        "32",
    ];
    verified_run(&[&base[..], extra].concat()).1
}

#[test]
fn two_replicas_by_two_stages_match_single_device() {
    let stdout = replicated(&[]);
    assert!(stdout.contains("2 replicas × 2 stages"), "{stdout}");
    assert!(
        stdout.contains("overlapped"),
        "the step line reports the all-reduce: {stdout}"
    );
    assert!(stdout.contains("replica 1 / stage 1"), "{stdout}");
}

#[test]
fn zero_one_matches_single_device_and_reports_memory() {
    let stdout = replicated(&["--zero", "1", "--optimizer", "adam", "--lr", "0.001"]);
    assert!(
        stdout.contains("with ZeRO-1") && stdout.contains("saved"),
        "{stdout}"
    );
}

/// ZeRO-2 and ZeRO-3 (issue 50) pass `--verify` and report each stage's shares per worker.
#[test]
fn zero_two_and_three_match_single_device_and_report_the_shares() {
    let two = replicated(&["--zero", "2", "--optimizer", "adam", "--lr", "0.001"]);
    assert!(
        two.contains("with ZeRO-2") && two.contains("ZeRO-2 per worker: gradients"),
        "{two}"
    );
    let three = replicated(&["--zero", "3", "--optimizer", "adam", "--accumulate", "2"]);
    assert!(
        three.contains("ZeRO-3 per worker") && three.contains("parameters"),
        "{three}"
    );
}

#[test]
fn accumulation_matches_single_device() {
    replicated(&["--accumulate", "2"]);
}

#[test]
fn batch_smaller_than_replicas_times_micro_batches_names_them() {
    let stderr = train_failure(&tiny(&["--replicas", "3", "--micro-batches", "8"]));
    assert!(
        stderr.contains("--replicas 3")
            && stderr.contains("--micro-batches 8")
            && stderr.contains("use --batch 24 or --micro-batches 5"),
        "{stderr}"
    );
}

#[test]
fn unsupported_zero_stage_is_refused() {
    let stderr = train_failure(&tiny(&["--zero", "4"]));
    assert!(
        stderr.contains("ZeRO stage 4") && stderr.contains("--zero 3"),
        "{stderr}"
    );
}

#[test]
fn the_device_list_reaches_the_builder_and_cuda_without_the_feature_says_how() {
    // Three devices for one replica of two stages: only the builder can refuse this, so the
    // message proves the CLI hands --devices to it.
    let err = train_failure(&tiny(&["--devices", "cpu,cpu,cpu", "--stages", "2"]));
    assert!(
        err.contains("3 devices") && err.contains("one device per stage"),
        "{err}"
    );
    // One per stage and one per worker train (both CPU here) and match single device.
    assert!(verified(&tiny(&["--devices", "cpu,cpu", "--stages", "2"])) <= common::TOLERANCE);
    let per_worker = [
        "--device",
        "cpu,cpu,cpu,cpu",
        "--stages",
        "2",
        "--replicas",
        "2",
    ];
    assert!(verified(&tiny(&per_worker)) <= common::TOLERANCE);
    if !cfg!(feature = "cuda") {
        let err = train_failure(&tiny(&["--device", "cuda:0"]));
        assert!(
            err.contains("--features cuda") && !err.contains("panicked"),
            "{err}"
        );
    }
}

/// The README's first command, shrunk to 4 blocks of width 256 and 2 micro-batches so the debug
/// build runs it in seconds: its defaults (Adam at PyTorch's settings, He-initialised blocks,
/// 20 steps, synthetic Gaussian classes) must visibly learn. The full-size run reaches 86.7 %
/// (this size 82 %); chance is 10 %.
#[test]
fn the_default_run_learns_well_above_chance() {
    let out = success(&[
        "--stages",
        "2",
        "--micro-batches",
        "2",
        "--width",
        "256",
        "--hidden-layers",
        "4",
    ]);
    let accuracy: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("held-out accuracy "))
        .and_then(|rest| rest.split('%').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no held-out accuracy line:\n{out}"));
    assert!(accuracy > 50.0, "held-out accuracy {accuracy}%:\n{out}");
}
