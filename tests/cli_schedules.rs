//! `pipetrain train --schedule zb-h1`: the zero-bubble schedule from the command line, on a
//! model whose layers split their backward (the MLP) and on one whose layers do not (the GPT).

mod common;
use common::{TINY_GPT, max_rel_diff, pipetrain, stdout_of_success};

#[test]
fn zb_h1_over_three_stages_matches_single_device() {
    let args = [
        "train",
        "--stages",
        "3",
        "--micro-batches",
        "6",
        "--schedule",
        "zb-h1",
        "--width",
        "32",
        "--hidden-layers",
        "4",
        "--batch",
        "24",
        "--steps",
        "2",
        "--verify",
    ];
    let out = pipetrain(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let stdout = stdout_of_success(&args, out);
    assert!(
        stdout.contains("zb-h1"),
        "the header names the schedule:\n{stdout}"
    );
    max_rel_diff(&stdout);
    assert!(
        !stderr.contains("warning"),
        "every MLP stage splits:\n{stderr}"
    );
}

#[test]
fn zb_h1_on_a_model_without_split_backward_warns_and_still_matches() {
    let args = [
        &["train"][..],
        &TINY_GPT,
        &["--stages", "2", "--micro-batches", "2", "--steps", "1"],
        &["--schedule", "zb-h1", "--verify"],
    ]
    .concat();
    let out = pipetrain(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let stdout = stdout_of_success(&args, out);
    max_rel_diff(&stdout);
    for stage in ["stage 0 (layers 0..", "stage 1 (layers "] {
        assert!(
            stderr.contains(&format!(
                "warning: zb-h1 places split backwards, but {stage}"
            )),
            "{stage}:\n{stderr}"
        );
    }
    assert!(stderr.contains("runs full backwards"), "{stderr}");
}
