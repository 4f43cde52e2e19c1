//! [`measure`]: a model's [`CostTable`] on this machine.
//!
//! ## How each number is measured
//!
//! - **Per layer, at each micro-batch size in play**: the engine's profiler times every layer's
//!   forward and autodiff backward alone (best of 5) — the relative weights of the layers —
//!   and a one-worker pipeline of the whole model runs a few steps with the split backward
//!   (ZB-H1, one micro-batch of that many rows): its measured forward, input- and
//!   weight-gradient totals are what the engine really spends, and they are shared out over the
//!   layers: the forward by the profiler's weights, the weight gradient by parameter count over
//!   the layers that can split it (one GEMM over the weights), the input gradient by what
//!   remains of each profiled backward.
//! - **Engine costs**: the optimizer step per parameter byte and the per-step overhead (wall
//!   time minus the simulated plan) from those runs; the hand-over between a worker's chunks
//!   from a one-worker interleaved run (wall minus the simulated plan, per compute action); the
//!   slowdown of `n` workers stepping at once from `n` data-parallel replicas of the whole model
//!   against one (at the rows each of that many replicas takes); a message between stages from a channel round trip; the all-reduce per byte
//!   from summing two parameter-sized tensors.

use std::time::Instant;

use burn::prelude::*;
use pipetrain_engine::{Batch, Layer, Layout, OptimizerConfig, Remat, costs};
use pipetrain_schedules::{ActionKind, Costs, Lowering, ScheduleKind, lower, simulate};
use pipetrain_tune::{CostTable, LayerTimes, RowsCosts, Space};

use crate::error::Result;
use crate::pipeline::Pipeline;
use crate::step_report::StepReport;

/// How long the measurement runs: measured steps per calibration run (after one warm-up step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// Timed steps of each calibration pipeline (the fastest counts).
    pub steps: usize,
    /// Repeats of the per-layer profiler (the fastest counts).
    pub repeats: usize,
    /// Passes over every measurement (the fastest per micro-batch size counts, and the least
    /// slowdown): a burst of load from other processes during one pass does not stick.
    pub passes: usize,
}

impl Default for Calibration {
    fn default() -> Self {
        Self {
            steps: 5,
            repeats: 5,
            passes: 2,
        }
    }
}

