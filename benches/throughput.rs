//! Throughput bench: MLP-8x1024 (the PyTorch peer workload), batch 256, CPU.
//!
//! Rows: the 1-stage baseline at each micro-batch count m (one worker, one thread, m
//! micro-batches of 256/m rows, gradients accumulated), then 2 stages under GPipe and 1F1B
//! (one thread per worker). efficiency = throughput / (2 × baseline at the same m), next to the
//! bound m/(m+1). Run: `cargo bench --bench throughput` (release). Options via env:
//! `BENCH_STEPS` (default 8 measured steps after 2 warm-up), `BENCH_WIDTH` (1024),
//! `BENCH_MS` (e.g. "1,4,8,32").

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

/// Median samples/s over `steps` measured steps.
fn measure(width: usize, stages: usize, m: usize, schedule: ScheduleKind, steps: u64) -> f64 {
    let device = Device::flex();
    device.seed(0);
    let layers = MlpConfig::new(width, HIDDEN, CLASSES).init(&device);
    let balance = if stages == 1 {
        vec![HIDDEN + 1]
    } else {
        vec![HIDDEN / 2, HIDDEN / 2 + 1]
    };
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .balance(balance)
        .micro_batches(m)
        .schedule(schedule)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(0.01)
        .threads_per_worker(1)
        .build()
        .expect("valid bench configuration");
    let data: Vec<_> = (0..5)
        .map(|k| synthetic::classification(1234, k, BATCH, width, CLASSES, &device))
        .collect();
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
    rates[rates.len() / 2]
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
        "{:<10} {:>4} {:>6} {:>12} {:>12} {:>10} {:>10}",
        "schedule", "m", "stages", "samples/s", "baseline", "efficiency", "bound"
    );
    for &m in &ms {
        let base = measure(width, 1, m, ScheduleKind::GPipe, steps);
        println!(
            "{:<10} {m:>4} {:>6} {base:>12.1} {:>12} {:>10} {:>10}",
            "single", 1, "-", "-", "-"
        );
        for schedule in ScheduleKind::ALL {
            let rate = measure(width, 2, m, schedule, steps);
            let eff = rate / (2.0 * base);
            let bound = m as f64 / (m as f64 + 1.0);
            println!(
                "{:<10} {m:>4} {:>6} {rate:>12.1} {base:>12.1} {eff:>10.3} {bound:>10.3}",
                schedule.to_string(),
                2
            );
        }
    }
}
