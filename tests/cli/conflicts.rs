//! Flags that contradict each other or would be silently ignored (issue 12, item 10; issue 38):
//! refused before anything runs, naming the flags and a remedy; `eval --resume` evaluates the
//! checkpoint; a weights file whose layout cannot be told is refused, not transposed by guess.

use crate::common;
use common::{USAGE, failure_with, scratch, success};

use std::collections::HashMap;
use std::path::Path;

use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

/// An MLP whose every matrix is square (width = input = classes = 8).
const SQUARE: [&str; 8] = [
    "--width",
    "8",
    "--hidden-layers",
    "1",
    "--classes",
    "8",
    "--batch",
    "8",
];

/// `pipetrain <command> <SQUARE> <extra>`.
fn square<'a>(command: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [&[command][..], &SQUARE, extra].concat()
}

/// Trains [`SQUARE`] for 2 steps and saves its checkpoint in `dir`.
fn checkpoint(dir: &Path) -> String {
    let path = dir.join("run.safetensors").to_str().unwrap().to_string();
    success(&square("train", &["--steps", "2", "--checkpoint", &path]));
    path
}

/// The `held-out …` line of `pipetrain eval <SQUARE> <extra>`.
fn evaluated(extra: &[&str]) -> String {
    let out = success(&square("eval", extra));
    out.lines()
        .find(|l| l.starts_with("held-out"))
        .unwrap()
        .to_string()
}

#[test]
fn init_with_resume_is_refused_in_train_and_eval() {
    let tmp = scratch("init-resume");
    let ck = checkpoint(tmp.path());
    for command in ["train", "eval"] {
        let e = failure_with(USAGE, &square(command, &["--init", &ck, "--resume", &ck]));
        assert!(
            e.contains("--init") && e.contains("--resume") && e.contains("give one"),
            "{command}: {e}"
        );
    }
}

#[test]
fn eval_resume_evaluates_the_checkpoint_and_eval_refuses_training_outputs() {
    let tmp = scratch("eval-resume");
    let ck = checkpoint(tmp.path());
    // It used to be ignored, evaluating the untrained model.
    assert_eq!(evaluated(&["--resume", &ck]), evaluated(&["--init", &ck]));
    let out = success(&square("eval", &["--resume", &ck]));
    assert!(out.contains(&format!("weights: {ck}")), "{out}");
    let e = failure_with(USAGE, &square("eval", &["--checkpoint", &ck]));
    assert!(
        e.contains(&format!(
            "--checkpoint {ck} would change nothing in `pipetrain eval`"
        )) && e.contains("give it to `pipetrain train`"),
        "{e}"
    );
}

#[test]
fn held_out_with_synthetic_data_and_init_of_a_directory_are_refused() {
    let e = failure_with(USAGE, &square("train", &["--held-out", "0.3"]));
    assert!(
        e.contains("--held-out 0.3 applies to loaded data") && e.contains("drop --held-out"),
        "{e}"
    );
    // Issue 47, class 3: accepted with synthetic data, which holds no non-finite value.
    let e = failure_with(USAGE, &square("train", &["--allow-nonfinite-inputs"]));
    assert!(
        e.contains("--allow-nonfinite-inputs accepts NaN or infinite values in loaded data")
            && e.contains("drop --allow-nonfinite-inputs"),
        "{e}"
    );
    let tmp = scratch("init-dir");
    let dir = tmp.path().to_str().unwrap();
    let e = failure_with(USAGE, &square("train", &["--init", dir]));
    assert!(
        e.contains("is a directory; give the .safetensors file"),
        "{e}"
    );
}

