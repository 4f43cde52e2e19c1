//! Helpers shared by the integration tests.

// Each test crate compiles this module on its own and uses only some of it.
#![allow(dead_code)]

mod ci;
#[allow(unused_imports)] // each test crate uses some of it
pub use ci::{ci, ci_from};

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use burn::prelude::Device;
use safetensors::tensor::{Dtype, TensorView};

/// burn-flex keeps one random generator per process, shared by every test of a test binary.
static RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Seeds burn's generator with `seed` and runs `init` (which draws from it, e.g. initialises a
/// model) while no other test of this binary can reseed or draw. Every initialisation in a test
/// binary that compares weights goes through here: a test that draws without the lock moves
/// another test's stream between its seed and its draw.
///
/// burn initialises parameters lazily, at their first read: every parameter of the result is
/// read here, under the lock, so its values are drawn now and not whenever (and after whichever
/// other test's reseeding) it is first used.
pub fn seeded<T: burn::module::Module>(seed: u64, init: impl FnOnce(&Device) -> T) -> T {
    let _rng = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    device.seed(seed);
    let module = init(&device);
    module.visit(&mut Materialize);
    module
}

/// Seeds burn's generator with `seed` and runs `draw` (e.g. a random input tensor) under the
/// same lock as [`seeded`]: a draw outside it would move the stream of a test that is
/// initialising its model at the same time.
pub fn seeded_draw<T>(seed: u64, draw: impl FnOnce(&Device) -> T) -> T {
    let _rng = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    device.seed(seed);
    draw(&device)
}

/// Reads every parameter, which draws the lazily initialised ones.
struct Materialize;

impl burn::module::ModuleVisitor for Materialize {
    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D>>,
    ) {
        let _ = param.val();
    }

    fn visit_int<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D, burn::tensor::Int>>,
    ) {
        let _ = param.val();
    }
}

/// Largest `verify: max_rel_diff` accepted (the CLI's own tolerance).
pub const TOLERANCE: f64 = 1e-5;

/// Tiny model and data: `pipetrain train <TINY> ...` finishes in a second.
pub const TINY: [&str; 8] = [
    "--width",
    "16",
    "--hidden-layers",
    "2",
    "--batch",
    "16",
    "--steps",
    "1",
];

/// A tiny ResNet (2 blocks of 4 channels on 8×8 images): add `--batch` and the layout.
pub const TINY_RESNET: [&str; 8] = [
    "--model",
    "resnet",
    "--channels",
    "4",
    "--blocks",
    "2",
    "--image",
    "8",
];

/// A tiny GPT (vocabulary 16, context 8, width 16, 2 heads, 2 blocks), batch 8.
pub const TINY_GPT: [&str; 14] = [
    "--model",
    "gpt",
    "--vocab",
    "16",
    "--context",
    "8",
    "--d-model",
    "16",
    "--heads",
    "2",
    "--layers",
    "2",
    "--batch",
    "8",
];

/// Tiny U-Net (2 levels from 2 channels, 8×8 images): long skips across stages.
pub const TINY_UNET: [&str; 8] = [
    "--model",
    "unet",
    "--channels",
    "2",
    "--depth",
    "2",
    "--image",
    "8",
];

/// A fresh directory for one test's files, removed when dropped (also when the test fails).
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("pipetrain-{name}-"))
        .tempdir()
        .expect("a temporary directory")
}

/// The names in `dir` of temp files (with `.tmp` in them: `.NAME.PID@HOST.XXXXXX.tmp`).
pub fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect()
}

/// Runs `pipetrain <args>` (no subcommand added).
pub fn pipetrain(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(args)
        .output()
        .expect("the pipetrain binary runs")
}

