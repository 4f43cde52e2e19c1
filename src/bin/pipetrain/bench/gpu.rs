//! `pipetrain bench --device cuda:N`: the GPU rows, each beside PyTorch on the same GPU.
//!
//! Rows: MLP-8x1024 at batch 256 and MLP-8x4096 at batch 4096 on one GPU, the bench's GPT on
//! one GPU, MLP-8x4096 on 2 stages of one GPU (1F1B, m = 8) and as 2 replicas on one GPU. Every
//! step is timed from `train_step` until the device has finished it (`Device::sync`), as the
//! peer times its steps between `torch.cuda.synchronize()` calls; the action times inside use
//! device timing ([`pipetrain::Timing::Device`]). The peer (`torch_gpu.py` in `--peers`) runs
//! fp32 with TF32 off, the same shapes and SGD at 0.01, from its own seeded init (speed does not
//! depend on the values); rows alternate, ours then the peer's, for each of `--reps`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::prelude::*;
use pipetrain::{Batch, Layer, OptimizerConfig, Pipeline, Remat, ScheduleKind};
use pipetrain_models::{GptConfig, MlpConfig, synthetic};

use super::args::BenchArgs;
use super::configs::GPT;
use crate::exit::Exit;
use crate::failure::Failure;

/// One GPU row: what we train and what the peer trains.
struct GpuRow {
    name: String,
    model: GpuModel,
    stages: usize,
    replicas: usize,
    micro_batches: usize,
}

#[derive(Clone, Copy)]
enum GpuModel {
    /// MLP-`hidden`x`width` on `batch` rows.
    Mlp {
        width: usize,
        hidden: usize,
        batch: usize,
    },
    /// The bench's GPT (vocabulary, heads and blocks from [`GPT`]) on 32 sequences.
    Gpt { width: usize, context: usize },
}

impl GpuModel {
    fn rows(&self) -> usize {
        match *self {
            GpuModel::Mlp { batch, .. } => batch,
            GpuModel::Gpt { .. } => GPT.3,
        }
    }

    /// The peer's flags for this model.
    fn peer_args(&self) -> Vec<String> {
        match *self {
            GpuModel::Mlp {
                width,
                hidden,
                batch,
            } => vec![
                "--model".into(),
                "mlp".into(),
                "--width".into(),
                width.to_string(),
                "--layers".into(),
                hidden.to_string(),
                "--batch".into(),
                batch.to_string(),
            ],
            GpuModel::Gpt { width, context } => {
                let (vocab, heads, blocks, sequences) = GPT;
                vec![
                    "--model".into(),
                    "gpt".into(),
                    "--width".into(),
                    width.to_string(),
                    "--context".into(),
                    context.to_string(),
                    "--vocab".into(),
                    vocab.to_string(),
                    "--heads".into(),
                    heads.to_string(),
                    "--layers".into(),
                    blocks.to_string(),
                    "--batch".into(),
                    sequences.to_string(),
                ]
            }
        }
    }
}

/// The rows of the GPU table.
fn rows(args: &BenchArgs) -> Vec<GpuRow> {
    let mlp = |width, batch| GpuModel::Mlp {
        width,
        hidden: args.hidden_layers,
        batch,
    };
    let one = |name: String, model| GpuRow {
        name,
        model,
        stages: 1,
        replicas: 1,
        micro_batches: 1,
    };
    let h = args.hidden_layers;
    let mut rows = vec![
        one(format!("1 GPU, MLP-{h}x1024, batch 256"), mlp(1024, 256)),
        one(format!("1 GPU, MLP-{h}x4096, batch 4096"), mlp(4096, 4096)),
    ];
    if args.gpt_width > 0 {
        let gpt = GpuModel::Gpt {
            width: args.gpt_width,
            context: args.gpt_context,
        };
        rows.push(one(
            format!("1 GPU, GPT d{} ctx {}", args.gpt_width, args.gpt_context),
            gpt,
        ));
    }
    rows.push(GpuRow {
        name: format!("2 stages on 1 GPU, MLP-{h}x4096, batch 4096, 1F1B m=8"),
        model: mlp(4096, 4096),
        stages: 2,
        replicas: 1,
        micro_batches: 8,
    });
    rows.push(GpuRow {
        name: format!("2 replicas on 1 GPU, MLP-{h}x4096, batch 4096"),
        model: mlp(4096, 4096),
        stages: 1,
        replicas: 2,
        micro_batches: 1,
    });
    match &args.only {
        Some(text) => rows
            .into_iter()
            .filter(|r| r.name.contains(text.as_str()))
            .collect(),
        None => rows,
    }
}

/// Samples/s of each measured step of `row` on `device`.
fn measure(row: &GpuRow, args: &BenchArgs, device: &Device) -> Result<Vec<f64>, String> {
    device.seed(0);
    let data: Vec<Batch> = (0..5)
        .map(|k| match row.model {
            GpuModel::Mlp { width, batch, .. } => {
                synthetic::classification(1234, k, batch, width, args.classes, device)
            }
            GpuModel::Gpt { context, .. } => {
                let (vocab, _, _, sequences) = GPT;
                synthetic::tokens(1234, k, sequences, context, vocab, device)
            }
        })
        .collect();
    match row.model {
        GpuModel::Mlp { width, hidden, .. } => {
            let layers = MlpConfig::new(width, hidden, args.classes).init(device);
            let balance = super::measure::balance(hidden, row.stages);
            timed(row, args, device, layers, balance, &data)
        }
        GpuModel::Gpt { width, context } => {
            let (vocab, heads, blocks, _) = GPT;
            let heads = if width % heads == 0 { heads } else { 1 };
            let layers = GptConfig::new(vocab, context, width, heads, blocks).init(device);
            let n = layers.len();
            timed(row, args, device, layers, vec![n], &data)
        }
    }
}

