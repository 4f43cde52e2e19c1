//! The GPU rows ([`run_gpu`]), each beside PyTorch on the same GPU.
//!
//! Rows: MLP-8x1024 at batch 256 and MLP-8x4096 at batch 4096 on one GPU, the bench's GPT on
//! one GPU, MLP-8x4096 on 2 stages of one GPU (1F1B, m = 8) and as 2 replicas on one GPU. Every
//! step is timed from `train_step` until the device has finished it (`Device::sync`), as the
//! peer times its steps between `torch.cuda.synchronize()` calls; the action times inside use
//! the settings' timing ([`Timing::Host`] by default: no synchronisation after each action, as
//! PyTorch). The peer ([`GpuPeer`], `torch_gpu.py`) runs fp32 with the same `allow_tf32` as our
//! matmul precision, the same shapes and SGD at 0.01, from its own seeded init (speed does not
//! depend on the values); rows alternate, ours then the peer's, for each repetition. The first
//! step of each of our rows (kernel compilation and autotuning) is reported on its own.

use crate::CommandError;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{
    Batch, Handoff, Layer, MatmulPrecision, OptimizerConfig, Pipeline, Remat, ScheduleKind, Timing,
};
use burn::prelude::*;
use pipetrain_models::{GptConfig, MlpConfig, synthetic};

