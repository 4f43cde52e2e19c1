//! State dicts in and out (issue 17, items 1 and 2): a state dict with the names and layout of
//! `torch.nn.Sequential` MLP-2x16 (and of the GPT's documented PyTorch module) is written here,
//! loaded with `--init`, trained, and exported; the export has exactly the PyTorch names,
//! shapes and values expected, and `--init` of it is exact. `--rename` maps a prefix; wrong
//! names are listed as `load_state_dict(strict=True)` lists them.

use crate::common;
use common::{USAGE, failure_with, scratch, success, tensors, write_safetensors_with};

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A state dict: name → (shape, values).
type StateDict = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// Writes `dict` as `safetensors.torch.save_file` does (metadata `format: pt`).
fn save_file(path: &Path, dict: &StateDict) {
    let tensors: Vec<(&str, Vec<usize>, Vec<f32>)> = dict
        .iter()
        .map(|(n, (s, v))| (n.as_str(), s.clone(), v.clone()))
        .collect();
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    write_safetensors_with(path, &tensors, Some(metadata));
}

/// Every tensor of a safetensors file: name → (shape, values).
fn load_file(path: &Path) -> StateDict {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(n, v)| {
            let values = v
                .data()
                .chunks(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()));
            (n, (v.shape().to_vec(), values.collect()))
        })
        .collect()
}

/// Asserts equal names, then shapes and values per tensor (short messages).
fn same(got: &StateDict, want: &StateDict) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, (shape, values)) in want {
        assert_eq!(&got[name].0, shape, "{name}");
        assert!(&got[name].1 == values, "{name}: values differ");
    }
}

/// `(name, shape)` pairs filled with small values, none near 0 (so that `--lr 1e-30` cannot
/// move them).
fn filled(shapes: &[(&str, Vec<usize>)]) -> StateDict {
    let mut next = 0u32;
    shapes
        .iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let values = (0..n)
                .map(|_| {
                    next += 1;
                    let magnitude = 0.05 + ((next * 37) % 101) as f32 / 1000.0;
                    if next % 2 == 0 { magnitude } else { -magnitude }
                })
                .collect();
            (name.to_string(), (shape.clone(), values))
        })
        .collect()
}

/// `nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 10))`.
fn mlp_2x16() -> StateDict {
    filled(&[
        ("0.weight", vec![16, 16]),
        ("0.bias", vec![16]),
        ("2.weight", vec![16, 16]),
        ("2.bias", vec![16]),
        ("4.weight", vec![10, 16]),
        ("4.bias", vec![10]),
    ])
}

const MLP: [&str; 8] = [
    "--width",
    "16",
    "--hidden-layers",
    "2",
    "--batch",
    "16",
    "--micro-batches",
    "2",
];

/// `pipetrain train <MLP> --stages 2 <extra>`.
fn train_mlp(extra: &[&str]) -> String {
    let mut args = vec!["train"];
    args.extend_from_slice(&MLP);
    args.extend_from_slice(&["--stages", "2"]);
    args.extend_from_slice(extra);
    success(&args)
}

#[test]
fn a_sequential_mlp_state_dict_goes_in_trains_and_comes_out_with_its_names() {
    let tmp = scratch("pytorch-mlp");
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let (sd, ck, out, ck2, out2) = (p("sd"), p("ck"), p("out"), p("ck2"), p("out2"));
    let dict = mlp_2x16();
    save_file(sd.as_ref(), &dict);
    // An lr too small to move an f32: the exported weights are the loaded ones, bit for bit.
    let trained = train_mlp(&[
        "--init",
        &sd,
        "--steps",
        "1",
        "--lr",
        "1e-30",
        "--checkpoint",
        &ck,
    ]);
    assert!(trained.contains("init: weights from"), "{trained}");
    success(&["export", &ck, "--format", "pytorch", "-o", &out]);
    same(&load_file(out.as_ref()), &dict);
    // The checkpoint holds burn's layout: the export is its transpose, renamed.
    let ours = load_file(ck.as_ref());
    let (shape, w) = &ours["2.weight"]; // the head, [in, out]
    assert_eq!(shape, &vec![16, 10]);
    assert_eq!(w[3], dict["4.weight"].1[3 * 16]); // ours [0][3] = theirs [3][0]
    // A real run: trained values come out under the same names; exporting and loading again
    // is exact.
    train_mlp(&[
        "--init",
        &sd,
        "--steps",
        "3",
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--checkpoint",
        &ck,
    ]);
    success(&["export", &ck, "--format", "pytorch", "-o", &out]);
    let exported = load_file(out.as_ref());
    assert_eq!(
        exported.keys().collect::<Vec<_>>(),
        dict.keys().collect::<Vec<_>>()
    );
    assert_ne!(
        exported["0.weight"], dict["0.weight"],
        "training moved the weights"
    );
    for (name, (shape, _)) in &dict {
        assert_eq!(&exported[name].0, shape, "{name}");
    }
    train_mlp(&[
        "--init",
        &out,
        "--steps",
        "1",
        "--lr",
        "1e-30",
        "--checkpoint",
        &ck2,
    ]);
    success(&["export", &ck2, "-o", &out2]);
    assert_eq!(tensors(out.as_ref()), tensors(out2.as_ref()), "round trip");
}