fn timed<L: Layer>(
    row: &GpuRow,
    args: &BenchArgs,
    device: &Device,
    layers: Vec<L>,
    balance: Vec<usize>,
    data: &[Batch],
) -> Result<Vec<f64>, String> {
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .balance(balance)
        .replicas(row.replicas)
        .micro_batches(row.micro_batches)
        .schedule(ScheduleKind::OneFOneB)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(0.01)
        .devices([device.clone()])
        .build()
        .map_err(|e| e.to_string())?;
    let mut rates = Vec::new();
    for step in 0..args.warmup + args.steps {
        let batch = &data[step % data.len()];
        let started = Instant::now();
        pipeline.train_step(batch).map_err(|e| e.to_string())?;
        device.sync().map_err(|e| e.to_string())?;
        if step >= args.warmup {
            rates.push(row.model.rows() as f64 / started.elapsed().as_secs_f64());
        }
    }
    Ok(rates)
}

/// The peer's median samples/s for `row`, and what it reports of itself.
fn peer(
    python: &Path,
    dir: &Path,
    row: &GpuRow,
    args: &BenchArgs,
) -> Result<(f64, String), String> {
    let script = dir.join("torch_gpu.py");
    let mut command = Command::new(python);
    command
        .arg(&script)
        .args(row.model.peer_args())
        .args(["--m", &row.micro_batches.to_string()])
        .args(["--steps", &args.steps.to_string()])
        .args(["--warmup", &args.warmup.to_string()]);
    let out = command
        .output()
        .map_err(|e| format!("{} {}: {e}", python.display(), script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} exited with {}: {}",
            script.display(),
            out.status,
            stderr.lines().last().unwrap_or_default()
        ));
    }
    let line = stdout.lines().last().unwrap_or_default();
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("peer output `{line}`: {e}"))?;
    let median = value["median"]
        .as_f64()
        .ok_or_else(|| format!("peer output `{line}` has no median"))?;
    let about = format!(
        "torch {} on {}",
        value["torch"].as_str().unwrap_or("?"),
        value["device"].as_str().unwrap_or("?")
    );
    Ok((median, about))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n => v[n / 2],
    }
}

/// The peer scripts' directory: `--peers`, else `scripts/peers` beside the binary's repository
/// or the current directory.
fn peers_dir(args: &BenchArgs) -> Option<PathBuf> {
    if let Some(dir) = &args.peers {
        return Some(dir.clone());
    }
    let exe = std::env::current_exe().ok();
    let mut starts: Vec<PathBuf> = exe
        .iter()
        .flat_map(|e| e.ancestors().map(Path::to_path_buf))
        .collect();
    starts.extend(std::env::current_dir().ok());
    starts
        .into_iter()
        .map(|d| d.join("scripts/peers"))
        .find(|d| d.join("torch_gpu.py").is_file())
}

/// Runs the GPU table on `device` (named `spec`) and prints it as markdown.
pub fn run(args: &BenchArgs, spec: &str, device: &Device) -> Result<Exit, Failure> {
    let rows = rows(args);
    if rows.is_empty() {
        return Err(Failure::usage(format!(
            "--only {}: no GPU row matches; the rows are named like `1 GPU, MLP-8x1024`",
            args.only.as_deref().unwrap_or_default()
        )));
    }
    let peer_setup = match (&args.compare_pytorch, peers_dir(args)) {
        (Some(python), Some(dir)) => Some((python.clone(), dir)),
        (Some(_), None) => {
            eprintln!("bench: no torch_gpu.py found (give --peers DIR): PyTorch column left out");
            None
        }
        (None, _) => None,
    };
    let mut ours = vec![Vec::new(); rows.len()];
    let mut theirs: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    let mut notes = Vec::new();
    let mut about = None;
    for _ in 0..args.reps {
        for (i, row) in rows.iter().enumerate() {
            let rates = measure(row, args, device)
                .map_err(|e| Failure::runtime(format!("{}: {e}", row.name)))?;
            eprintln!("bench: {}: {:.0} samples/s", row.name, median(&rates));
            ours[i].extend(rates);
            if let Some((python, dir)) = &peer_setup {
                match peer(python, dir, row, args) {
                    Ok((m, a)) => {
                        eprintln!("bench:   PyTorch: {m:.0} samples/s");
                        theirs[i].push(m);
                        about = Some(a);
                    }
                    Err(e) => notes.push(format!("{}: {e}", row.name)),
                }
            }
        }
    }
    let gpu = super::probe::gpu_model().unwrap_or_else(|| spec.to_string());
    println!("# pipetrain on a GPU: {gpu}\n");
    println!(
        "`{}`; fp32; {} warm-up + {} measured steps per row and repetition, {} repetition(s); \
         each step timed until the device finished it. PyTorch: {}.\n",
        std::env::args().collect::<Vec<_>>().join(" "),
        args.warmup,
        args.steps,
        args.reps,
        about.as_deref().unwrap_or("not run")
    );
    println!("| row | pipetrain samples/s | PyTorch samples/s | ratio |");
    println!("|---|---:|---:|---:|");
    for (i, row) in rows.iter().enumerate() {
        let us = median(&ours[i]);
        let (them, ratio) = match theirs[i].is_empty() {
            true => ("-".to_string(), "-".to_string()),
            false => {
                let t = median(&theirs[i]);
                (format!("{t:.0}"), format!("{:.2}", us / t))
            }
        };
        println!("| {} | {us:.0} | {them} | {ratio} |", row.name);
    }
    for note in notes {
        println!("\nPyTorch peer failed: {note}");
    }
    Ok(Exit::Success)
}