use super::configs::GPT;
use super::run::Progress;
use super::settings::BenchSettings;
use super::table::median;
use crate::error::{Error, Result};

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
fn rows(args: &BenchSettings) -> Vec<GpuRow> {
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

/// Samples/s of each measured step of `row` on `device`, and the first step's time.
fn measure(row: &GpuRow, args: &BenchSettings, device: &Device) -> Result<Timed> {
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
    args: &BenchSettings,
    device: &Device,
    layers: Vec<L>,
    balance: Vec<usize>,
    data: &[Batch],
) -> Result<Timed> {
    let mut builder = Pipeline::builder()
        .layers(layers)
        .balance(balance)
        .replicas(row.replicas)
        .micro_batches(row.micro_batches)
        .schedule(ScheduleKind::OneFOneB)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(0.01)
        .devices([device.clone()])
        .matmul_precision(args.matmul_precision)
        .timing(args.gpu_timing)
        .handoff(args.handoff)
        .precision(args.precision);
    if let Some(gemm) = args.gemm {
        builder = builder.gemm(gemm);
    }
    let mut pipeline = builder.build()?;
    let mut timed = Timed::default();
    for step in 0..args.warmup + args.steps {
        let batch = &data[step % data.len()];
        let started = Instant::now();
        let report = pipeline.train_step(batch)?;
        device.sync().map_err(|e| {
            Error::Command(CommandError::BenchRow {
                row: row.name.clone(),
                reason: e.to_string(),
            })
        })?;
        let seconds = started.elapsed().as_secs_f64();
        if step == 0 {
            timed.first_step = seconds;
        }
        if step >= args.warmup {
            timed.rates.push(row.model.rows() as f64 / seconds);
            timed.host_syncs = report
                .workers
                .iter()
                .map(|w| w.device_syncs + w.read_backs)
                .sum();
        }
    }
    Ok(timed)
}

/// What one run of a GPU row measured.
#[derive(Default)]
struct Timed {
    /// Samples/s of each measured step.
    rates: Vec<f64>,
    /// Seconds of the first (warm-up) step: kernel compilation and autotuning included.
    first_step: f64,
    /// Host syncs of the last measured step, over every worker: device synchronisations and
    /// read-backs (a steady-state step's).
    host_syncs: u32,
}

/// The PyTorch peer of the GPU rows: `python` running `torch_gpu.py` of `dir`.
#[derive(Clone, Debug)]
pub struct GpuPeer {
    /// A Python that imports torch with CUDA.
    pub python: PathBuf,
    /// The folder that holds `torch_gpu.py` ([`gpu_peers_dir`]).
    pub dir: PathBuf,
}

/// The peer's median samples/s for `row`, and what it reports of itself.
fn peer(
    GpuPeer { python, dir }: &GpuPeer,
    row: &GpuRow,
    args: &BenchSettings,
) -> std::result::Result<(f64, String), String> {
    let script = dir.join("torch_gpu.py");
    let mut command = Command::new(python);
    command
        .arg(&script)
        .args(row.model.peer_args())
        .args(["--m", &row.micro_batches.to_string()])
        .args(["--steps", &args.steps.to_string()])
        .args(["--warmup", &args.warmup.to_string()]);
    if args.matmul_precision.allows_tf32() {
        command.arg("--tf32");
    }
    if args.precision.casts() {
        command.arg("--bf16");
    }
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

/// The folder of `torch_gpu.py`: `dir` if given, else `scripts/peers` in the nearest folder
/// above the running program, else in the current directory; `None` where there is none.
pub fn gpu_peers_dir(dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = dir {
        return Some(dir.to_path_buf());
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

/// One GPU row's measurements.
#[derive(Clone, Debug)]
pub struct GpuLine {
    /// The row, e.g. `1 GPU, MLP-8x1024, batch 256`.
    pub name: String,
    /// Our samples/s of every measured step of every repetition.
    pub ours: Vec<f64>,
    /// The peer's median samples/s of each repetition it ran.
    pub theirs: Vec<f64>,
    /// Seconds of our first step of each repetition (kernel compilation and autotuning
    /// included; not in `ours`).
    pub first_steps: Vec<f64>,
    /// Host syncs in a steady-state step (the last measured one of each repetition), over
    /// every worker: device synchronisations plus blocking read-backs
    /// ([`StageReport::read_backs`](crate::StageReport::read_backs)). With host timing, one
    /// synchronisation and one read-back per worker, both at the step's end.
    pub host_syncs: Vec<u32>,
}

/// What a GPU bench measured ([`run_gpu`]); [`GpuReport::render`] makes it a document.
#[derive(Clone, Debug)]
pub struct GpuReport {
    /// The rows, in order.
    pub lines: Vec<GpuLine>,
    /// What the peer said of itself (`torch 2.x on NVIDIA ...`), if it ran.
    pub peer: Option<String>,
    /// `row: why` for each failed peer run.
    pub peer_failures: Vec<String>,
    /// Warm-up steps per row and repetition.
    pub warmup: usize,
    /// Measured steps per row and repetition.
    pub steps: usize,
    /// Repetitions.
    pub reps: usize,
    /// What f32 matmuls computed in, ours and the peer's.
    pub matmul_precision: MatmulPrecision,
    /// What our action times measured.
    pub timing: Timing,
    /// How our tensors crossed between worker threads.
    pub handoff: Handoff,
    /// The dtype the rows computed in (the peer under `torch.autocast(bfloat16)` for bf16).
    pub precision: crate::Precision,
    /// The library that ran our dense products, as chosen (`None`: the default, cuBLAS on
    /// CUDA).
    pub gemm: Option<crate::GemmLibrary>,
}

/// Runs the GPU rows `settings` select (its `only`, `hidden_layers`, `gpt_width`,
/// `gpt_context`, `classes`, `warmup`, `steps` and `reps`) on `device`, each followed by
/// `peer` on the same row when given.
///
/// # Errors
/// [`CommandError::BenchNoRow`](crate::CommandError::BenchNoRow) when `only` matches no GPU row; [`CommandError::BenchRow`](crate::CommandError::BenchRow) or the pipeline's
/// error when one of our rows fails.
pub fn run_gpu(
    settings: &BenchSettings,
    device: &Device,
    peer_run: Option<&GpuPeer>,
    progress: &mut dyn FnMut(Progress),
) -> Result<GpuReport> {
    let args = settings;
    let rows = rows(args);
    if rows.is_empty() {
        return Err(Error::Command(CommandError::BenchNoRow {
            only: args.only.clone().unwrap_or_default(),
            rows: self::rows(&BenchSettings {
                only: None,
                ..args.clone()
            })
            .into_iter()
            .map(|r| r.name)
            .collect(),
        }));
    }
    let mut lines: Vec<GpuLine> = rows
        .iter()
        .map(|r| GpuLine {
            name: r.name.clone(),
            ours: Vec::new(),
            theirs: Vec::new(),
            first_steps: Vec::new(),
            host_syncs: Vec::new(),
        })
        .collect();
    let mut report = GpuReport {
        lines: Vec::new(),
        peer: None,
        peer_failures: Vec::new(),
        warmup: args.warmup,
        steps: args.steps,
        reps: args.reps,
        matmul_precision: args.matmul_precision,
        timing: args.gpu_timing,
        handoff: args.handoff,
        precision: args.precision,
        gemm: args.gemm,
    };
    let total = rows.len() * args.reps;
    for rep in 0..args.reps {
        for (i, row) in rows.iter().enumerate() {
            let Timed {
                rates,
                first_step,
                host_syncs,
            } = measure(row, args, device).map_err(|e| match e {
                e @ Error::Command(CommandError::BenchRow { .. }) => e,
                e => Error::Command(CommandError::BenchRow {
                    row: row.name.clone(),
                    reason: e.to_string(),
                }),
            })?;
            progress(Progress::Row {
                done: rep * rows.len() + i + 1,
                total,
                label: row.name.clone(),
                samples_per_sec: median(&rates),
            });
            lines[i].ours.extend(rates);
            lines[i].first_steps.push(first_step);
            lines[i].host_syncs.push(host_syncs);
            if let Some(p) = peer_run {
                let result = peer(p, row, args);
                progress(Progress::Peer {
                    script: "torch_gpu.py".into(),
                    result: result.as_ref().map(|r| r.0).map_err(Clone::clone),
                });
                match result {
                    Ok((m, about)) => {
                        lines[i].theirs.push(m);
                        report.peer = Some(about);
                    }
                    Err(e) => report.peer_failures.push(format!("{}: {e}", row.name)),
                }
            }
        }
    }
    report.lines = lines;
    Ok(report)
}

impl GpuReport {
    /// The markdown document: `gpu` (the GPU's name) in the title, `command` (how the bench was
    /// started) in the first line, then one table row per GPU row.
    pub fn render(&self, gpu: &str, command: &str) -> String {
        let mut out = format!("# pipetrain on a GPU: {gpu}\n\n");
        out += &format!(
            "`{command}`; {}, f32 matmuls in {} (the peer's `allow_tf32` \
             the same); dense products through {}; --timing {}, --handoff {}; {} warm-up + {} measured steps per row and \
             repetition, {} repetition(s); each step timed until the device finished it. The \
             first step (kernel compilation and autotuning) is not in the figures: its time \
             is its own column. PyTorch: {}.\n\n",
            match self.precision {
                crate::Precision::Fp32 => "fp32 weights and activations",
                crate::Precision::Bf16 => {
                    "bf16 compute with fp32 master weights (the peer under \
                     torch.autocast(bfloat16))"
                }
            },
            self.matmul_precision,
            match self.gemm {
                Some(gemm) => gemm.to_string(),
                None => format!("{} (the default)", crate::GemmLibrary::default()),
            },
            self.timing,
            self.handoff,
            self.warmup,
            self.steps,
            self.reps,
            self.peer.as_deref().unwrap_or("not run")
        );
        out += "| row | matmul | pipetrain samples/s | PyTorch samples/s | ratio | first step s | \
             host syncs/step |\n";
        out += "|---|---|---:|---:|---:|---:|---:|\n";
        for line in &self.lines {
            let us = median(&line.ours);
            let (them, ratio) = match line.theirs.is_empty() {
                true => ("-".to_string(), "-".to_string()),
                false => {
                    let t = median(&line.theirs);
                    (format!("{t:.0}"), format!("{:.2}", us / t))
                }
            };
            let first = line.first_steps.iter().copied().fold(0.0, f64::max);
            let syncs = line.host_syncs.iter().max().copied().unwrap_or(0);
            out += &format!(
                "| {} | {} | {us:.0} | {them} | {ratio} | {first:.2} | {syncs} |\n",
                line.name,
                match self.precision {
                    crate::Precision::Fp32 => self.matmul_precision.to_string(),
                    p => p.to_string(),
                }
            );
        }
        for note in &self.peer_failures {
            out += &format!("\nPyTorch peer failed: {note}\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row's column of host syncs, measured on the CPU (where a sync is a no-op but still
    /// counted): one worker with host timing syncs once and reads back once, at the step's end.
    #[test]
    fn a_steady_step_on_one_worker_has_two_host_syncs_both_at_its_end() {
        let settings = BenchSettings {
            hidden_layers: 1,
            gpt_width: 0,
            llama_width: 0,
            steps: 1,
            warmup: 1,
            only: Some("x1024".into()),
            ..BenchSettings::default()
        };
        let report = run_gpu(&settings, &Device::flex(), None, &mut |_| {}).unwrap();
        assert_eq!(report.lines.len(), 1, "{:?}", report.lines);
        assert_eq!(report.lines[0].host_syncs, [2]);
        let table = report.render("cpu", "test");
        assert!(table.contains("| host syncs/step |"), "{table}");
        assert!(table.lines().any(|l| l.ends_with("| 2 |")), "{table}");
    }
}