/// Stdout of `out`, the output of `pipetrain <args>`, which must have succeeded.
pub fn stdout_of_success(args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "pipetrain {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Stderr of `out`, the output of `pipetrain <args>`, which must have failed and said why.
pub fn stderr_of_failure(args: &[&str], out: Output) -> String {
    assert!(
        !out.status.success(),
        "pipetrain {args:?} should fail ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8(out.stderr).expect("stderr is UTF-8");
    assert!(!stderr.trim().is_empty(), "a failure says why on stderr");
    stderr
}

/// Exit code of a run that started and failed (the table under `pipetrain --help`).
pub const RUNTIME: i32 = 1;
/// Exit code of a command line refused before anything was trained.
pub const USAGE: i32 = 2;
/// Exit code of a `--verify` whose difference is above the tolerance.
pub const VERIFY_FAILED: i32 = 3;

/// Stderr of a `pipetrain <args>` run that must fail with exit code `code` and say why.
pub fn failure_with(code: i32, args: &[&str]) -> String {
    let out = pipetrain(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "pipetrain {args:?}: exit code {code} expected, got {}:\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    stderr_of_failure(args, out)
}

/// Stdout of a `pipetrain <args>` run that must succeed.
pub fn success(args: &[&str]) -> String {
    stdout_of_success(args, pipetrain(args))
}

/// Stderr of a `pipetrain <args>` run that must fail.
pub fn failure(args: &[&str]) -> String {
    stderr_of_failure(args, pipetrain(args))
}

/// The `<x>` of the `verify: max_rel_diff=<x>` line of `stdout`, which must be at most
/// [`TOLERANCE`].
pub fn max_rel_diff(stdout: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("verify: max_rel_diff="))
        .unwrap_or_else(|| panic!("no `verify: max_rel_diff=` line in:\n{stdout}"));
    let x: f64 = line["verify: max_rel_diff=".len()..]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("`{line}` does not end in a number: {e}"));
    assert!(
        x <= TOLERANCE,
        "max_rel_diff {x} > {TOLERANCE}; stdout:\n{stdout}"
    );
    x
}

/// Writes `tensors`, each `(name, shape, values)`, as f32 tensors of a safetensors file.
pub fn write_safetensors(path: &Path, tensors: &[(&str, Vec<usize>, Vec<f32>)]) {
    write_safetensors_with(path, tensors, None);
}

/// [`write_safetensors`] with `metadata` (e.g. `format: pt`, as `safetensors.torch.save_file`
/// writes).
pub fn write_safetensors_with(
    path: &Path,
    tensors: &[(&str, Vec<usize>, Vec<f32>)],
    metadata: Option<HashMap<String, String>>,
) {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            (
                n.to_string(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let data = safetensors::serialize(views, metadata).unwrap();
    std::fs::write(path, data).unwrap();
}

/// Writes a `tensors:` data file of `rows` rows of 16 features and labels in 0..10 at `path`
/// (the MLP of width 16 at its defaults trains on it).
pub fn data_file(path: &Path, rows: usize) {
    let x: Vec<f32> = (0..rows * 16).map(|i| (i % 7) as f32 / 7.0).collect();
    let y: Vec<i64> = (0..rows as i64).map(|i| i % 10).collect();
    let x: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let y: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = [
        (
            "x",
            TensorView::new(Dtype::F32, vec![rows, 16], &x).unwrap(),
        ),
        ("y", TensorView::new(Dtype::I64, vec![rows], &y).unwrap()),
    ];
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// Every tensor of a safetensors file, by name, as raw bytes.
pub fn tensors(path: &Path) -> HashMap<String, Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(n, v)| (n, v.data().to_vec()))
        .collect()
}

/// Adam with ε = 1e-5 (burn's default) rather than PyTorch's 1e-8, for equivalence tests on tiny
/// models: a gradient that is 0 up to rounding (a dead unit, a key bias that softmax ignores, a
/// row that one micro-batch split leaves out) becomes an lr-sized step at ε = 1e-8, whose sign
/// depends on the summation order, so two correct runs can differ by more than 1e-5.
pub fn adam_eps_1e5() -> pipetrain::OptimizerConfig {
    pipetrain::OptimizerConfig::torch_adam(pipetrain::AdamOptions {
        eps: 1e-5,
        ..pipetrain::AdamOptions::adam()
    })
    .unwrap()
}
