//! `pipetrain train`: train a model through the pipeline on seeded synthetic data.

use std::process::ExitCode;
use std::time::Instant;

use burn::prelude::*;
use clap::ValueEnum;
use pipetrain::engine::{Activation, SingleDevice, difference};
use pipetrain::{CrossEntropy, OptimizerConfig, Pipeline, Remat, ScheduleKind};
use pipetrain_models::{MlpConfig, synthetic};

use crate::profile::Profile;

/// Largest `verify: max_rel_diff` accepted.
const VERIFY_TOLERANCE: f64 = 1e-5;

/// Which model to train.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum ModelKind {
    /// `--hidden-layers` × (Linear(width, width) + ReLU) + Linear(width, classes).
    #[default]
    Mlp,
}

/// Which optimizer each stage runs.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum OptimizerKind {
    /// Plain SGD.
    #[default]
    Sgd,
    /// SGD with momentum 0.9.
    SgdMomentum,
    /// Adam.
    Adam,
    /// AdamW.
    Adamw,
}

/// Arguments of `pipetrain train`.
#[derive(clap::Args, Debug, Default)]
#[command(after_help = "Examples:
  pipetrain --stages 2 --micro-batches 8                 # MLP-8x1024, 1F1B, 20 steps
  pipetrain train --stages 3 --micro-batches 4 --schedule gpipe --width 64 --steps 5 --verify
  pipetrain train --stages 2 --balance 5,4 --remat never --optimizer adam --lr 1e-3
  pipetrain train --stages 2 --replicas 2 --micro-batches 4 --zero 1 --optimizer adam
  pipetrain train --stages 1 --replicas 2 --accumulate 2 --width 64 --steps 5 --verify")]
pub struct TrainArgs {
    /// Model to train.
    #[arg(long, value_enum, default_value_t)]
    pub model: ModelKind,
    /// Hidden width (and input dim) of the MLP.
    #[arg(long, default_value_t = 1024)]
    pub width: usize,
    /// Hidden Linear+ReLU blocks of the MLP.
    #[arg(long, default_value_t = 8)]
    pub hidden_layers: usize,
    /// Output classes.
    #[arg(long, default_value_t = 10)]
    pub classes: usize,
    /// Pipeline stages. Default: 2, or the length of --balance.
    #[arg(long)]
    pub stages: Option<usize>,
    /// Layers per stage, e.g. `5,4` (default: balanced by measured time).
    #[arg(long, value_delimiter = ',')]
    pub balance: Option<Vec<usize>>,
    /// Data-parallel replicas of the pipeline: replica i trains on shard i of every batch, and
    /// the replicas all-reduce their gradients.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Batches whose gradients are accumulated (no all-reduce) before each optimizer step.
    #[arg(long, default_value_t = 1)]
    pub accumulate: usize,
    /// ZeRO stage: 0 (off) or 1 (optimizer state sharded across replicas).
    #[arg(long, default_value_t = 0)]
    pub zero: u8,
    /// All-reduce bucket size in MiB.
    #[arg(long, default_value_t = 25.0)]
    pub bucket_mb: f64,
    /// Micro-batches per step.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// Mini-batch size (rows per step).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Schedule: gpipe or 1f1b.
    #[arg(long, default_value = "1f1b")]
    pub schedule: String,
    /// Re-materialization: never, except_last or always.
    #[arg(long, default_value = "except_last")]
    pub remat: String,
    /// Optimizer.
    #[arg(long, value_enum, default_value_t)]
    pub optimizer: OptimizerKind,
    /// Learning rate.
    #[arg(long, default_value_t = 0.01)]
    pub lr: f64,
    /// Optimizer steps (each takes --accumulate batches).
    #[arg(long, default_value_t = 20)]
    pub steps: u64,
    /// Seed of the model init and the synthetic data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Compute threads per worker (default: cores / workers).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also train a single-device copy on the same data and compare the weights at the end;
    /// prints `verify: max_rel_diff=<x>` and fails if x > 1e-5.
    #[arg(long)]
    pub verify: bool,
    /// Write a chrome trace (chrome://tracing, ui.perfetto.dev) of the run to this file: one
    /// track per worker, one slice per action, flow arrows from each send to its receive.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<std::path::PathBuf>,
}

