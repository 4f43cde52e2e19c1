//! ZeRO-3's saving where replicas hold their own copies: one worker per process under
//! `mpirun -np 4` (2 replicas × 2 stages), each process counting its own bytes with the
//! counting allocator of tests/memory_measured.rs.
//!
//! The parent test launches this test binary under `mpirun`, running [`zero_child`] in each
//! process at levels 1 and 3 in turn. Each process reports, for its worker, the bytes live
//! between steps (above what was live before its pipeline was built) and the most bytes live
//! during a step, and the memory model's prediction of what stays between steps and of the
//! step's peak (`WorkerMemory::resting` and `total` of `Setup::memory`). Held:
//! - between steps, level 3 is below level 1 by at least 80 % of the model's saving (the
//!   parameters the worker does not own) and not above 115 % of it (and one weight-sized
//!   tensor that level 1 now and then keeps);
//! - the bar: the step's peak at level 3 is below level 1's by at least 80 % of the
//!   model's saving there, and not above 115 % of it. Level 3 reshards a stage after its last
//!   computation that reads the values, before the weight-gradient pass that makes the
//!   gradients (`sI sRS sW`), so the whole values and the whole gradients are never held
//!   together (docs/zero.md, "Memory").
//!
//! In one process the replicas share the owners' buffers after every exchange (the in-process
//! collective hands out tensor handles), so this saving shows only across processes.
#![cfg(feature = "mpi")]

#[path = "memory_measured/counter.rs"]
#[allow(dead_code)] // the sweep's per-worker logs, which a process of one worker does not read
mod counter;

use std::process::Command;
use std::time::Duration;

use burn::prelude::*;
use pipetrain::remedy::Builder;
use pipetrain::trainer::{Distributed, Launch};
use pipetrain::{OptimizerConfig, Pipeline, Remat, ScheduleKind};
use pipetrain_models::{MlpConfig, synthetic};

/// The level the child runs at, set by the parent.
const LEVEL: &str = "PIPETRAIN_TEST_ZERO_LEVEL";
/// The prefix of a child's report line.
const REPORT: &str = "ZERO-MEMORY";

/// Parameters dominate: MLP-16x256 (about 1 M parameters, 4 MiB; 2 stages of 2 MiB, in tensors
/// of 256 KiB), 16 rows.
const WIDTH: usize = 256;
const HIDDEN: usize = 16;
const ROWS: usize = 16;
/// Steps before the first reading, and readings: the live level after a step now and then
/// holds one more tensor (a weight's worth: 256 KiB here) than after the next, so each level is
/// the least of the readings, as is each peak.
const WARM_UP: usize = 2;
const READINGS: usize = 3;

/// One process of the job: builds its worker of a 2 × 2 pipeline at the parent's level, trains
/// [`WARM_UP`] steps, then reports the least of [`READINGS`] readings of what is live between
/// steps and of a step's peak, and the model's resting bytes. Only run by [`zero_three_lowers_what_each_process_keeps_between_steps_and_at_the_peak`].
#[test]
#[ignore = "run under mpirun by zero_three_lowers_what_each_process_keeps_between_steps_and_at_the_peak"]
fn zero_child() {
    let level: u8 = std::env::var(LEVEL)
        .expect("run by the parent test")
        .parse()
        .unwrap();
    let launch = Launch {
        style: &Builder,
        workers_per_process: 1,
        comm_timeout: Duration::from_secs(120),
        replicas: 2,
        stages: 2,
        stage_ranks: Vec::new(),
        settings: vec![("zero".into(), level.to_string())],
    };
    let dist = Distributed::start(&launch)
        .unwrap()
        .expect("launched by mpirun");
    let device = Device::flex();
    let batch = synthetic::classification(5, 0, ROWS, WIDTH, 8, &device);
    counter::start();
    let before = counter::current_usage();
    let mut pipeline = Pipeline::builder()
        .layers(MlpConfig::new(WIDTH, HIDDEN, 8).init(&device))
        .stages(2)
        .replicas(2)
        .micro_batches(2)
        .schedule(ScheduleKind::OneFOneB)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::adam())
        .zero(level)
        // The gathers go a bucket at a time: their flat buffer holds one bucket's values.
        .bucket_bytes(256 << 10)
        .threads_per_worker(1)
        .distributed(dist.local(), dist.fabric())
        .build()
        .unwrap();
    for _ in 0..WARM_UP {
        pipeline.train_step(&batch).unwrap();
    }
    let (mut between, mut peak) = (i64::MAX, i64::MAX);
    for _ in 0..READINGS {
        between = between.min(counter::current_usage() - before);
        counter::reset_peaks();
        pipeline.train_step(&batch).unwrap();
        peak = peak.min(counter::peak_usage() - before);
    }
    // The model before any step: what the setup predicts for this process's worker.
    let model = pipeline.setup().memory();
    let [worker] = model else {
        panic!("one worker per process: {model:?}");
    };
    println!(
        "{REPORT} {} level {level} between {between} peak {peak} resting {} total {} \
         parameters {}",
        worker.worker.stage.index() * 2 + worker.worker.replica.index(),
        worker.resting(),
        worker.total(),
        worker.parameters
    );
    drop(pipeline);
    dist.finish(None);
}

