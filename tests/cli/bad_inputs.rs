//! Hostile inputs refused at load, before anything is built or trained (issue 12, items 1–3):
//! a huge or negative label, NaN inputs, NaN weights; and weights of other float types
//! (F64, F16, BF16) converted rather than panicking a matmul. Every error names the value and
//! a remedy.

use crate::common;
use common::{RUNTIME, USAGE, failure_with, scratch, success};

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

/// Writes a `tensors:` data file of `labels.len()` rows of 4 features (`x`) and `labels` (`y`,
/// I64); `poison` sets one input value. Returns the `--data` value.
fn data_file(dir: &Path, labels: &[i64], poison: Option<(usize, f32)>) -> String {
    let mut x: Vec<f32> = (0..labels.len() * 4)
        .map(|i| (i % 5) as f32 / 5.0)
        .collect();
    if let Some((i, v)) = poison {
        x[i] = v;
    }
    let y: Vec<u8> = labels.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_data(dir, &x, Dtype::I64, vec![labels.len()], &y)
}

/// Writes `x` (F32, rows × 4) and `y` (`dtype`, `shape`, little-endian `bytes`) as a
/// `tensors:` data file. Returns the `--data` value.
fn write_data(dir: &Path, x: &[f32], dtype: Dtype, shape: Vec<usize>, bytes: &[u8]) -> String {
    let rows = shape[0];
    let x: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let views: HashMap<String, TensorView<'_>> = [
        ("x", TensorView::new(Dtype::F32, vec![rows, 4], &x).unwrap()),
        ("y", TensorView::new(dtype, shape, bytes).unwrap()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let path = dir.join("data.safetensors");
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    format!("tensors:{}", path.display())
}

/// The tiny MLP every run here trains or evaluates.
const MLP: [&str; 4] = ["--width", "8", "--hidden-layers", "1"];

/// `pipetrain <command> <MLP> <extra>`.
fn mlp<'a>(command: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [command].iter().chain(&MLP).chain(extra).copied().collect()
}

/// `train` of a tiny MLP on `data` with `--classes 3`, then `extra`.
fn train<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let base = [
        "--data",
        data,
        "--classes",
        "3",
        "--batch",
        "4",
        "--micro-batches",
        "2",
        "--steps",
        "1",
        "--held-out",
        "0.25",
    ];
    let args: Vec<&str> = base.iter().chain(extra).copied().collect();
    mlp("train", &args)
}

#[test]
fn a_huge_label_is_refused_at_load_not_sized_into_the_model() {
    // Item 1: y = 2^31 − 1 once made a 2^31-class head (an OOM kill at 24 GB).
    let tmp = scratch("huge-label");
    let labels = [0, 1, 2, 0, 1, 2, 2_147_483_647, 0];
    let data = data_file(tmp.path(), &labels, None);
    let e = failure_with(USAGE, &train(&data, &[]));
    assert!(
        e.contains("row 6") && e.contains("label 2147483647") && e.contains("0..3"),
        "{e}"
    );
    // No remedy that would size a 2^31-class head: the value is corrupt.
    assert!(
        e.contains("fix the data") && e.contains("(--classes 3)") && !e.contains("use --classes"),
        "{e}"
    );
    // A label just above --classes is refused the same way: --classes is never raised.
    let data = data_file(tmp.path(), &[0, 1, 2, 3, 0, 1, 2, 0], None);
    let e = failure_with(USAGE, &train(&data, &[]));
    assert!(e.contains("row 3") && e.contains("use --classes 4"), "{e}");
}

#[test]
fn a_model_too_wide_for_the_machine_is_refused_before_it_is_allocated() {
    // Asking for 2^31 classes explicitly: an error naming the flag, not an out-of-memory kill.
    let e = failure_with(
        USAGE,
        &[
            "train",
            "--classes",
            "2147483648",
            "--width",
            "1024",
            "--steps",
            "1",
        ],
    );
    assert!(
        e.contains("2147483648 classes")
            && e.contains("use a smaller --width, --hidden-layers, --classes or --batch"),
        "{e}"
    );
}