#[test]
fn rename_maps_a_prefix_and_wrong_names_are_listed_before_any_shape() {
    let tmp = scratch("pytorch-rename");
    let sd = tmp.path().join("sd");
    let sd_text = sd.to_str().unwrap();
    // nn.DataParallel's `module.` prefix on every key.
    let prefixed: StateDict = mlp_2x16()
        .into_iter()
        .map(|(n, t)| (format!("module.{n}"), t))
        .collect();
    save_file(&sd, &prefixed);
    let mut args = vec!["train"];
    args.extend_from_slice(&MLP);
    args.extend_from_slice(&["--steps", "1", "--init", sd_text]);
    let e = failure_with(USAGE, &args);
    assert!(e.contains("error(s) in loading the state dict"), "{e}");
    assert!(
        e.contains(r#"missing key(s) in the file: "0.linear.bias", "0.linear.weight""#),
        "{e}"
    );
    assert!(
        e.contains(r#"unexpected key(s) in the file: "module.0.bias""#),
        "{e}"
    );
    assert!(e.contains("--rename"), "{e}");
    let out = train_mlp(&["--steps", "1", "--init", sd_text, "--rename", r"^module\.="]);
    assert!(out.contains("init: weights from"), "{out}");
    let e = failure_with(USAGE, &["train", "--init", sd_text, "--rename", "(=x"]);
    assert!(e.contains("--rename"), "{e}");
    // Two tensors renamed onto one name: refused, naming both (one was silently lost).
    let mut args = vec!["train"];
    args.extend_from_slice(&MLP);
    args.extend_from_slice(&[
        "--steps",
        "1",
        "--init",
        sd_text,
        "--rename",
        r"^module\.=",
        "--rename",
        r"\.bias$=.weight",
    ]);
    let e = failure_with(USAGE, &args);
    assert!(
        e.contains("`module.0.bias` and `module.0.weight` are both renamed to `0.weight`"),
        "{e}"
    );
}

/// The GPT's documented PyTorch module (docs/pytorch.md) for vocab 16, context 8, d 16, 2 blocks.
fn gpt_state_dict() -> StateDict {
    let mut shapes = vec![
        ("0.token.weight".to_string(), vec![16, 16]),
        ("0.position.weight".to_string(), vec![8, 16]),
    ];
    for b in 1..=2 {
        for (name, shape) in [
            ("norm1.weight", vec![16]),
            ("norm1.bias", vec![16]),
            ("attention.query.weight", vec![16, 16]),
            ("attention.query.bias", vec![16]),
            ("attention.key.weight", vec![16, 16]),
            ("attention.value.weight", vec![16, 16]),
            ("attention.value.bias", vec![16]),
            ("attention.output.weight", vec![16, 16]),
            ("attention.output.bias", vec![16]),
            ("norm2.weight", vec![16]),
            ("norm2.bias", vec![16]),
            ("mlp.up.weight", vec![64, 16]),
            ("mlp.up.bias", vec![64]),
            ("mlp.down.weight", vec![16, 64]),
            ("mlp.down.bias", vec![16]),
        ] {
            shapes.push((format!("{b}.{name}"), shape));
        }
    }
    shapes.push(("3.norm.weight".to_string(), vec![16]));
    shapes.push(("3.norm.bias".to_string(), vec![16]));
    shapes.push(("3.unembed.weight".to_string(), vec![16, 16]));
    let borrowed: Vec<(&str, Vec<usize>)> = shapes
        .iter()
        .map(|(n, s)| (n.as_str(), s.clone()))
        .collect();
    filled(&borrowed)
}

#[test]
fn the_gpt_modules_state_dict_goes_in_and_comes_out_exactly() {
    let tmp = scratch("pytorch-gpt");
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let (sd, ck, out) = (p("sd"), p("ck"), p("out"));
    let dict = gpt_state_dict();
    save_file(sd.as_ref(), &dict);
    let mut args = vec!["train"];
    args.extend_from_slice(&common::TINY_GPT);
    args.extend_from_slice(&["--micro-batches", "2", "--stages", "2", "--steps", "1"]);
    args.extend_from_slice(&["--lr", "1e-30", "--init", &sd, "--checkpoint", &ck]);
    success(&args);
    success(&["export", &ck, "--format", "pytorch", "-o", &out]);
    same(&load_file(out.as_ref()), &dict);
}

#[test]
fn a_model_without_a_pytorch_module_is_refused_by_export() {
    let tmp = scratch("pytorch-resnet");
    let ck = tmp.path().join("ck");
    let ck = ck.to_str().unwrap();
    let mut args = vec!["train"];
    args.extend_from_slice(&common::TINY_RESNET);
    args.extend_from_slice(&[
        "--batch",
        "4",
        "--micro-batches",
        "2",
        "--steps",
        "1",
        "--checkpoint",
        ck,
    ]);
    success(&args);
    let out = tmp.path().join("out");
    let e = failure_with(USAGE, &["export", ck, "-o", out.to_str().unwrap()]);
    assert!(e.contains("has no documented PyTorch module"), "{e}");
}