/// Measures `layers` on `device` at every micro-batch size of `space` ([`Space::rows_in_play`]),
/// with rows cut from `batch` (which must hold `space.batch` rows). One compute thread per
/// worker, as the search assumes.
///
/// # Errors
/// A batch too small, or an engine error while measuring.
pub fn measure<L: Layer>(
    layers: &[L],
    batch: &Batch,
    space: &Space,
    optimizer: &OptimizerConfig,
    device: &Device,
    calibration: Calibration,
) -> Result<CostTable> {
    let rows = space.rows_in_play(layers.len());
    let run = |schedule: ScheduleKind, balance: Vec<usize>, rows: usize, m: usize| {
        let sample = cut(batch, rows * m)?;
        let pipeline = one_worker(layers, schedule, balance, m, optimizer, device)?;
        let plan = lower(&schedule.plan(1, m)?, Lowering::default());
        timed(pipeline, &plan, &sample, calibration.steps)
    };
    let mut table = CostTable {
        param_bytes: layers.iter().map(|l| l.num_params() as u64 * 4).collect(),
        slowdown: vec![1.0],
        ..CostTable::default()
    };
    let (mut optimizer_per_byte, mut overheads) = (f64::INFINITY, Vec::new());
    let total_params: u64 = table.param_bytes.iter().sum();
    let passes = calibration.passes.max(1);
    for &r in rows.iter().cycle().take(rows.len() * passes) {
        let sample = cut(batch, r)?;
        // The graphs as the split backward, the runs' default, keeps them.
        let profiled =
            costs::layer_costs_split(layers, &sample.inputs, device, calibration.repeats, true)
                .map_err(pipetrain_engine::EngineError::bad_batch)?;
        let (costs, overhead, _, state) = run(ScheduleKind::ZbH1, vec![layers.len()], r, 1)?;
        if table.optimizer_bytes.is_empty() {
            table.optimizer_bytes = optimizer_bytes(&table.param_bytes, optimizer, state);
        }
        overheads.push(overhead);
        optimizer_per_byte = optimizer_per_byte.min(costs.optimizer / total_params.max(1) as f64);
        let split = crate::memory::split_bytes_held(layers, &sample.inputs, device)?;
        let measured = RowsCosts {
            rows: r,
            layers: share(layers, &profiled, &costs, &split),
        };
        match table.rows.iter_mut().find(|k| k.rows == r) {
            Some(kept) if total(kept) <= total(&measured) => {}
            Some(kept) => *kept = measured,
            None => table.rows.push(measured),
        }
    }
    table.optimizer_per_byte = optimizer_per_byte.min(1.0);
    table.step = median(&mut overheads);
    let mid = rows[rows.len() / 2];
    if layers.len() >= 2 && space.schedules.iter().any(|s| s.virtual_stages() > 1) {
        let half = layers.len() / 2;
        let interleaved = ScheduleKind::Interleaved { virtual_stages: 2 };
        let (_, overhead, actions, _) = run(interleaved, vec![half, layers.len() - half], mid, 2)?;
        table.turn = ((overhead - table.step) / actions.max(1) as f64).max(0.0);
    }
    // Workers sharing the machine slow each other (memory bandwidth, caches, burn-autodiff's
    // process-wide lock): measured at the rows each of `workers` replicas would take.
    let rows_each = (space.batch / space.workers.max(1)).max(1);
    for _ in 0..passes {
        let measured = slowdown(layers, batch, rows_each, space.workers, optimizer, device)?;
        table.slowdown = match table.slowdown.len() == measured.len() {
            true => table
                .slowdown
                .iter()
                .zip(&measured)
                .map(|(a, b)| a.min(*b))
                .collect(),
            false => measured,
        };
    }
    table.transfer = message_latency();
    table.all_reduce_per_byte = sum_per_byte(device);
    Ok(table)
}

/// How much slower (> 1) or faster the machine runs `layers` now than when `table` was
/// measured: one one-worker run at the largest micro-batch size of the table against the
/// table's times there. [`CostTable::scale`](pipetrain_tune::CostTable::scale) the table by it
/// before trusting a cached table's predictions.
///
/// # Errors
/// A batch too small, or an engine error.
pub fn drift<L: Layer>(
    table: &CostTable,
    layers: &[L],
    batch: &Batch,
    optimizer: &OptimizerConfig,
    device: &Device,
) -> Result<f64> {
    let Some(kept) = table.rows.first() else {
        return Ok(1.0);
    };
    let sample = cut(batch, kept.rows)?;
    let pipeline = one_worker(
        layers,
        ScheduleKind::ZbH1,
        vec![layers.len()],
        1,
        optimizer,
        device,
    )?;
    let plan = lower(&ScheduleKind::ZbH1.plan(1, 1)?, Lowering::default());
    let (costs, _, _, _) = timed(pipeline, &plan, &sample, Calibration::default().steps)?;
    let now = costs.forward[0] + costs.backward[0];
    Ok(now / total(kept).max(1e-12))
}

/// The first `rows` rows of `batch` (one micro-batch of a `rows`-row cut).
fn cut(batch: &Batch, rows: usize) -> Result<Batch> {
    let parts = (batch.len() / rows.max(1)).max(1);
    let shard = batch.shard(Layout::new(1, 1, parts))?.swap_remove(0);
    Ok(Batch {
        inputs: shard
            .inputs
            .into_iter()
            .next()
            .expect("one micro-batch at least"),
        targets: shard
            .targets
            .into_iter()
            .next()
            .expect("one micro-batch at least"),
    })
}