#[test]
fn a_bad_plot_path_fails_before_training_in_plain_words() {
    let tmp = scratch("plot");
    let dir = tmp.path().to_str().unwrap();
    let out = common::pipetrain(&square("train", &["--steps", "1", "--plot", dir]));
    assert_eq!(out.status.code(), Some(USAGE));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--plot") && e.contains("is a directory"), "{e}");
    assert!(!e.contains("ImageError") && !e.contains("Os {"), "{e}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("step "));
    // A format it cannot write once failed after the run with the image crate's debug output.
    let xyz = tmp.path().join("loss.xyz");
    let e = failure_with(
        USAGE,
        &square("train", &["--steps", "1", "--plot", xyz.to_str().unwrap()]),
    );
    assert!(e.contains("loss.xyz") && e.contains("use .png"), "{e}");
    assert!(!xyz.exists());
}

/// The weights of the checkpoint `from` without pipetrain's metadata (optimizer state dropped),
/// with `metadata`, written to `to`.
fn plain_weights(from: &str, to: &Path, metadata: Option<HashMap<String, String>>) {
    let bytes = std::fs::read(from).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let views: Vec<(String, TensorView<'_>)> = file
        .tensors()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("__optimizer__"))
        .collect();
    std::fs::write(to, safetensors::serialize(views, metadata).unwrap()).unwrap();
}

#[test]
fn square_weights_without_metadata_are_refused_rather_than_transposed_by_guess() {
    let tmp = scratch("layout");
    let ck = checkpoint(tmp.path());
    let bare = tmp.path().join("bare.safetensors");
    plain_weights(&ck, &bare, None);
    let e = failure_with(USAGE, &square("eval", &["--init", bare.to_str().unwrap()]));
    assert!(
        e.contains("is square") && e.contains("format=pt") && e.contains("producer=burn"),
        "{e}"
    );
    // burn's own store records its layout: read as saved, not transposed.
    let burn = tmp.path().join("burn.safetensors");
    let meta = HashMap::from([("producer".to_string(), "burn".to_string())]);
    plain_weights(&ck, &burn, Some(meta));
    assert_eq!(
        evaluated(&["--init", burn.to_str().unwrap()]),
        evaluated(&["--init", &ck])
    );
}

#[test]
fn a_flag_that_would_do_nothing_is_refused_in_train_eval_tune_and_from_a_config_file() {
    // Issue 38: each of these did nothing, silently. One rule: a usage error naming the flag,
    // its value and what makes it apply; following that remedy runs.
    let dir = scratch("no-op-flags");
    let config = dir.path().join("run.toml");
    std::fs::write(&config, "rename = [\"^module\\\\.=\"]\n").unwrap();
    let config = config.to_str().unwrap();
    for (command, extra, said, remedy) in [
        (
            "train",
            &["--lr-gamma", "0.5"][..],
            "--lr-gamma 0.5 applies to --lr-schedule step",
            &["--lr-schedule", "step"][..],
        ),
        (
            "train",
            &["--min-lr", "1e-3"],
            "--min-lr 1e-3 applies to --lr-schedule cosine or linear",
            &["--lr-schedule", "cosine"],
        ),
        (
            "train",
            &["--lr-schedule", "cosine", "--lr-step-size", "10"],
            "--lr-step-size 10 applies to --lr-schedule step",
            &["--lr-schedule", "step"],
        ),
        (
            "train",
            &["--verify-tolerance", "1e-3"],
            "--verify-tolerance 1e-3 is the largest difference --verify accepts",
            &["--verify"],
        ),
        (
            "train",
            &["--rename", "^a=b"],
            "--rename ^a=b rewrites the tensor names of an --init file",
            &[],
        ),
        (
            "train",
            &["--config", config],
            "--rename ^module\\.= rewrites",
            &[],
        ),
        (
            "eval",
            &["--d-model", "32"],
            "--d-model 32 sizes --model gpt or --model llama only",
            &[],
        ),
        (
            "train",
            &["--vocab", "16"],
            "--vocab 16 sizes --model gpt or --model llama only",
            &[],
        ),
        (
            "train",
            &["--channels", "4"],
            "--channels 4 sizes --model resnet or --model unet only",
            &[],
        ),
        (
            "tune",
            &["--depth", "3"],
            "--depth 3 sizes --model unet only",
            &[],
        ),
        (
            "tune",
            &["--precision", "bf16"],
            "--precision bf16: `pipetrain tune` measures and models fp32 runs",
            &[],
        ),
    ] {
        let args = square(command, extra);
        let err = failure_with(USAGE, &args);
        assert!(err.contains(said), "{args:?}: {err}");
        if !remedy.is_empty() {
            let followed = square(command, &[extra, remedy, &["--steps", "1"]].concat());
            success(&followed);
        }
    }
}

/// `--gemm` chooses a GPU's GEMM library; on a CPU every product is burn's matmul, so the flag
/// would do nothing there (issue 45). `PIPETRAIN_GEMM` with a bad value is refused naming it.
#[test]
fn gemm_on_a_cpu_is_refused_and_a_bad_pipetrain_gemm_is_named() {
    let e = failure_with(USAGE, &square("train", &["--steps", "1", "--gemm", "burn"]));
    assert!(
        e.contains("--gemm burn") && e.contains("CPU") && e.contains("drop --gemm"),
        "{e}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(square("train", &["--steps", "1"]))
        .env("PIPETRAIN_GEMM", "cutlass")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(USAGE), "{e}");
    assert!(
        e.contains("PIPETRAIN_GEMM=cutlass") && e.contains("cublas or burn"),
        "{e}"
    );
    // The bench's GPU rows take the same choice (the device check's A/B rows set
    // PIPETRAIN_GEMM): refused on the CPU rows, and a bad variable named.
    let e = failure_with(USAGE, &["bench", "--steps", "1", "--gemm", "burn"]);
    assert!(
        e.contains("--gemm burn") && e.contains("--device cpu") && e.contains("drop --gemm"),
        "{e}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(["bench", "--steps", "1", "--only", "nothing"])
        .env("PIPETRAIN_GEMM", "cutlass")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(USAGE), "{e}");
    assert!(e.contains("PIPETRAIN_GEMM=cutlass"), "{e}");
}
