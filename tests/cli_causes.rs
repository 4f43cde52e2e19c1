//! Errors that name the real cause (issue 27, part 4): a weights file with a key missing lists
//! the key (not a shape error of another tensor); a checkpoint of another model names the stored
//! model and this run's; `--eps 0` names the setting; a weight made infinite names the weight; a
//! cosine run resumed with more `--steps` says why that cannot continue.

mod common;
use common::{RUNTIME, TINY, USAGE, failure_with, scratch, success};

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