/// A fresh one-worker pipeline of `layers` (chunks `balance`), `m` micro-batches, no remat.
fn one_worker<L: Layer>(
    layers: &[L],
    schedule: ScheduleKind,
    balance: Vec<usize>,
    m: usize,
    optimizer: &OptimizerConfig,
    device: &Device,
) -> Result<Pipeline<L>> {
    Pipeline::builder()
        .layers(layers.to_vec())
        .balance(balance)
        .micro_batches(m)
        .schedule(schedule)
        .remat(Remat::Never)
        .optimizer(optimizer.clone())
        .devices([device.clone()])
        .threads_per_worker(1)
        // The calibration reads each action's time: device times, not enqueue times.
        .timing(crate::Timing::Device)
        .build()
}

/// One warm-up step then `steps` timed ones: the median step's measured costs, its wall time
/// minus `plan`'s (one program per worker) simulated makespan under those costs, the compute
/// actions it ran and the optimizer state its workers hold.
fn timed<L: Layer>(
    mut pipeline: Pipeline<L>,
    plan: &pipetrain_schedules::Plan,
    batch: &Batch,
    steps: usize,
) -> Result<(Costs, f64, u32, u64)> {
    pipeline.train_step(batch)?;
    let mut steps_run: Vec<(f64, StepReport)> = Vec::new();
    for _ in 0..steps.max(1) {
        // Timed around the call, as `pipetrain tune` times its runs (sharding and the report
        // included).
        let t = Instant::now();
        let report = pipeline.train_step(batch)?;
        steps_run.push((t.elapsed().as_secs_f64(), report));
    }
    // The median step, as the runs report their median.
    steps_run.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (wall, report) = steps_run.swap_remove(steps_run.len() / 2);
    let costs = report.measured_costs();
    let simulated = simulate(plan, &costs)?.makespan;
    let compute = [
        ActionKind::Forward,
        ActionKind::Backward,
        ActionKind::BackwardInput,
        ActionKind::BackwardWeight,
    ];
    let actions = report
        .workers
        .iter()
        .flat_map(|w| compute.iter().map(|&k| w.actions.count(k)))
        .sum();
    let state = pipeline
        .worker_memory(&report)?
        .iter()
        .map(|w| w.optimizer_state)
        .sum();
    Ok((costs, (wall - simulated).max(0.0), actions, state))
}

/// Slack per layer over its share of the measured optimizer state: the serialized record's
/// headers vary a little with the parameters' ids.
const STATE_SLACK: u64 = 256;

/// Per layer: its parameter-sized state slots, plus an even share of what the measured state
/// (`measured` bytes for the whole model) holds beyond them, plus [`STATE_SLACK`].
fn optimizer_bytes(params: &[u64], optimizer: &OptimizerConfig, measured: u64) -> Vec<u64> {
    let slots = optimizer.state_slots();
    let base: u64 = params.iter().map(|p| p * slots).sum();
    let holders = params.iter().filter(|&&p| p > 0).count().max(1) as u64;
    let extra = measured.saturating_sub(base).div_ceil(holders);
    params
        .iter()
        .map(|&p| match (p, measured) {
            (0, _) | (_, 0) => 0,
            _ => p * slots + extra + STATE_SLACK,
        })
        .collect()
}

