//! `pipetrain train --model mlp|resnet|unet|gpt` and `--data ...`: each model trains under
//! `--stages 2 --verify` on tiny sizes; MNIST (IDX), safetensors and text files the tests
//! write train and report held-out accuracy / perplexity; `pipetrain eval` evaluates.

use crate::common;
use common::{USAGE, failure_with, max_rel_diff, scratch, success};

use std::collections::HashMap;

use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// `pipetrain train --stages 2 --steps 3 --verify <args>`; checks max_rel_diff, returns stdout.
fn verified(args: &[&str]) -> String {
    let args = [
        &["train", "--stages", "2", "--steps", "3", "--verify"][..],
        args,
    ]
    .concat();
    let stdout = success(&args);
    max_rel_diff(&stdout);
    stdout
}

/// The value after `held-out accuracy ` as a fraction, or after `held-out perplexity `.
fn held_out(stdout: &str, what: &str) -> f64 {
    let prefix = format!("held-out {what} ");
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{stdout}"));
    let number = line[prefix.len()..].split([' ', '%']).next().unwrap();
    number.parse().unwrap()
}

#[test]
fn mlp_trains_under_verify() {
    let stdout = verified(&[
        "--model",
        "mlp",
        "--width",
        "16",
        "--hidden-layers",
        "3",
        "--micro-batches",
        "4",
        "--batch",
        "16",
    ]);
    assert!((0.0..=100.0).contains(&held_out(&stdout, "accuracy")));
}

#[test]
fn resnet_trains_under_verify_with_remat_never() {
    let stdout = verified(&[
        "--model",
        "resnet",
        "--remat",
        "never",
        "--channels",
        "4",
        "--blocks",
        "2",
        "--image",
        "8",
        "--classes",
        "3",
        "--micro-batches",
        "2",
        "--batch",
        "8",
        "--threads",
        "1",
    ]);
    assert!(stdout.contains("ResNet"), "{stdout}");
    assert!((0.0..=100.0).contains(&held_out(&stdout, "accuracy")));
}

#[test]
fn resnet_defaults_to_remat_never_and_refuses_another_mode() {
    let stdout = success(
        &[
            &["train"][..],
            &common::TINY_RESNET,
            &[
                "--classes",
                "3",
                "--batch",
                "8",
                "--micro-batches",
                "2",
                "--steps",
                "1",
            ],
        ]
        .concat(),
    );
    assert!(stdout.contains("remat never"), "{stdout}");
    let stderr = failure_with(
        USAGE,
        &[
            "train", "--model", "resnet", "--remat", "always", "--steps", "1",
        ],
    );
    assert!(
        stderr.contains("--remat never") && stderr.contains("always"),
        "{stderr}"
    );
}

#[test]
fn gpt_trains_under_verify_and_reports_perplexity() {
    let stdout = verified(&[&common::TINY_GPT[..], &["--micro-batches", "2"]].concat());
    let perplexity = held_out(&stdout, "perplexity");
    assert!(perplexity > 1.0 && perplexity.is_finite(), "{stdout}");
}

/// `--context-range`: a GPT whose sequence length changes at every step (no re-planning, no
/// declared shape) trains like one device at 2 stages × 2 replicas, both schedules.
#[test]
fn gpt_with_a_sequence_length_changing_every_step_passes_verify() {
    let range: pipetrain_data::ContextRange = "3..8".parse().unwrap();
    let lengths: Vec<usize> = (0..6).map(|i| range.length_at(0, i)).collect();
    assert!(
        lengths.windows(2).all(|w| w[0] != w[1]),
        "seed 0 draws a new length every step: {lengths:?}"
    );
    for schedule in ["gpipe", "1f1b"] {
        let stdout = verified(
            &[
                &common::TINY_GPT[..],
                &[
                    "--context-range",
                    "3..8",
                    "--stages",
                    "2",
                    "--replicas",
                    "2",
                ],
                &["--micro-batches", "2", "--steps", "6", "--seed", "0"],
                &["--schedule", schedule, "--optimizer", "sgd"],
            ]
            .concat(),
        );
        assert!(stdout.contains("drawn from 3..8"), "{stdout}");
    }
}

#[test]
fn context_range_longer_than_the_context_or_without_gpt_is_refused() {
    let stderr = failure_with(
        USAGE,
        &[
            &["train"],
            &common::TINY_GPT[..],
            &["--context-range", "4..9"],
        ]
        .concat(),
    );
    assert!(stderr.contains("--context 9"), "{stderr}");
    let stderr = failure_with(USAGE, &["train", "--context-range", "4..8"]);
    assert!(stderr.contains("--model gpt"), "{stderr}");
    let stderr = failure_with(
        USAGE,
        &["train", "--model", "gpt", "--context-range", "8..4"],
    );
    assert!(stderr.contains("MIN ≤ MAX"), "{stderr}");
}