#[test]
fn a_negative_label_is_refused_at_load_naming_the_row() {
    // Item 2: it used to panic a worker mid-step (`index -1 out of bounds`).
    let tmp = scratch("negative-label");
    let data = data_file(tmp.path(), &[0, 1, 2, 0, -1, 2, 1, 0], None);
    let e = failure_with(USAGE, &train(&data, &[]));
    assert!(e.contains("row 4") && e.contains("label -1"), "{e}");
    assert!(e.contains("fix the data"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn float_or_wrongly_shaped_labels_are_refused_at_load_naming_the_remedy() {
    // They used to load and fail at the first step's loss.
    let tmp = scratch("float-labels");
    let x = vec![0.5; 8 * 4];
    let labels: Vec<u8> = (0..8)
        .flat_map(|i| ((i % 3) as f32).to_le_bytes())
        .collect();
    let data = write_data(tmp.path(), &x, Dtype::F32, vec![8], &labels);
    let e = failure_with(USAGE, &train(&data, &[]));
    assert!(e.contains("the targets are float of shape [N]"), "{e}");
    assert!(e.contains("--model mlp") && e.contains("int64"), "{e}");
    let pairs: Vec<u8> = (0..16i64).flat_map(|i| (i % 3).to_le_bytes()).collect();
    let data = write_data(tmp.path(), &x, Dtype::I64, vec![8, 2], &pairs);
    let e = failure_with(USAGE, &train(&data, &[]));
    assert!(e.contains("int of shape [N, 2]"), "{e}");
    assert!(e.contains("class labels of shape [N]"), "{e}");
}

#[test]
fn nan_inputs_are_refused_unless_allowed() {
    let tmp = scratch("nan-input");
    // Element 9 is row 2 (4 features per row).
    let data = data_file(tmp.path(), &[0, 1, 2, 0, 1, 2, 1, 0], Some((9, f32::NAN)));
    let e = failure_with(USAGE, &train(&data, &[]));
    assert!(
        e.contains("input row 2 holds NaN") && e.contains("--allow-nonfinite-inputs"),
        "{e}"
    );
    let out = success(&train(&data, &["--allow-nonfinite-inputs"]));
    assert!(out.contains("step    1/1"), "{out}");
}

/// A checkpoint of the tiny synthetic MLP, written by `pipetrain train` into `dir`.
fn checkpoint(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("run.safetensors");
    success(&mlp(
        "train",
        &[
            "--batch",
            "8",
            "--micro-batches",
            "2",
            "--steps",
            "2",
            "--checkpoint",
            path.to_str().unwrap(),
        ],
    ));
    path
}

/// Rewrites the weights of the checkpoint `from` into `to` with `map` applied to each weight
/// tensor's f32 values, stored as `dtype` (metadata, but the checksums, and optimizer state
/// kept).
fn rewrite(from: &Path, to: &Path, dtype: Dtype, map: impl Fn(&str, Vec<f32>) -> Vec<f32>) {
    let bytes = std::fs::read(from).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut data: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in file.tensors() {
        if name.starts_with("__optimizer__") || view.dtype() != Dtype::F32 {
            data.push((
                name,
                view.dtype(),
                view.shape().to_vec(),
                view.data().to_vec(),
            ));
            continue;
        }
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let values = map(&name, values);
        let encoded: Vec<u8> = match dtype {
            Dtype::F64 => values
                .iter()
                .flat_map(|&v| f64::from(v).to_le_bytes())
                .collect(),
            Dtype::F16 => values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
            Dtype::BF16 => values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
            _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        data.push((name, dtype, view.shape().to_vec(), encoded));
    }
    let views: Vec<(String, TensorView<'_>)> = data
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    // A deliberate rewrite drops the checksums written with the old bytes (they would refuse
    // the file as damaged); every other metadata entry is kept.
    let metadata = meta.metadata().clone().map(|mut m| {
        m.remove("pipetrain.checksums");
        m
    });
    std::fs::write(to, safetensors::serialize(views, metadata).unwrap()).unwrap();
}

/// The `held-out accuracy …` line of `pipetrain eval --init <path>` on the tiny MLP.
fn eval_line(path: &Path) -> String {
    let out = success(&mlp(
        "eval",
        &["--batch", "8", "--init", path.to_str().unwrap()],
    ));
    out.lines()
        .find(|l| l.starts_with("held-out"))
        .unwrap_or_else(|| panic!("no held-out line in {out}"))
        .to_string()
}

#[test]
fn nan_weights_in_init_are_refused_naming_the_tensor() {
    let tmp = scratch("nan-init");
    let good = checkpoint(tmp.path());
    let bad = tmp.path().join("nan.safetensors");
    rewrite(&good, &bad, Dtype::F32, |name, mut v| {
        if name == "1.bias" {
            v[1] = f32::NAN;
        }
        v
    });
    let e = failure_with(
        RUNTIME,
        &mlp(
            "train",
            &[
                "--batch",
                "8",
                "--steps",
                "1",
                "--init",
                bad.to_str().unwrap(),
            ],
        ),
    );
    assert!(
        e.contains("`1.bias` element 1 is NaN") && e.contains("must be finite"),
        "{e}"
    );
}

#[test]
fn f64_f16_and_bf16_weights_are_converted_for_init_eval_and_resume() {
    // Item 3: F64 tensors panicked the first matmul (`dtype mismatch`, exit 101).
    let tmp = scratch("dtypes");
    let f32_path = checkpoint(tmp.path());
    let reference = eval_line(&f32_path);
    for (dtype, name) in [
        (Dtype::F64, "f64"),
        (Dtype::F16, "f16"),
        (Dtype::BF16, "bf16"),
    ] {
        let path = tmp.path().join(format!("{name}.safetensors"));
        rewrite(&f32_path, &path, dtype, |_, v| v);
        let line = eval_line(&path);
        if dtype == Dtype::F64 {
            // f32 → f64 → f32 is exact: the same predictions.
            assert_eq!(line, reference, "{name}");
        }
        let out = success(&mlp(
            "train",
            &[
                "--batch",
                "8",
                "--micro-batches",
                "2",
                "--steps",
                "3",
                "--resume",
                path.to_str().unwrap(),
            ],
        ));
        assert!(
            out.contains("resumed:") && out.contains("step    3/3"),
            "{name}: {out}"
        );
    }
    // An F64 value beyond f32's range would become ∞: refused, naming the tensor.
    let huge = tmp.path().join("huge.safetensors");
    let bytes = std::fs::read(&f32_path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let names: Vec<String> = file.names().into_iter().map(str::to_string).collect();
    let views: Vec<(String, Vec<usize>, Vec<u8>)> = names
        .iter()
        .filter(|n| !n.starts_with("__optimizer__"))
        .map(|n| {
            let v = file.tensor(n).unwrap();
            let count = v.data().len() / 4;
            (
                n.clone(),
                v.shape().to_vec(),
                [1e300f64]
                    .repeat(count)
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect(),
            )
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = views
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F64, s.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::write(&huge, safetensors::serialize(views, None).unwrap()).unwrap();
    let e = failure_with(RUNTIME, &mlp("eval", &["--init", huge.to_str().unwrap()]));
    assert!(e.contains("inf (as F32, converted from F64)"), "{e}");
}

/// Issue 27, part 4: a flag that would do nothing in the combination given is refused, naming
/// it and what to do; `--workers-per-process 0` says what the flag needs.
#[test]
fn flags_that_would_do_nothing_are_refused_naming_them() {
    let tiny = [&["train"][..], &common::TINY].concat();
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["--virtual-stages", "2"],
            &["--virtual-stages 2", "--schedule interleaved"],
        ),
        (
            &["--checkpoint-every", "2"],
            &["--checkpoint-every 2", "no --checkpoint"],
        ),
        (
            &["--micro-batches", "2", "--weight-group", "4"],
            &["--weight-group 4", "--micro-batches 2"],
        ),
        (
            &["--backward", "fused", "--weight-group", "1"],
            &["--weight-group 1", "fused"],
        ),
        (
            &["--workers-per-process", "0"],
            &["--workers-per-process 0", "at least one worker"],
        ),
    ];
    for (extra, said) in cases {
        let args = [&tiny[..], extra].concat();
        let e = failure_with(USAGE, &args);
        for s in said {
            assert!(e.contains(s), "{extra:?}: no `{s}` in {e}");
        }
    }
}
