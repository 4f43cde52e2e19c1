//! Throughput bench: MLP-8x1024 (the PyTorch peer workload), batch 256, CPU.
//!
//! Rows: the 1-stage baseline at each micro-batch count m (one worker, one thread, m
//! micro-batches of 256/m rows, gradients accumulated); `2 x single`, two such workers stepping
//! at once with no communication (their efficiency is this machine's *ceiling* for 2 workers:
//! memory bandwidth and caches are shared); then 2 stages under GPipe and 1F1B (one thread per
//! worker). efficiency = throughput / (2 × baseline at the same m), next to the bound m/(m+1)
//! and to `of ceiling` = efficiency / (ceiling × bound), the share of what 2 workers can reach
//! here with the fill-drain bubble. Run: `cargo bench --bench throughput` (release). Options via env:
//! `BENCH_STEPS` (default 8 measured steps after 2 warm-up), `BENCH_WIDTH` (1024),
//! `BENCH_MS` (e.g. "1,4,8,32"), `BENCH_DP_ONLY=1` (only the data-parallel table). Then the
//! data-parallel table: replicas × stages against the 1-worker baseline, and Adam optimizer state
//! per worker without and with ZeRO-1.

use std::time::Instant;

use burn::prelude::*;
use pipetrain::{OptimizerConfig, Pipeline, Remat, ScheduleKind};
use pipetrain_models::{MlpConfig, synthetic};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: usize = 256;
const HIDDEN: usize = 8;
const CLASSES: usize = 10;
const WARMUP: u64 = 2;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One configuration.
#[derive(Clone, Copy)]
struct Config {
    replicas: usize,
    stages: usize,
    m: usize,
    schedule: ScheduleKind,
    zero: bool,
    adam: bool,
}

fn measure(width: usize, stages: usize, m: usize, schedule: ScheduleKind, steps: u64) -> f64 {
    let config = Config {
        replicas: 1,
        stages,
        m,
        schedule,
        zero: false,
        adam: false,
    };
    measure_config(width, config, steps).0
}

/// Median samples/s over `steps` measured steps, and the largest optimizer state per worker.
fn measure_config(width: usize, config: Config, steps: u64) -> (f64, usize) {
    let (mut pipeline, data) = build(width, config);
    let mut rates = Vec::new();
    for step in 0..WARMUP + steps {
        let batch = &data[(step % 5) as usize];
        let t = Instant::now();
        pipeline.train_step(batch).expect("bench step");
        if step >= WARMUP {
            rates.push(BATCH as f64 / t.elapsed().as_secs_f64());
        }
    }
    rates.sort_by(f64::total_cmp);
    let state = pipeline
        .optimizer_state_bytes()
        .iter()
        .map(|(_, b)| *b)
        .max()
        .unwrap_or(0);
    (rates[rates.len() / 2], state)
}

/// Two 1-stage pipelines stepping at the same time on their own threads, no communication:
/// samples/s of the pair. What 2 workers on this machine reach with no bubble at all — the
/// ceiling that a 2-stage pipeline's m/(m+1) bound applies to.
fn concurrent(width: usize, m: usize, steps: u64) -> f64 {
    let config = Config {
        replicas: 1,
        stages: 1,
        m,
        schedule: ScheduleKind::GPipe,
        zero: false,
        adam: false,
    };
    let (mut a, data) = build(width, config);
    let (mut b, _) = build(width, config);
    let mut rates = Vec::new();
    for step in 0..WARMUP + steps {
        let batch = &data[(step % 5) as usize];
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| a.train_step(batch).expect("bench step"));
            s.spawn(|| b.train_step(batch).expect("bench step"));
        });
        if step >= WARMUP {
            rates.push(2.0 * BATCH as f64 / t.elapsed().as_secs_f64());
        }
    }
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// A pipeline for `config` and five batches.
fn build(
    width: usize,
    config: Config,
) -> (Pipeline<pipetrain_models::MlpLayer>, Vec<pipetrain::Batch>) {
    let Config {
        replicas,
        stages,
        m,
        schedule,
        zero,
        adam,
    } = config;
    let device = Device::flex();
    device.seed(0);
    let layers = MlpConfig::new(width, HIDDEN, CLASSES).init(&device);
    let balance = if stages == 1 {
        vec![HIDDEN + 1]
    } else {
        vec![HIDDEN / 2, HIDDEN / 2 + 1]
    };
    let pipeline = Pipeline::builder()
        .layers(layers)
        .balance(balance)
        .micro_batches(m)
        .schedule(schedule)
        .remat(Remat::Never)
        .optimizer(if adam {
            OptimizerConfig::adam()
        } else {
            OptimizerConfig::sgd()
        })
        .learning_rate(0.01)
        .threads_per_worker(1)
        .replicas(replicas)
        .zero(u8::from(zero))
        .build()
        .expect("valid bench configuration");
    let data: Vec<_> = (0..5)
        .map(|k| synthetic::classification(1234, k, BATCH, width, CLASSES, &device))
        .collect();
    (pipeline, data)
}