/// `--model unet`: long skips cut at stage boundaries (`[1, 2, 2, 1]` cuts both skips twice),
/// both schedules, every remat mode, replicas: `--verify` passes.
#[test]
fn unet_with_skips_across_stages_passes_verify() {
    let unet = common::TINY_UNET;
    let data = [
        "--classes",
        "3",
        "--batch",
        "12",
        "--micro-batches",
        "3",
        "--steps",
        "2",
    ];
    for (stages, balance, schedule, remat, replicas) in [
        ("2", "3,3", "gpipe", "never", "1"),
        ("3", "2,2,2", "1f1b", "always", "1"),
        ("4", "1,2,2,1", "1f1b", "except_last", "2"),
        ("4", "1,2,2,1", "gpipe", "always", "2"),
    ] {
        let layout = [
            "--stages",
            stages,
            "--balance",
            balance,
            "--replicas",
            replicas,
        ];
        let flags = [&layout[..], &["--schedule", schedule, "--remat", remat]].concat();
        let stdout = verified(&[&unet[..], &data[..], &flags[..]].concat());
        assert!(stdout.contains("U-Net (2 levels"), "{stdout}");
    }
    let stderr = failure_with(USAGE, &[&["train"], &unet[..], &["--image", "6"]].concat());
    assert!(stderr.contains("multiple of 2^2 = 4"), "{stderr}");
}

/// Writes a tiny MNIST: `n` images of `side`×`side` whose label is visible in the pixels.
fn write_mnist(dir: &std::path::Path, n: usize, side: usize) {
    let mut images = Vec::new();
    images.extend(0x0000_0803u32.to_be_bytes());
    for v in [n as u32, side as u32, side as u32] {
        images.extend(v.to_be_bytes());
    }
    let mut labels = Vec::new();
    labels.extend(0x0000_0801u32.to_be_bytes());
    labels.extend((n as u32).to_be_bytes());
    for i in 0..n {
        let label = (i % 10) as u8;
        labels.push(label);
        images.extend((0..side * side).map(|p| if p % 10 == label as usize { 255 } else { 0 }));
    }
    std::fs::write(dir.join("train-images-idx3-ubyte"), images).unwrap();
    std::fs::write(dir.join("train-labels-idx1-ubyte"), labels).unwrap();
}

#[test]
fn mnist_files_train_under_verify_and_report_held_out_accuracy() {
    let tmp = scratch("mnist");
    let dir = tmp.path();
    write_mnist(dir, 40, 4);
    let data = format!("mnist:{}", dir.display());
    let stdout = verified(&[
        "--data",
        &data,
        "--held-out",
        "0.2",
        "--width",
        "16",
        "--hidden-layers",
        "2",
        "--micro-batches",
        "2",
        "--batch",
        "16",
    ]);
    assert!(stdout.contains("32 training examples"), "{stdout}");
    assert!(stdout.contains("input 16"), "{stdout}");
    let acc = held_out(&stdout, "accuracy");
    assert!((0.0..=100.0).contains(&acc));
    assert!(stdout.contains("(8 examples)"), "{stdout}");
    // The same images as 1×4×4 for the ResNet.
    verified(&[
        "--model",
        "resnet",
        "--remat",
        "never",
        "--channels",
        "4",
        "--blocks",
        "1",
        "--threads",
        "1",
        "--data",
        &data,
        "--micro-batches",
        "2",
        "--batch",
        "8",
    ]);
    let eval = success(&[
        "eval",
        "--data",
        &data,
        "--width",
        "16",
        "--hidden-layers",
        "2",
    ]);
    assert!(eval.contains("held-out accuracy"), "{eval}");
}

#[test]
fn safetensors_file_trains_under_verify() {
    let tmp = scratch("tensors");
    let dir = tmp.path();
    let (n, features) = (24usize, 6usize);
    let x: Vec<u8> = (0..n * features)
        .flat_map(|i| ((i % 7) as f32 / 7.0).to_le_bytes())
        .collect();
    let y: Vec<u8> = (0..n)
        .flat_map(|i| ((i % 3) as i64).to_le_bytes())
        .collect();
    let views: HashMap<String, TensorView<'_>> = [
        (
            "x".to_string(),
            TensorView::new(Dtype::F32, vec![n, features], &x).unwrap(),
        ),
        (
            "y".to_string(),
            TensorView::new(Dtype::I64, vec![n], &y).unwrap(),
        ),
    ]
    .into_iter()
    .collect();
    let path = dir.join("data.safetensors");
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    let data = format!("tensors:{}", path.display());
    let stdout = verified(&[
        "--data",
        &data,
        "--classes",
        "3",
        "--width",
        "8",
        "--hidden-layers",
        "2",
        "--micro-batches",
        "2",
        "--batch",
        "8",
        "--held-out",
        "0.25",
    ]);
    assert!(stdout.contains("input 6, 3 classes"), "{stdout}");
    assert!(stdout.contains("(6 examples)"), "{stdout}");
}