/// One report line: (worker index, between, peak, resting, total, parameters).
fn parse(line: &str) -> (usize, i64, i64, i64, i64, i64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |key: &str| -> i64 {
        let i = words.iter().position(|w| *w == key).unwrap();
        words[i + 1].parse().unwrap()
    };
    (
        words[1].parse().unwrap(),
        at("between"),
        at("peak"),
        at("resting"),
        at("total"),
        at("parameters"),
    )
}

/// The children's reports at `level`, by worker.
fn run(level: u8) -> Vec<(usize, i64, i64, i64, i64, i64)> {
    let out = Command::new("mpirun")
        .args(["-np", "4"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "zero_child", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(LEVEL, level.to_string())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .expect("mpirun runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mpirun at level {level}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut reports: Vec<_> = stdout
        .lines()
        // The harness's own `test zero_child ... ` may precede a report on its line.
        .filter_map(|l| l.find(REPORT).map(|i| parse(&l[i..])))
        .collect();
    reports.sort();
    assert_eq!(reports.len(), 4, "{stdout}");
    reports
}

#[test]
fn zero_three_lowers_what_each_process_keeps_between_steps_and_at_the_peak() {
    let (one, three) = (run(1), run(3));
    for (a, b) in one.iter().zip(&three) {
        let (worker, between1, peak1, resting1, total1, parameters) = *a;
        let (_, between3, peak3, resting3, total3, _) = *b;
        let measured = between1 - between3;
        let predicted = resting1 - resting3;
        let (peak_saved, peak_model) = (peak1 - peak3, total1 - total3);
        println!(
            "worker {worker}: between steps {between1} -> {between3} B (saved {measured}, model \
             {predicted}); step peak {peak1} -> {peak3} B (saved {peak_saved}, model \
             {peak_model}); parameters {parameters} B"
        );
        assert!(
            predicted > parameters / 4,
            "the model saves the unowned share"
        );
        // Above: level 1 now and then keeps one more weight-sized tensor (256 KiB) live between
        // steps on one worker, in every reading of the run (read 0.98-1.01 of the model, and
        // 1.21-1.23 with it).
        let tensor = (WIDTH * WIDTH * 4) as f64;
        assert!(
            measured as f64 >= 0.8 * predicted as f64
                && measured as f64 <= 1.15 * predicted as f64 + tensor,
            "worker {worker}: saved {measured} B between steps, model {predicted} B"
        );
        assert!(
            peak_model > parameters / 4,
            "the model's peak drops the unowned share"
        );
        assert!(
            peak_saved as f64 >= 0.8 * peak_model as f64
                && peak_saved as f64 <= 1.15 * peak_model as f64,
            "worker {worker}: the step's peak fell {peak1} -> {peak3} B ({peak_saved} B), \
             model {peak_model} B"
        );
    }
}