/// Runs `pipetrain train`, recording a chrome trace around the run when `--profile` is given.
pub fn run(args: &TrainArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let profile = args.profile.as_deref().map(Profile::start).transpose()?;
    let result = train(args);
    if let Some(profile) = profile {
        let (slices, flows) = profile.finish()?;
        if result.is_ok() {
            println!(
                "profile: {} ({slices} action slices, {flows} send→receive flows)",
                args.profile
                    .as_deref()
                    .unwrap_or_else(|| "".as_ref())
                    .display()
            );
        }
    }
    result
}

fn train(args: &TrainArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let schedule: ScheduleKind = args.schedule.parse()?;
    let remat: Remat = args.remat.parse()?;
    for (name, value) in [
        ("--width", args.width),
        ("--classes", args.classes),
        ("--batch", args.batch),
    ] {
        if value == 0 {
            return Err(format!("{name} 0: must be at least 1").into());
        }
    }
    let parts = args.micro_batches * args.replicas;
    if parts > 0 && args.batch % parts != 0 {
        return Err(format!(
            "--batch {} does not split into --replicas {} × --micro-batches {} equal \
             micro-batches; use a batch that is a multiple of {parts}",
            args.batch, args.replicas, args.micro_batches
        )
        .into());
    }
    if !(args.bucket_mb.is_finite() && args.bucket_mb > 0.0) {
        return Err(format!(
            "--bucket-mb {}: must be a positive size in MiB",
            args.bucket_mb
        )
        .into());
    }
    if args.steps == 0 {
        return Err("--steps 0: train at least one step".into());
    }
    let (optimizer, name) = match args.optimizer {
        OptimizerKind::Sgd => (OptimizerConfig::sgd(), "sgd"),
        OptimizerKind::SgdMomentum => (OptimizerConfig::sgd_momentum(0.9), "sgd-momentum"),
        OptimizerKind::Adam => (OptimizerConfig::adam(), "adam"),
        OptimizerKind::Adamw => (OptimizerConfig::adamw(), "adamw"),
    };
    let device = Device::flex();
    device.seed(args.seed);
    let ModelKind::Mlp = args.model;
    let config = MlpConfig::new(args.width, args.hidden_layers, args.classes);
    let layers = config.init(&device);
    let mut reference = args
        .verify
        .then(|| SingleDevice::new(layers.clone(), &device, &optimizer));

    let mut builder = Pipeline::builder()
        .layers(layers)
        .micro_batches(args.micro_batches)
        .schedule(schedule)
        .remat(remat)
        .optimizer(optimizer)
        .learning_rate(args.lr)
        .loss(CrossEntropy)
        .replicas(args.replicas)
        .accumulate(args.accumulate)
        .zero(args.zero)
        .bucket_bytes((args.bucket_mb * (1u64 << 20) as f64) as usize);
    builder = match (&args.balance, args.stages) {
        (Some(balance), stages) => {
            let b = builder.balance(balance.iter().copied());
            if let Some(p) = stages { b.stages(p) } else { b }
        }
        (None, stages) => builder.stages(stages.unwrap_or(2)),
    };
    if let Some(t) = args.threads {
        builder = builder.threads_per_worker(t);
    }
    let mut pipeline = builder.build()?;

    println!(
        "pipetrain: MLP-{}x{} ({} params), {} replicas × {} stages, {} micro-batches of {}, \
         {schedule}, remat {remat}, {name} lr {}, {} threads/worker",
        args.hidden_layers,
        args.width,
        config.num_params(),
        pipeline.replicas(),
        pipeline.stages(),
        args.micro_batches,
        args.batch / parts,
        args.lr,
        pipeline.threads_per_worker(),
    );
    if args.accumulate > 1 || args.zero > 0 {
        println!(
            "  accumulate {} batches per optimizer step; ZeRO stage {}",
            args.accumulate, args.zero
        );
    }
    let started = Instant::now();
    let mut throughput = Vec::new();
    let mut last = None;
    let k = args.accumulate.max(1) as u64;
    for step in 0..args.steps {
        let batches: Vec<_> = (0..k)
            .map(|j| {
                synthetic::classification(
                    args.seed,
                    step * k + j,
                    args.batch,
                    args.width,
                    args.classes,
                    &device,
                )
            })
            .collect();
        let (mut loss, mut samples, mut wall) = (0.0, 0, std::time::Duration::ZERO);
        let mut report = None;
        for batch in &batches {
            let r = pipeline.train_step(batch)?;
            loss += r.loss / k as f64;
            samples += r.samples;
            wall += r.wall;
            report = Some(r);
        }
        let report = report.expect("at least one batch per step");
        if step == 0 {
            if let Some(p) = pipeline.partition() {
                println!("stage split: {p} (balance {:?})", p.balance());
            }
        }
        if let Some(single) = reference.as_mut() {
            let (inputs, targets): (Vec<_>, Vec<_>) =
                batches.into_iter().map(|b| (b.inputs, b.targets)).unzip();
            single.step(
                Activation::cat(inputs)?,
                Activation::cat(targets)?,
                &CrossEntropy,
                args.lr,
            )?;
        }
        let sps = samples as f64 / wall.as_secs_f64().max(1e-12);
        let overlap = report
            .all_reduce_overlap
            .map(|o| {
                format!(
                    "  all-reduce {:>6.2} ms ({:.0}% overlapped)",
                    report.all_reduce.as_secs_f64() * 1e3,
                    100.0 * o
                )
            })
            .unwrap_or_default();
        println!(
            "step {:>4}/{}  loss {:.6}  {:>8.1} samples/s  bubble {:>5.1}%{overlap}",
            step + 1,
            args.steps,
            loss,
            sps,
            100.0 * report.bubble_fraction()
        );
        if step > 0 || args.steps == 1 {
            throughput.push(sps);
        }
        last = Some(report);
    }
    throughput.sort_by(f64::total_cmp);
    let median = throughput[throughput.len() / 2];
    println!(
        "done: {} steps in {:.2}s, median {:.1} samples/s (first step excluded)",
        args.steps,
        started.elapsed().as_secs_f64(),
        median
    );
    if let Some(report) = &last {
        println!("bubble per worker (last step): measured vs simulated for this plan");
        for s in &report.stages {
            let worker = if pipeline.replicas() > 1 {
                s.worker.to_string()
            } else {
                s.worker.stage.to_string()
            };
            println!(
                "  {worker}  measured {:>5.1}%  simulated {:>5.1}%  compute {:>8.2} ms  peak stash {}",
                100.0 * s.bubble_fraction,
                100.0 * s.predicted_bubble_fraction,
                s.compute.as_secs_f64() * 1e3,
                s.peak_stash
            );
        }
    }
    if pipeline.replicas() > 1 {
        println!("optimizer state per worker:");
        let bytes = pipeline.optimizer_state_bytes();
        for stage in 0..pipeline.stages() {
            let of_stage: Vec<usize> = bytes
                .iter()
                .filter(|(w, _)| w.stage.index() == stage)
                .map(|(_, b)| *b)
                .collect();
            let total: usize = of_stage.iter().sum();
            let held = of_stage.iter().max().copied().unwrap_or(0);
            if pipeline.zero() {
                let unsharded = total; // the replicas' shares partition the stage's parameters
                println!(
                    "  stage {stage}: {} per worker with ZeRO-1, {} without ({:.0}% saved)",
                    human_bytes(held),
                    human_bytes(unsharded),
                    100.0 * (1.0 - held as f64 / unsharded.max(1) as f64)
                );
            } else {
                println!(
                    "  stage {stage}: {} per worker (--zero 1 shards it across the {} replicas)",
                    human_bytes(held),
                    pipeline.replicas()
                );
            }
        }
    }
    if let Some(single) = reference {
        let replica0 = pipeline.parameters();
        for r in 1..pipeline.replicas() {
            if pipeline.replica_parameters(r) != replica0 {
                eprintln!("verify FAILED: replica {r} holds different weights than replica 0");
                return Ok(ExitCode::FAILURE);
            }
        }
        let d = difference(&pipeline.parameters(), &single.parameters());
        println!("verify: max_rel_diff={:.3e}", d.max_relative);
        println!(
            "  (max over parameter tensors of ||w_pipe - w_single||_2 / ||w_single||_2; max abs \
             diff {:.3e}; tolerance {VERIFY_TOLERANCE:e})",
            d.max_absolute
        );
        // NaN fails too.
        if d.max_relative.is_nan() || d.max_relative > VERIFY_TOLERANCE {
            eprintln!("verify FAILED: pipelined weights differ from single-device training");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `n` bytes in B / KiB / MiB / GiB.
fn human_bytes(n: usize) -> String {
    let mut value = n as f64;
    for unit in ["B", "KiB", "MiB"] {
        if value < 1024.0 {
            return format!("{value:.1} {unit}");
        }
        value /= 1024.0;
    }
    format!("{value:.2} GiB")
}
