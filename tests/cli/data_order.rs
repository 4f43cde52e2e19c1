//! `--held-out 0` trains on every example (no held-out metric) and `--no-shuffle` visits a
//! loaded data set in file order (issue 17, item 7).

use crate::common;
use common::{USAGE, failure_with, scratch, success};

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

/// Writes a `tensors:` data file of `rows` rows of 4 distinct features and I64 labels `i % 3`.
/// Returns the `--data` value.
fn data_file(dir: &Path, name: &str, rows: usize) -> String {
    let x: Vec<u8> = (0..rows * 4)
        .flat_map(|i| (((i * 7) % 11) as f32 / 11.0 - 0.5).to_le_bytes())
        .collect();
    let y: Vec<u8> = (0..rows)
        .flat_map(|i| (i as i64 % 3).to_le_bytes())
        .collect();
    let views = [
        ("x", TensorView::new(Dtype::F32, vec![rows, 4], &x).unwrap()),
        ("y", TensorView::new(Dtype::I64, vec![rows], &y).unwrap()),
    ];
    let path = dir.join(name);
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    format!("tensors:{}", path.display())
}

/// `pipetrain train` of a tiny MLP on `data`, 4 rows per batch, then `extra`.
fn train(data: &str, extra: &[&str]) -> String {
    let base = [
        "train",
        "--width",
        "8",
        "--hidden-layers",
        "1",
        "--classes",
        "3",
        "--data",
        data,
        "--batch",
        "4",
        "--micro-batches",
        "2",
    ];
    let args: Vec<&str> = base.iter().chain(extra).copied().collect();
    success(&args)
}

/// The losses of the `step i/n  loss x` lines.
fn losses(stdout: &str) -> Vec<f64> {
    stdout
        .lines()
        .filter(|l| l.starts_with("step "))
        .map(|l| {
            let after = l.split("loss ").nth(1).expect("a loss");
            after.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect()
}

#[test]
fn held_out_zero_trains_on_everything_and_evaluates_nothing() {
    let tmp = scratch("held-out-zero");
    let data = data_file(tmp.path(), "d.safetensors", 16);
    let out = train(&data, &["--held-out", "0", "--steps", "1"]);
    assert!(
        out.contains("16 training examples (4 batches per epoch), 0 held out"),
        "{out}"
    );
    assert!(out.contains("held-out: nothing held out"), "{out}");
    assert!(!out.contains("held-out accuracy"), "{out}");
    // Synthetic data takes 0 too (its one held-out batch is dropped), and nothing else.
    let out = success(&[
        "train",
        "--width",
        "8",
        "--hidden-layers",
        "1",
        "--batch",
        "4",
        "--micro-batches",
        "2",
        "--steps",
        "1",
        "--held-out",
        "0",
    ]);
    assert!(out.contains("nothing held out"), "{out}");
    let e = failure_with(USAGE, &["eval", "--data", &data, "--held-out", "0"]);
    assert!(e.contains("--held-out 0 holds nothing out"), "{e}");
}

#[test]
fn no_shuffle_visits_the_file_in_order() {
    let tmp = scratch("no-shuffle");
    let data = data_file(tmp.path(), "d.safetensors", 8);
    // The first 4 rows alone: one batch, the same examples as batch 0 in file order.
    let first = data_file(tmp.path(), "first.safetensors", 4);
    let ck = tmp.path().join("init.safetensors");
    let ck = ck.to_str().unwrap();
    // Fixed weights (and an lr too small to move an f32), so that only the data order can
    // differ between seeds.
    train(
        &data,
        &["--held-out", "0", "--steps", "1", "--checkpoint", ck],
    );
    let run = |data: &str, seed: &str, extra: &[&str]| {
        let mut args = vec![
            "--held-out",
            "0",
            "--steps",
            "2",
            "--init",
            ck,
            "--seed",
            seed,
        ];
        args.extend_from_slice(extra);
        losses(&train(data, &args))
    };
    let in_order = run(&data, "0", &["--no-shuffle", "--lr", "1e-30"]);
    assert_eq!(
        in_order,
        run(&data, "5", &["--no-shuffle", "--lr", "1e-30"])
    );
    // Batch 0 in file order holds rows 0..4 (the mean loss is order-free within a batch).
    let alone = run(&first, "0", &["--lr", "1e-30"]);
    assert!(
        (in_order[0] - alone[0]).abs() < 1e-5,
        "{in_order:?} {alone:?}"
    );
    // Shuffled, some seed visits another order (the test fails if none of 8 does).
    let shuffled = (0..8).map(|s| run(&data, &s.to_string(), &["--lr", "1e-30"]));
    assert!(
        shuffled.into_iter().any(|l| l != in_order),
        "shuffling never changed the order"
    );
    let e = failure_with(USAGE, &["train", "--no-shuffle", "--steps", "1"]);
    assert!(
        e.contains("--no-shuffle keeps the order of a loaded data set"),
        "{e}"
    );
}