/// Data-parallel rows: replicas × stages against the 1-worker baseline (SGD), then the optimizer
/// state per worker with Adam, without and with ZeRO-1.
fn data_parallel(width: usize, steps: u64) {
    let row = |replicas, stages, m, zero, adam| Config {
        replicas,
        stages,
        m,
        schedule: ScheduleKind::OneFOneB,
        zero,
        adam,
    };
    println!();
    println!("data parallel (1F1B where stages > 1; batch {BATCH} split over the replicas)");
    println!(
        "{:<24} {:>12} {:>12} {:>8}",
        "replicas x stages, m", "samples/s", "baseline", "speedup"
    );
    let base = measure_config(width, row(1, 1, 1, false, false), steps).0;
    println!("{:<24} {base:>12.1} {:>12} {:>8}", "1 x 1, m=1", "-", "-");
    for (r, p, m, zero) in [
        (2, 1, 1, false),
        (2, 1, 1, true),
        (2, 2, 4, false),
        (1, 2, 4, false),
    ] {
        let rate = measure_config(width, row(r, p, m, zero, false), steps).0;
        let zero = if zero { ", ZeRO-1" } else { "" };
        println!(
            "{:<24} {rate:>12.1} {base:>12.1} {:>8.2}",
            format!("{r} x {p}, m={m}{zero}"),
            rate / base
        );
    }
    println!();
    println!("optimizer state per worker, Adam, 2 replicas x 1 stage (serialized bytes)");
    let (_, full) = measure_config(width, row(2, 1, 1, false, true), 1);
    let (_, sharded) = measure_config(width, row(2, 1, 1, true, true), 1);
    println!(
        "  ZeRO off {:.1} MiB, ZeRO-1 {:.1} MiB ({:.0}% saved)",
        full as f64 / (1 << 20) as f64,
        sharded as f64 / (1 << 20) as f64,
        100.0 * (1.0 - sharded as f64 / full.max(1) as f64)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we do not support.
    let width: usize = env_or("BENCH_WIDTH", 1024);
    let steps: u64 = env_or("BENCH_STEPS", 8);
    let ms: Vec<usize> = std::env::var("BENCH_MS")
        .unwrap_or_else(|_| "1,4,8,32".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!(
        "MLP-{HIDDEN}x{width}, batch {BATCH}, SGD, remat never, 1 thread per worker, median of {steps} steps"
    );
    println!(
        "{:<10} {:>4} {:>6} {:>12} {:>12} {:>10} {:>10} {:>10}",
        "schedule", "m", "stages", "samples/s", "baseline", "efficiency", "bound", "of ceiling"
    );
    if std::env::var_os("BENCH_DP_ONLY").is_some() {
        data_parallel(width, steps);
        return;
    }
    for &m in &ms {
        let base = measure(width, 1, m, ScheduleKind::GPipe, steps);
        println!(
            "{:<10} {m:>4} {:>6} {base:>12.1} {:>12} {:>10} {:>10} {:>10}",
            "single", 1, "-", "-", "-", "-"
        );
        let pair = concurrent(width, m, steps);
        let ceiling = pair / (2.0 * base);
        println!(
            "{:<10} {m:>4} {:>6} {pair:>12.1} {base:>12.1} {ceiling:>10.3} {:>10} {:>10}",
            "2 x single", 1, "-", "-"
        );
        for schedule in ScheduleKind::ALL {
            let rate = measure(width, 2, m, schedule, steps);
            let eff = rate / (2.0 * base);
            let bound = m as f64 / (m as f64 + 1.0);
            println!(
                "{:<10} {m:>4} {:>6} {rate:>12.1} {base:>12.1} {eff:>10.3} {bound:>10.3} {:>10.3}",
                schedule.to_string(),
                2,
                eff / (ceiling * bound)
            );
        }
    }
    data_parallel(width, steps);
}
