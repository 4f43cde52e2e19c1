//! `--optimizer sgd --lr 1e6` (SGD: Adam's steps are bounded by lr, so its weights stay finite)
//! stops with an error naming the step, stage and parameter before any checkpoint of NaN
//! weights is written; `--skip-nonfinite` skips such steps and counts them;
//! `--clip-grad-norm` on 2 stages × 2 replicas matches single-device clipping (issue 17, items 5
//! and 6); NaN weights that reach `--verify` fail it with exit 3 (issue 26, item 4).

use crate::common;
use common::{RUNTIME, TINY, VERIFY_FAILED, failure_with, max_rel_diff, scratch, success, tensors};

/// `pipetrain train <TINY> --micro-batches 4 <extra>` with `--steps` replaced.
fn tiny<'a>(steps: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train"];
    args.extend_from_slice(&TINY[..6]);
    args.extend_from_slice(&["--steps", steps, "--micro-batches", "4"]);
    args.extend_from_slice(extra);
    args
}

#[test]
fn a_huge_learning_rate_stops_naming_the_step_before_a_nan_checkpoint() {
    let tmp = scratch("nonfinite");
    let ck = tmp.path().join("ck.safetensors");
    let ck = ck.to_str().unwrap();
    let args = tiny(
        "8",
        &[
            "--optimizer",
            "sgd",
            "--lr",
            "1e6",
            "--checkpoint",
            ck,
            "--checkpoint-every",
            "1",
        ],
    );
    let e = failure_with(RUNTIME, &args);
    assert!(e.contains("error: step "), "{e}");
    assert!(
        e.contains("non-finite gradient of `0.linear.weight`"),
        "{e}"
    );
    assert!(e.contains("stage 0"), "{e}");
    assert!(
        e.contains("--skip-nonfinite") && e.contains("--clip-grad-norm"),
        "{e}"
    );
    // The last checkpoint written holds finite weights only.
    for (name, bytes) in tensors(std::path::Path::new(ck)) {
        if name.ends_with("weight") || name.ends_with("bias") {
            let finite = bytes
                .chunks(4)
                .all(|b| f32::from_le_bytes(b.try_into().unwrap()).is_finite());
            assert!(finite, "{name} holds a non-finite weight");
        }
    }
}

#[test]
fn skip_nonfinite_skips_and_counts_the_steps() {
    let tmp = scratch("skip-nonfinite");
    let metrics = tmp.path().join("m.csv");
    let m = metrics.to_str().unwrap();
    let out = success(&tiny(
        "6",
        &[
            "--optimizer",
            "sgd",
            "--lr",
            "1e6",
            "--skip-nonfinite",
            "--metrics",
            m,
        ],
    ));
    assert!(out.contains("skipped (non-finite)"), "{out}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|c| *c == "skipped").unwrap();
    let last: Vec<&str> = text.lines().last().unwrap().split(',').collect();
    let skipped: u64 = last[col].parse().unwrap();
    assert!(skipped >= 1, "{text}");
}

#[test]
fn clipping_on_two_stages_and_two_replicas_matches_one_device() {
    let tmp = scratch("clip");
    let metrics = tmp.path().join("m.csv");
    let m = metrics.to_str().unwrap();
    let extra = [
        "--stages",
        "2",
        "--replicas",
        "2",
        "--clip-grad-norm",
        "0.05",
        "--optimizer",
        "adam",
        "--lr",
        "1e-2",
        "--verify",
        "--metrics",
        m,
    ];
    let out = success(&tiny("4", &extra));
    max_rel_diff(&out);
    assert!(out.contains("grad-norm "), "{out}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|c| *c == "grad_norm").unwrap();
    for row in text.lines().skip(1) {
        let norm: f64 = row.split(',').nth(col).unwrap().parse().unwrap();
        assert!(
            norm.is_finite() && norm > 0.05,
            "the bound clips every step: {row}"
        );
    }
    let e = failure_with(2, &tiny("1", &["--clip-grad-norm", "0"]));
    assert!(e.contains("--clip-grad-norm"), "{e}");
}

#[test]
fn a_step_stopped_before_any_stage_applied_it_saves_the_last_good_step() {
    // Issue 27: the weights were intact, yet no --checkpoint was written.
    let tmp = scratch("nonfinite-last-good");
    let path = tmp.path().join("ck.safetensors");
    let ck = path.to_str().unwrap();
    let args = tiny(
        "8",
        &["--optimizer", "sgd", "--lr", "1e6", "--checkpoint", ck],
    );
    let e = failure_with(RUNTIME, &args);
    let failed: u64 = e
        .split("error: step ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `error: step N:` in {e}"));
    assert!(failed >= 2, "{e}");
    assert!(
        e.contains(&format!(
            "weights of step {}, the last good one",
            failed - 1
        )),
        "{e}"
    );
    let saved = pipetrain::Checkpoint::read(&path).expect("the last good step's checkpoint");
    assert_eq!(saved.progress().step, failed - 1);
    for (name, bytes) in tensors(&path) {
        let finite = bytes
            .chunks(4)
            .all(|b| f32::from_le_bytes(b.try_into().unwrap()).is_finite());
        assert!(finite, "{name} holds a non-finite value");
    }
    // It is the state an uninterrupted run of that many steps saves.
    let whole = tmp.path().join("whole.safetensors");
    let n = (failed - 1).to_string();
    success(&tiny(
        &n,
        &[
            "--optimizer",
            "sgd",
            "--lr",
            "1e6",
            "--checkpoint",
            whole.to_str().unwrap(),
        ],
    ));
    assert_eq!(tensors(&path), tensors(&whole));
}

/// NaN reaches `--verify`: SGD at lr 1e39 (finite in f64, infinite once the optimizer applies it
/// in f32) turns the first step's finite gradients into infinite and NaN weights (∞ · 0), in the
/// pipeline and in the single-device copy alike; `--skip-nonfinite` skips the later steps'
/// non-finite gradients, so the run ends and compares NaN weights. A NaN difference must fail
/// the verification (exit 3), never pass it by comparing false against the tolerance.
#[test]
fn a_nan_that_reaches_verify_exits_3() {
    let args = tiny(
        "2",
        &[
            "--stages",
            "2",
            "--optimizer",
            "sgd",
            "--lr",
            "1e39",
            "--skip-nonfinite",
            "--verify",
        ],
    );
    let e = failure_with(VERIFY_FAILED, &args);
    assert!(e.contains("verify FAILED"), "{e}");
    assert!(e.contains("NaN: the run diverged"), "{e}");
}
