//! `--checkpoint`, `--resume`, `--init` and `--tie-embeddings` as a user runs them: save at
//! 2 replicas × 2 stages, resume at the same layout (bit for bit against an uninterrupted run)
//! and at 1 stage (within 1e-5), refuse a resume with other data flags, start from a PyTorch
//! state dict, evaluate a checkpoint.

use crate::common;
use common::{USAGE, failure_with, scratch, success, tensors, write_safetensors};

const MODEL: [&str; 10] = [
    "train",
    "--width",
    "16",
    "--hidden-layers",
    "3",
    "--batch",
    "16",
    "--micro-batches",
    "2",
    "--optimizer",
];

/// `MODEL` with Adam at learning rate 0.01, then `extra`.
fn adam<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    MODEL
        .iter()
        .copied()
        .chain(["adam", "--lr", "0.01"])
        .chain(extra.iter().copied())
        .collect()
}

/// Stdout of the [`adam`] run, which must succeed.
fn run(extra: &[&str]) -> String {
    success(&adam(extra))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn resume_continues_bit_for_bit_and_under_another_layout() {
    let tmp = scratch("cli-ckpt-resume");
    let d = tmp.path();
    let p = |n: &str| d.join(n).to_string_lossy().to_string();
    let layout = ["--stages", "2", "--replicas", "2"];
    run(&[&layout[..], &["--steps", "4", "--checkpoint", &p("full")]].concat());
    let half = run(&[
        &layout[..],
        &[
            "--steps",
            "2",
            "--checkpoint",
            &p("half"),
            "--checkpoint-every",
            "1",
        ],
    ]
    .concat());
    assert!(
        half.contains("checkpoint: ") && half.contains("(step 1)") && half.contains("(step 2)"),
        "{half}"
    );

    let resumed = run(&[
        &layout[..],
        &[
            "--steps",
            "4",
            "--resume",
            &p("half"),
            "--checkpoint",
            &p("resumed"),
        ],
    ]
    .concat());
    assert!(
        resumed.contains("resumed: ") && resumed.contains("at step 2 of 4"),
        "{resumed}"
    );
    let (full, again) = (tensors(&d.join("full")), tensors(&d.join("resumed")));
    assert_eq!(full.len(), again.len());
    for (name, bytes) in &full {
        assert_eq!(
            bytes, &again[name],
            "`{name}` differs from the uninterrupted run"
        );
    }

    run(&[
        "--stages",
        "1",
        "--steps",
        "4",
        "--resume",
        &p("half"),
        "--checkpoint",
        &p("one"),
    ]);
    let one = tensors(&d.join("one"));
    for (name, bytes) in full
        .iter()
        .filter(|(n, _)| !n.starts_with("__optimizer__/"))
    {
        let (a, b) = (f32s(bytes), f32s(&one[name]));
        let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let diff: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
        assert!(
            norm(&diff) <= 1e-5 * norm(&a).max(1e-12),
            "`{name}` at 1 stage differs"
        );
    }

    // Another optimizer is refused.
    let e = failure_with(
        USAGE,
        &[&MODEL[..], &["sgd", "--steps", "4", "--resume", &p("half")]].concat(),
    );
    assert!(e.contains("`adam`") && e.contains("`sgd`"), "{e}");
    // Within one family too: plain SGD state cannot continue as SGD with momentum.
    let sgd = p("sgd");
    success(&[&MODEL[..], &["sgd", "--steps", "1", "--checkpoint", &sgd]].concat());
    let e = failure_with(
        USAGE,
        &[
            &MODEL[..],
            &["sgd-momentum", "--steps", "2", "--resume", &sgd],
        ]
        .concat(),
    );
    assert!(
        e.contains("--optimizer sgd,") && e.contains("--optimizer sgd-momentum"),
        "{e}"
    );
    // Another seed means other batches: refused, naming the flag.
    let e = failure_with(
        USAGE,
        &[
            &MODEL[..],
            &[
                "adam",
                "--steps",
                "4",
                "--seed",
                "9",
                "--resume",
                &p("half"),
            ],
        ]
        .concat(),
    );
    assert!(
        e.contains("--seed") && e.contains("the batches depend on it"),
        "{e}"
    );
    // Already there.
    let e = failure_with(USAGE, &adam(&["--steps", "2", "--resume", &p("half")]));
    assert!(e.contains("at step 2 already"), "{e}");
    // --verify cannot follow a resume.
    let e = failure_with(
        USAGE,
        &adam(&["--steps", "4", "--resume", &p("half"), "--verify"]),
    );
    assert!(e.contains("--verify"), "{e}");

    // eval takes a checkpoint's weights.
    let eval = success(&[
        "eval",
        "--width",
        "16",
        "--hidden-layers",
        "3",
        "--batch",
        "16",
        "--init",
        &p("full"),
    ]);
    assert!(eval.contains("held-out accuracy"), "{eval}");
}

/// A PyTorch-style state dict for MLP(width 4, 1 hidden layer, 3 classes) on 4 synthetic
/// features: `[out, in]` Linear weights, written with the safetensors format itself.
#[test]
fn init_from_a_pytorch_state_dict_and_errors_name_the_tensor() {
    let tmp = scratch("cli-ckpt-init");
    let d = tmp.path();
    let path = d.join("torch.safetensors");
    let weights: Vec<(&str, Vec<usize>, Vec<f32>)> = vec![
        (
            "0.linear.weight",
            vec![4, 4],
            (0..16).map(|i| i as f32 * 0.01).collect(),
        ),
        ("0.linear.bias", vec![4], vec![0.0; 4]),
        (
            "1.weight",
            vec![3, 4],
            (0..12).map(|i| i as f32 * -0.01).collect(),
        ),
        ("1.bias", vec![3], vec![0.1, 0.2, 0.3]),
    ];
    write_safetensors(&path, &weights);
    let mlp = [
        "--width",
        "4",
        "--hidden-layers",
        "1",
        "--classes",
        "3",
        "--batch",
        "8",
        "--micro-batches",
        "2",
        "--steps",
        "2",
    ];
    let out = success(
        &[
            &["train"],
            &mlp[..],
            &[
                "--stages",
                "2",
                "--init",
                path.to_str().unwrap(),
                "--verify",
            ],
        ]
        .concat(),
    );
    assert!(out.contains("init: weights from"), "{out}");

    let bad = d.join("bad.safetensors");
    write_safetensors(&bad, &weights[..3]);
    let e = failure_with(
        USAGE,
        &[&["train"], &mlp[..], &["--init", bad.to_str().unwrap()]].concat(),
    );
    assert!(
        e.contains("\"1.bias\"") && e.contains("bad.safetensors"),
        "{e}"
    );
}

#[test]
fn gpt_with_tied_embeddings_verifies_across_two_stages() {
    let out = success(&[
        "train",
        "--model",
        "gpt",
        "--vocab",
        "16",
        "--context",
        "8",
        "--d-model",
        "8",
        "--heads",
        "2",
        "--layers",
        "2",
        "--batch",
        "8",
        "--micro-batches",
        "2",
        "--stages",
        "2",
        "--steps",
        "3",
        "--tie-embeddings",
        "--optimizer",
        "adam",
        // PyTorch's ε = 1e-8: the GPT has no key bias, whose gradient (0 up to rounding) a
        // tiny ε would turn into lr-sized steps that differ between summation orders.
        "--lr",
        "0.01",
        "--verify",
    ]);
    assert!(out.contains("verify: max_rel_diff="), "{out}");
    let e = failure_with(
        USAGE,
        &["train", "--tie-embeddings", "--width", "8", "--steps", "1"],
    );
    assert!(e.contains("--model gpt"), "{e}");
}

#[test]
fn bad_checkpoint_paths_fail_before_training_naming_the_flag() {
    let e = failure_with(
        USAGE,
        &[
            "train",
            "--steps",
            "1",
            "--checkpoint",
            "/nonexistent-dir/run.st",
        ],
    );
    assert!(
        e.contains("--checkpoint")
            && e.contains("/nonexistent-dir")
            && e.contains("does not exist"),
        "{e}"
    );
    let e = failure_with(
        USAGE,
        &["train", "--steps", "2", "--resume", "/nonexistent.st"],
    );
    assert!(e.contains("--resume /nonexistent.st: no such file"), "{e}");
    let e = failure_with(USAGE, &["eval", "--init", "/nonexistent.st"]);
    assert!(e.contains("--init") && e.contains("/nonexistent.st"), "{e}");
}

#[test]
fn resume_identifies_the_data_by_its_contents_not_its_spelling() {
    // Issue 47, class 2: resume compared the --data spec as spelled: changed contents at the
    // same path (5× the rows) resumed with rc 0, and the same file spelled otherwise was
    // refused.
    let tmp = scratch("cli-ckpt-data");
    let d = tmp.path();
    let data = d.join("d.st");
    common::data_file(&data, 64);
    let ck = d.join("ck.st");
    let (c, spec) = (ck.to_str().unwrap(), format!("tensors:{}", data.display()));
    run(&["--data", &spec, "--steps", "2", "--checkpoint", c]);
    // The same file, spelled otherwise: resumes.
    let dotted = format!("tensors:{}/./d.st", d.display());
    let resumed = run(&["--data", &dotted, "--steps", "3", "--resume", c]);
    assert!(resumed.contains("resumed: "), "{resumed}");
    // Other contents at the same path: refused, naming --data and both contents.
    common::data_file(&data, 320);
    let e = failure_with(
        USAGE,
        &adam(&["--data", &spec, "--steps", "3", "--resume", c]),
    );
    assert!(
        e.contains("the run was saved with --data tensors, ")
            && e.contains("this one has --data tensors, ")
            && e.contains("the batches depend on it"),
        "{e}"
    );
}