/// `dir/input.txt`: 8 times a 45-byte sentence (40 windows of 8 + 1 bytes); its `--data` spec.
fn fox_text(dir: &std::path::Path) -> String {
    let path = dir.join("input.txt");
    std::fs::write(
        &path,
        "the quick brown fox jumps over the lazy dog. ".repeat(8),
    )
    .unwrap();
    format!("text:{}", path.display())
}

/// A tiny GPT on `data` (text): context 8, width 16, 2 heads, 1 block, batches of 8.
fn text_gpt(data: &str) -> Vec<&str> {
    let sizes = [
        "--context",
        "8",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--layers",
        "1",
    ];
    [
        &["--model", "gpt", "--data", data][..],
        &sizes[..],
        &["--batch", "8"],
    ]
    .concat()
}

#[test]
fn text_file_trains_the_gpt_and_reports_perplexity() {
    let tmp = scratch("text");
    let data = fox_text(tmp.path());
    let gpt = text_gpt(&data);
    let stdout = verified(&[&gpt[..], &["--micro-batches", "2"]].concat());
    assert!(stdout.contains("vocab 256"), "{stdout}");
    assert!(held_out(&stdout, "perplexity").is_finite());
    // Windows of --context 8 tokens, each batch cut to a length drawn from 2..8.
    let varying = ["--context-range", "2..8", "--stages", "2", "--steps", "4"];
    let stdout = verified(&[&gpt[..], &varying[..]].concat());
    assert!(stdout.contains("drawn from 2..8"), "{stdout}");
}

/// `--keep-last`: 36 training windows in batches of 8 give an epoch of 4 full batches and a
/// short one of 4 rows (2 replicas × 2 micro-batches of 1); the epoch trains every row once
/// and `--verify` passes. Too short a last batch, synthetic data or accumulation are refused.
#[test]
fn keep_last_trains_an_epoch_whose_last_batch_is_short() {
    let tmp = scratch("keep-last");
    let data = fox_text(tmp.path());
    let gpt = text_gpt(&data);
    let layout = ["--micro-batches", "2", "--replicas", "2", "--steps", "5"];
    let stdout = verified(&[&gpt[..], &layout[..], &["--keep-last"]].concat());
    assert!(
        stdout.contains("36 training examples (5 batches per epoch)"),
        "{stdout}"
    );
    let stdout = verified(&[&gpt[..], &layout[..]].concat());
    assert!(stdout.contains("(4 batches per epoch)"), "{stdout}");
    let start = [&["train"][..], &gpt[..], &["--keep-last"]].concat();
    let too_short = ["--batch", "10", "--micro-batches", "8"];
    let stderr = failure_with(USAGE, &[&start[..], &too_short[..]].concat());
    assert!(stderr.contains("has 6 rows, fewer than"), "{stderr}");
    let stderr = failure_with(USAGE, &[&start[..], &["--accumulate", "2"]].concat());
    assert!(
        stderr.contains("--keep-last with --accumulate 2"),
        "{stderr}"
    );
    let stderr = failure_with(USAGE, &["train", "--keep-last"]);
    assert!(stderr.contains("applies to loaded data"), "{stderr}");
}

#[test]
fn unknown_data_kind_is_named() {
    let stderr = failure_with(
        USAGE,
        &["train", "--data", "imagenet:/data", "--steps", "1"],
    );
    assert!(stderr.contains("imagenet:/data"), "{stderr}");
}

#[test]
fn resnet_with_replicas_verifies_its_trained_parameters() {
    // Replicas broadcast replica 0's batch-norm running statistics (DDP's broadcast_buffers):
    // they stay identical, and the trained parameters match single-device training over the
    // same micro-batches.
    let stdout = verified(
        &[
            &common::TINY_RESNET[..],
            &[
                "--classes",
                "3",
                "--micro-batches",
                "2",
                "--batch",
                "8",
                "--replicas",
                "2",
                "--stages",
                "2",
                "--threads",
                "1",
            ],
        ]
        .concat(),
    );
    assert!(
        stdout.contains("comparing trained parameters only"),
        "{stdout}"
    );
}

