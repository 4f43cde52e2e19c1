//! Soak: 10,000 steps of a tiny model through a 2-stage, 2-replica pipeline; resident memory
//! after warm-up stays flat (within 5 %). A leak of even one small tensor, stash entry, channel
//! message or thread per step would show.
//!
//! One test in its own binary, so nothing else allocates in the process meanwhile.
//! `SOAK_STEPS` overrides the step count (e.g. for a quick local run).

use burn::prelude::*;
use pipetrain::{OptimizerConfig, Pipeline, Remat, ScheduleKind};
use pipetrain_models::{MlpConfig, synthetic};

/// Resident set size in bytes, from /proc/self/statm.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn ten_thousand_steps_keep_memory_flat() {
    let steps: u64 = std::env::var("SOAK_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let warmup = steps / 10;
    let device = Device::flex();
    let mut pipeline = Pipeline::builder()
        .layers(MlpConfig::new(8, 3, 3).init(&device))
        .balance([2, 2])
        .replicas(2)
        .micro_batches(2)
        .schedule(ScheduleKind::OneFOneB)
        .remat(Remat::ExceptLast)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(1e-3)
        .threads_per_worker(1)
        .build()
        .unwrap();
    let batches: Vec<_> = (0..8)
        .map(|i| synthetic::classification(1, i, 8, 8, 3, &device))
        .collect();
    let mut after_warmup = 0;
    let mut peak = 0;
    for step in 0..steps {
        let report = pipeline.train_step(&batches[(step % 8) as usize]).unwrap();
        assert!(report.loss.is_finite());
        if step + 1 == warmup {
            after_warmup = rss();
        }
        if step >= warmup && step % 100 == 0 {
            peak = peak.max(rss());
        }
    }
    let end = rss();
    peak = peak.max(end);
    let growth = (peak as f64 - after_warmup as f64) / after_warmup as f64;
    eprintln!(
        "soak: {steps} steps, RSS after {warmup} steps {:.1} MiB, peak after {:.1} MiB, end {:.1} MiB ({:+.2}%)",
        after_warmup as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        end as f64 / 1048576.0,
        100.0 * growth
    );
    assert!(
        growth.abs() <= 0.05,
        "resident memory grew {:.1}% from step {warmup} to {steps}",
        100.0 * growth
    );
}
