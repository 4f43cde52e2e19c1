//! Errors that name the real cause (issue 27, part 4): a weights file with a key missing lists
//! the key (not a shape error of another tensor); a checkpoint of another model names the stored
//! model and this run's; `--eps 0` names the setting; a weight made infinite names the weight; a
//! cosine run resumed with more `--steps` says why that cannot continue.
//!
//! Issue 38, class 5: an `--eps` below f32's range, a `--weight-decay` above it and a step decay
//! whose rate overflows are named before a step runs, not blamed on the learning rate after
//! it; optimizer state no run writes (a negative or NaN Adam second moment, a step count of
//! 2^64 − 1) is refused at load naming the entry; `eval --resume` names `--resume`; `export` of a weights file names `--init`, not the
//! library's `init_from`; numbers come back as given (`1e308`), not as 309 digits.

use crate::common;
use common::{RUNTIME, TINY, USAGE, failure_with, scratch, success};

use std::collections::HashMap;
use std::path::Path;

use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

/// `pipetrain train <TINY> <extra>` (a later flag overrides TINY's).
fn tiny<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [&["train"][..], &TINY, extra].concat()
}

/// The weights of checkpoint `from` without metadata and without `drop`, written to `to`
/// (burn's layout, as a store without metadata writes it); `extra` adds a copy of `drop`
/// under that name.
fn bare_weights(from: &Path, to: &Path, drop: &str, extra: Option<&str>) {
    let bytes = std::fs::read(from).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut views: Vec<(String, TensorView<'_>)> = file
        .tensors()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("__optimizer__") && n != drop)
        .collect();
    if let Some(name) = extra {
        views.push((name.to_string(), file.tensor(drop).unwrap()));
    }
    std::fs::write(to, safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn a_missing_key_is_listed_not_a_shape_error_of_another_tensor() {
    let tmp = scratch("causes-keys");
    let ck = tmp.path().join("ck.safetensors");
    success(&tiny(&["--checkpoint", ck.to_str().unwrap()]));
    let missing = tmp.path().join("missing.safetensors");
    bare_weights(&ck, &missing, "1.linear.bias", None);
    let e = failure_with(USAGE, &tiny(&["--init", missing.to_str().unwrap()]));
    assert!(
        e.contains(r#"missing key(s) in the file: "1.linear.bias""#),
        "{e}"
    );
    assert!(
        !e.contains("ShapeMismatch") && !e.contains("does not fit"),
        "{e}"
    );
    // One renamed: missing and unexpected listed together.
    let renamed = tmp.path().join("renamed.safetensors");
    bare_weights(&ck, &renamed, "1.linear.bias", Some("1.linear.b"));
    let e = failure_with(USAGE, &tiny(&["--init", renamed.to_str().unwrap()]));
    assert!(
        e.contains(r#"missing key(s) in the file: "1.linear.bias""#)
            && e.contains(r#"unexpected key(s) in the file: "1.linear.b""#),
        "{e}"
    );
}

#[test]
fn a_checkpoint_of_another_model_names_both_models() {
    let tmp = scratch("causes-model");
    let ck = tmp.path().join("ck.safetensors");
    let c = ck.to_str().unwrap();
    success(&tiny(&["--checkpoint", c]));
    for flag in ["--init", "--resume"] {
        let e = failure_with(USAGE, &tiny(&["--width", "32", "--steps", "2", flag, c]));
        assert!(
            e.contains(&format!("{flag} {c}: the file holds MLP-2x16"))
                && e.contains("the flags build MLP-2x32"),
            "{e}"
        );
        assert!(
            !e.contains("Shape {") && !e.contains("Import errors"),
            "{e}"
        );
        // `eval --resume` loads the weights as --init does, and said --init.
        let eval = [&["eval"][..], &TINY[..6], &["--width", "32", flag, c]].concat();
        let e = failure_with(USAGE, &eval);
        assert!(
            e.contains(&format!("{flag} {c}: the file holds MLP-2x16")),
            "{e}"
        );
    }
    // A device is not "no such file".
    let e = failure_with(USAGE, &tiny(&["--init", "/dev/zero"]));
    assert!(e.contains("/dev/zero: not a regular file"), "{e}");
    // Plain weights (no record of the model): the tensor and both shapes, in plain words.
    let bare = tmp.path().join("bare.safetensors");
    bare_weights(&ck, &bare, "", None);
    let e = failure_with(
        USAGE,
        &tiny(&["--width", "32", "--init", bare.to_str().unwrap()]),
    );
    assert!(
        e.contains("does not fit the model: the model's shape is [32, 32], the file's [16, 16]"),
        "{e}"
    );
}

#[test]
fn settings_that_make_the_first_update_non_finite_are_named() {
    let e = failure_with(USAGE, &tiny(&["--optimizer", "adam", "--eps", "0"]));
    assert!(e.contains("eps = 0") && e.contains("e.g. 1e-8"), "{e}");
    assert!(!e.contains("lower the learning rate"), "{e}");
    // Finite gradients, an update that overflows: the weight is named, not "tensor 2".
    let tmp = scratch("causes-inf");
    let ck = tmp.path().join("ck.safetensors");
    let args = tiny(&["--optimizer", "sgd", "--lr", "1e39"]);
    let args = [&args[..], &["--checkpoint", ck.to_str().unwrap()]].concat();
    let e = failure_with(RUNTIME, &args);
    assert!(
        e.contains("not written: weight `") && e.contains("is -inf"),
        "{e}"
    );
    assert!(!ck.exists());
}

#[test]
fn resuming_a_cosine_run_with_more_steps_says_why_it_cannot() {
    let tmp = scratch("causes-cosine");
    let ck = tmp.path().join("ck.safetensors");
    let c = ck.to_str().unwrap();
    success(&tiny(&[
        "--steps",
        "4",
        "--lr-schedule",
        "cosine",
        "--checkpoint",
        c,
    ]));
    let e = failure_with(
        USAGE,
        &tiny(&["--steps", "8", "--lr-schedule", "cosine", "--resume", c]),
    );
    assert!(
        e.contains("a schedule's rates follow --lr and --steps") && e.contains("--init"),
        "{e}"
    );
    assert!(!e.contains("the batches depend on it"), "{e}");
}

/// Settings that make the weights NaN after the first step, named before it: not a smaller
/// learning rate after it.
#[test]
fn settings_outside_f32_are_named_before_a_step() {
    for eps in ["1e-45", "1e-50", "1e-320"] {
        let e = failure_with(USAGE, &tiny(&["--optimizer", "adam", "--eps", eps]));
        assert!(
            e.contains(&format!("eps = {eps}")) && e.contains("f32") && e.contains("e.g. 1e-8"),
            "{e}"
        );
        assert!(!e.contains("learning rate") && !e.contains("step 1"), "{e}");
    }
    for optimizer in ["adam", "adamw", "sgd"] {
        let args = ["--optimizer", optimizer, "--weight-decay", "1e300"];
        let e = failure_with(USAGE, &tiny(&args));
        assert!(
            e.contains("weight_decay = 1e300") && e.contains("f32"),
            "{e}"
        );
        assert!(!e.contains("learning rate"), "{e}");
    }
    // The rate of step 3 overflows: refused before step 1, naming the decay.
    let step = [
        "--lr-schedule",
        "step",
        "--lr-step-size",
        "1",
        "--lr-gamma",
        "1e300",
        "--steps",
        "4",
    ];
    let e = failure_with(USAGE, &tiny(&step));
    assert!(
        e.contains("--lr-schedule: step decay by 1e300")
            && e.contains("step 3's rate")
            && e.contains("--lr-gamma"),
        "{e}"
    );
    assert!(
        !e.contains("step 1/") && !e.contains("learning_rate = inf"),
        "{e}"
    );
}

/// `export` of a weights file (not a checkpoint) names the flag that starts from one.
#[test]
fn export_of_weights_names_the_flag() {
    let tmp = scratch("causes-export");
    let ck = tmp.path().join("ck.safetensors");
    success(&tiny(&["--checkpoint", ck.to_str().unwrap()]));
    let bare = tmp.path().join("bare.safetensors");
    bare_weights(&ck, &bare, "", None);
    let out = tmp.path().join("out.safetensors");
    let e = failure_with(
        USAGE,
        &[
            "export",
            bare.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(
        e.contains("not a pipetrain checkpoint") && e.contains("--init"),
        "{e}"
    );
    assert!(!e.contains("init_from"), "{e}");
}

/// Numbers come back in the form they were given, or short: `lr 1e308`, not 309 digits (the
/// held-out fraction: `tests/cli/remedies.rs`).
#[test]
fn numbers_come_back_short() {
    // The step may fail (an update of 1e308 overflows); the banner is printed before it.
    let out = common::pipetrain(&tiny(&["--optimizer", "sgd", "--lr", "1e308"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(") lr 1e308,"), "{stdout}");
    assert!(!stdout.contains("00000000"), "{stdout}");
}

/// `from` rewritten to `to` with `edit` applied to its optimizer tensors (by name, as f32
/// values) and to its metadata; its checksums dropped (a deliberate rewrite).
fn rewrite_checkpoint(
    from: &Path,
    to: &Path,
    edit_tensor: impl Fn(&str, &mut Vec<f32>),
    edit_metadata: impl Fn(&mut HashMap<String, String>),
) {
    let bytes = std::fs::read(from).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut metadata = header.metadata().clone().unwrap();
    metadata.remove("pipetrain.checksums");
    edit_metadata(&mut metadata);
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let mut values: Vec<f32> = view
                .data()
                .chunks_exact(4)
                .map(|w| f32::from_le_bytes(w.try_into().unwrap()))
                .collect();
            edit_tensor(&name, &mut values);
            let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            (name, view.shape().to_vec(), data)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, shape, data)| {
            let view = TensorView::new(safetensors::Dtype::F32, shape.clone(), data).unwrap();
            (name.clone(), view)
        })
        .collect();
    std::fs::write(to, safetensors::serialize(views, Some(metadata)).unwrap()).unwrap();
}

/// Optimizer state no run writes is refused when the checkpoint is read, naming the entry,
/// before a step: it was resumed, then blamed on the learning rate (or panicked on an overflow).
#[test]
fn optimizer_state_is_checked_at_load() {
    let tmp = scratch("causes-state");
    let ck = tmp.path().join("ck.safetensors");
    let c = ck.to_str().unwrap();
    success(&tiny(&["--steps", "2", "--checkpoint", c]));
    let moment = "__optimizer__/0.linear.weight/momentum.moment_2";
    let bad = tmp.path().join("bad.safetensors");
    let b = bad.to_str().unwrap();
    for (value, said) in [(-1.0, "element 0 is -1"), (f32::NAN, "element 0 is NaN")] {
        let set = |name: &str, values: &mut Vec<f32>| {
            if name == moment {
                values[0] = value;
            }
        };
        rewrite_checkpoint(&ck, &bad, set, |_| {});
        let e = failure_with(RUNTIME, &tiny(&["--steps", "4", "--resume", b]));
        assert!(
            e.contains(&format!("optimizer state `{moment}` {said}")) && e.contains("--init"),
            "{e}"
        );
        assert!(!e.contains("step 3") && !e.contains("learning rate"), "{e}");
    }
    let overflow = |metadata: &mut HashMap<String, String>| {
        let key = "pipetrain.optimizer_scalars";
        let scalars = metadata[key].replacen(
            r#""momentum.time":{"UInt":2}"#,
            &format!(r#""momentum.time":{{"UInt":{}}}"#, u64::MAX),
            1,
        );
        assert_ne!(scalars, metadata[key], "a step count to change");
        metadata.insert(key.into(), scalars);
    };
    rewrite_checkpoint(&ck, &bad, |_, _| {}, overflow);
    let e = failure_with(RUNTIME, &tiny(&["--steps", "4", "--resume", b]));
    assert!(
        e.contains(&format!("/momentum.time` is {}", u64::MAX))
            && e.contains("more than the 2 optimizer steps"),
        "{e}"
    );
    assert!(!e.contains("panicked") && !e.contains("overflow"), "{e}");
}

#[test]
fn a_learning_rate_that_is_0_in_f32_is_refused_as_0_is() {
    // Issue 47, class 2: `--lr 1e-320`, 0 in f32, was accepted while `--lr 0` was refused.
    for lr in ["0", "1e-320"] {
        let e = failure_with(USAGE, &tiny(&["--lr", lr]));
        assert!(
            e.contains(&format!(
                "learning_rate = {lr}: not a positive finite number in f32"
            )) && e.contains("use --lr 0.01"),
            "{lr}: {e}"
        );
    }
}

/// Wrong causes and remedies (issue 47, class 6): `--optimizer adam --dampening 0.1` named
/// `--momentum`; bf16 with a BatchNorm model exited 1, not the documented 2; under bf16, ZB-H1's
/// split-backward warning blamed the model and offered `--backward split`, which changes
/// nothing.
#[test]
fn causes_of_optimizer_precision_and_split_backward_errors_are_named_right() {
    let e = failure_with(USAGE, &tiny(&["--optimizer", "adam", "--dampening", "0.1"]));
    assert!(
        e.contains("--dampening is not a setting of --optimizer adam")
            && !e.contains("--momentum is"),
        "{e}"
    );
    let resnet = [
        &["train"][..],
        &common::TINY_RESNET,
        &["--batch", "8", "--steps", "1", "--precision", "bf16"],
    ]
    .concat();
    let e = failure_with(USAGE, &resnet);
    assert!(e.contains("BatchNorm"), "{e}");
    let out = common::pipetrain(&tiny(&["--schedule", "zb-h1", "--precision", "bf16"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("under --precision bf16 every stage runs full backwards")
            && !stderr.contains("use --backward split"),
        "{stderr}"
    );
}