/// The losses a run's stdout prints, step by step.
fn losses(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("step "))
        .filter_map(|l| l.split("loss ").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// Writes `tensors` (name, dtype, shape, little-endian bytes) to `path`.
fn write_ints(path: &std::path::Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: HashMap<String, TensorView<'_>> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn gpt_trains_on_token_ids_from_a_tensors_file_as_on_the_text() {
    // Issue 27: int ids were refused ("accepted: F32") and float ones too ("needs token ids").
    let tmp = scratch("tensors-gpt");
    let dir = tmp.path();
    let text = fox_text(dir);
    let bytes = std::fs::read(dir.join("input.txt")).unwrap();
    let windows: Vec<&[u8]> = bytes.chunks_exact(9).collect();
    let n = windows.len();
    let i64s = |ids: &mut dyn Iterator<Item = u8>| -> Vec<u8> {
        ids.flat_map(|b| i64::from(b).to_le_bytes()).collect()
    };
    let i32s = |ids: &mut dyn Iterator<Item = u8>| -> Vec<u8> {
        ids.flat_map(|b| i32::from(b).to_le_bytes()).collect()
    };
    let tokens = dir.join("tokens.safetensors");
    let all = i64s(&mut windows.iter().flat_map(|w| w.iter().copied()));
    write_ints(&tokens, &[("tokens", Dtype::I64, vec![n, 9], all)]);
    let pairs = dir.join("pairs.safetensors");
    let x = i32s(&mut windows.iter().flat_map(|w| w[..8].iter().copied()));
    let y = i32s(&mut windows.iter().flat_map(|w| w[1..].iter().copied()));
    write_ints(
        &pairs,
        &[
            ("x", Dtype::I32, vec![n, 8], x),
            ("y", Dtype::I32, vec![n, 8], y),
        ],
    );
    let run = |data: &str| {
        let mut args = vec!["train"];
        args.extend(text_gpt(data));
        args.extend(["--vocab", "256", "--steps", "3", "--micro-batches", "2"]);
        losses(&success(&args))
    };
    let from_text = run(&text);
    assert_eq!(from_text.len(), 3);
    for file in [&tokens, &pairs] {
        let data = format!("tensors:{}", file.display());
        assert_eq!(run(&data), from_text, "{data}");
    }
    // Token ids are not an MLP's inputs.
    let data = format!("tensors:{}", tokens.display());
    let e = failure_with(USAGE, &["train", "--data", &data, "--steps", "1"]);
    assert!(e.contains("--model gpt"), "{e}");
}

/// Token ids of shape [N, T] at `path`: `rows` sequences of `t` tokens below 16, targets the
/// same shifted by one.
fn token_file(path: &std::path::Path, rows: usize, t: usize) {
    let x: Vec<i64> = (0..rows * t).map(|i| (i % 16) as i64).collect();
    let y: Vec<i64> = (0..rows * t).map(|i| ((i + 1) % 16) as i64).collect();
    let bytes = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let (x, y) = (bytes(&x), bytes(&y));
    let views = [
        ("x", TensorView::new(Dtype::I64, vec![rows, t], &x).unwrap()),
        ("y", TensorView::new(Dtype::I64, vec![rows, t], &y).unwrap()),
    ];
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn a_context_given_against_the_datas_sequence_length_is_refused() {
    // Issue 47, class 2: token data of another length overrode --context in silence, and the
    // checkpoint then failed `eval` with the user's own flags.
    let tmp = scratch("gpt-context");
    let data = tmp.path().join("tokens.st");
    token_file(&data, 32, 8);
    let spec = format!("tensors:{}", data.display());
    let gpt = [&common::TINY_GPT[..], &["--data", &spec, "--steps", "1"]].concat();
    let mut args = vec!["train"];
    args.extend(&gpt);
    // TINY_GPT gives --context 8: the data's length, accepted.
    success(&args);
    args.extend(["--context", "16"]);
    let e = failure_with(USAGE, &args);
    assert!(
        e.contains("--context 16: the data's sequences hold 8 tokens")
            && e.contains("give --context 8"),
        "{e}"
    );
}

#[test]
fn eval_refuses_a_batch_of_0() {
    // Issue 47, class 2: `eval --batch 0` reported 0 % on 0 examples with rc 0.
    let e = failure_with(USAGE, &["eval", "--width", "8", "--batch", "0"]);
    assert!(e.contains("--batch 0") && e.contains("at least 1"), "{e}");
}