/// The one-stage run's totals shared out over the layers: the forward by the profiled forwards,
/// the weight gradients by parameter count over the layers that split, the input gradients by
/// what remains of each profiled backward.
fn share<L: Layer>(
    layers: &[L],
    profiled: &[pipetrain_partitioner::LayerCost],
    run: &Costs,
    split: &[u64],
) -> Vec<LayerTimes> {
    let forward: f64 = profiled.iter().map(|c| c.forward).sum::<f64>().max(1e-12);
    let dense: Vec<bool> = layers
        .iter()
        .map(|l| l.dense().is_some() || l.splits_linears())
        .collect();
    // A weight gradient is one GEMM over the layer's weights: shared out by parameter count,
    // not by the profiled backward (the first layer's has no input gradient, and would get
    // too little of the weight gradients).
    let params: Vec<f64> = layers
        .iter()
        .zip(&dense)
        .map(|(l, &d)| if d { l.num_params() as f64 } else { 0.0 })
        .collect();
    let split_params = params.iter().sum::<f64>().max(1e-12);
    let split_backward: f64 = profiled
        .iter()
        .zip(&dense)
        .filter(|(_, d)| **d)
        .map(|(c, _)| c.backward)
        .sum();
    let (f_total, b_total) = (run.forward[0], run.backward[0]);
    let w_total = b_total * run.weight_fraction;
    // The input-gradient pass by what remains of each layer's profiled backward once its
    // estimated weight-gradient part is taken out.
    let input_weights: Vec<f64> = profiled
        .iter()
        .zip(&params)
        .map(|(c, p)| {
            let weight_part = run.weight_fraction * split_backward * p / split_params;
            (c.backward - weight_part).max(0.0)
        })
        .collect();
    let input_total = input_weights.iter().sum::<f64>().max(1e-12);
    profiled
        .iter()
        .zip(params.iter().zip(&input_weights))
        .zip(split)
        .map(|((c, (p, w_in)), &deferred_bytes)| {
            let input = (b_total - w_total) * w_in / input_total;
            let weight = w_total * p / split_params;
            LayerTimes {
                forward: f_total * c.forward / forward,
                backward: input + weight,
                input,
                weight,
                activation_bytes: c.activation_bytes,
                output_bytes: c.output_bytes,
                deferred_bytes,
            }
        })
        .collect()
}

/// Per worker count n (entry n − 1): the step time of n data-parallel replicas of the whole
/// model (one stage, one micro-batch of `rows` rows each) over that of one alone: what workers
/// sharing the machine cost each other (memory bandwidth, caches, burn-autodiff's process-wide
/// lock), as the engine runs them.
fn slowdown<L: Layer>(
    layers: &[L],
    batch: &Batch,
    rows: usize,
    workers: usize,
    optimizer: &OptimizerConfig,
    device: &Device,
) -> Result<Vec<f64>> {
    let step_time = |n: usize| -> Result<f64> {
        let mut pipeline = Pipeline::builder()
            .layers(layers.to_vec())
            .balance([layers.len()])
            .replicas(n)
            .remat(Remat::Never)
            .optimizer(optimizer.clone())
            .devices([device.clone()])
            .threads_per_worker(1)
            .build()?;
        let sample = cut(batch, n * rows)?;
        let mut steps = Vec::new();
        for step in 0..8 {
            let t = Instant::now();
            pipeline.train_step(&sample)?;
            if step > 0 {
                steps.push(t.elapsed().as_secs_f64());
            }
        }
        // The median step, as the runs report their median.
        Ok(median(&mut steps))
    };
    let alone = step_time(1)?.max(1e-12);
    let mut out = vec![1.0];
    for n in (2..=workers).filter(|n| n * rows <= batch.len()) {
        out.push((step_time(n)? / alone).max(1.0));
    }
    Ok(out)
}

/// Seconds for a message to reach another thread: half the fastest of 200 round trips.
fn message_latency() -> f64 {
    let (to, from_main) = std::sync::mpsc::channel::<u32>();
    let (back, from_worker) = std::sync::mpsc::channel::<u32>();
    let worker = std::thread::spawn(move || {
        while let Ok(x) = from_main.recv() {
            if back.send(x).is_err() {
                break;
            }
        }
    });
    let mut best = f64::INFINITY;
    for i in 0..200 {
        let t = Instant::now();
        let _ = to.send(i);
        let _ = from_worker.recv();
        best = best.min(t.elapsed().as_secs_f64());
    }
    drop(to);
    let _ = worker.join();
    best / 2.0
}

/// Seconds per byte of summing two 4 MiB tensors on `device` (fastest of 5).
fn sum_per_byte(device: &Device) -> f64 {
    const ELEMENTS: usize = 1 << 20;
    let a = Tensor::<1>::ones([ELEMENTS], device);
    let b = Tensor::<1>::ones([ELEMENTS], device);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        let c = a.clone() + b.clone();
        let _ = c.into_data();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best / (ELEMENTS * 4) as f64
}

/// Seconds of one micro-batch through every layer (forward and both backward halves).
fn total(rows: &RowsCosts) -> f64 {
    rows.layers
        .iter()
        .map(|l| l.forward + l.input + l.weight)
        .sum()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
