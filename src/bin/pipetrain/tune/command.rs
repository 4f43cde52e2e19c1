//! `pipetrain tune`'s flow: flags → space → cost table (cache or measure) → ranking → the
//! table → trial runs → the winner (→ `--apply`).

use std::time::Instant;

use burn::prelude::*;
use pipetrain::memory::Bytes;
use pipetrain::tune::{
    Calibration, Candidate, CostTable, Recompute, Space, drift, measure, search,
};
use pipetrain::{Batch, Layer, OptimizerConfig, ScheduleKind};

use super::args::TuneArgs;
use super::{cache, flags, trial};
use crate::bench::{CpuSnapshot, cpu_model};
use crate::exit::Exit;
use crate::failure::Failure;
use crate::model::Model;

/// Distinct synthetic batches the runs cycle through.
const BATCHES: u64 = 4;

/// Runs `pipetrain tune`.
///
/// # Errors
/// Bad flags, an `--apply` path that cannot be written (probed before any tuning) or nothing
/// that fits (usage), a failed measurement or run, or a failed write of `--apply` (runtime).
pub fn run(args: &TuneArgs) -> Result<Exit, Failure> {
    let train = &args.train;
    crate::paths::distinct(
        &[("--config", train.config.as_deref())],
        &[("--apply", args.apply.as_deref())],
        &[],
    )?;
    crate::paths::outputs_writable(&[("--apply", &args.apply)]).map_err(Failure::usage)?;
    let model = crate::model::from_args(train, None).map_err(Failure::usage)?;
    let (optimizer, optimizer_name) = crate::optimizer::of(train)?;
    let slots = pipetrain::memory::optimizer_slots(&optimizer);
    crate::model::check_fits(&model, train.batch, slots, 1.0).map_err(Failure::usage)?;
    let space = space(args)?;
    let devices = train.device.devices().map_err(Failure::usage)?;
    let device = devices[0].clone();
    device.seed(train.seed);
    let cx = Context {
        args,
        model,
        space,
        optimizer,
        optimizer_name,
        device,
    };
    match model {
        Model::Mlp(c) => tune(&cx, c.init(&cx.device)),
        Model::ResNet(c) => tune(&cx, c.init(&cx.device)),
        Model::UNet(c) => tune(&cx, c.init(&cx.device)),
        Model::Gpt(c) => tune(&cx, c.init(&cx.device)),
    }
}

/// What every step of a tune run reads.
struct Context<'a> {
    args: &'a TuneArgs,
    model: Model,
    space: Space,
    optimizer: OptimizerConfig,
    optimizer_name: String,
    device: Device,
}

/// The search space the flags describe.
fn space(args: &TuneArgs) -> Result<Space, Failure> {
    let workers = args.workers.unwrap_or_else(crate::threads::cores);
    let mut space =
        pipetrain::tune::default_space(args.train.batch, workers, args.train.memory_budget);
    space.max_micro_batches = args.max_micro_batches;
    if let Some(names) = &args.schedules {
        space.schedules = names
            .iter()
            .map(|n| n.parse::<ScheduleKind>())
            .collect::<Result<_, _>>()
            .map_err(|e| Failure::usage(format!("--schedules: {e}")))?;
    }
    space.remats = match (args.train.remat, args.train.model) {
        (Some(_), _) | (None, crate::args::ModelKind::Resnet) => {
            vec![match args.train.remat() {
                pipetrain::Remat::Never => Recompute::Never,
                pipetrain::Remat::ExceptLast => Recompute::ExceptLast,
                pipetrain::Remat::Always => Recompute::Always,
            }]
        }
        (None, _) => Recompute::ALL.to_vec(),
    };
    space.check().map_err(|e| Failure::usage(e.to_string()))?;
    Ok(space)
}

/// Measures (or reads) the table, ranks, prints, runs, applies.
fn tune<L: Layer>(cx: &Context<'_>, layers: Vec<L>) -> Result<Exit, Failure> {
    let Context {
        args,
        model,
        space,
        optimizer,
        optimizer_name,
        device,
    } = cx;
    let (space, optimizer, device) = (space, optimizer, device);
    let train = &args.train;
    let batches: Vec<Batch> = (0..BATCHES)
        .map(|i| model.synthetic(train.seed, i, train.batch, device))
        .collect();
    let budget = train
        .memory_budget
        .map_or("none".to_string(), |b| Bytes(b).to_string());
    println!(
        "tune: {}, batch {}, {optimizer_name}, {} workers (1 thread each) on {}, memory budget {budget}",
        model.describe(),
        train.batch,
        space.workers,
        cpu_model()
    );
    let table = cost_table(cx, &layers, &batches[0])?;
    let ranking = search(&table, space).map_err(|e| Failure::usage(e.to_string()))?;
    let model_flags = flags::to_flags(&flags::model(train));
    println!("model flags: {model_flags}");
    println!(
        "{} configurations: {} ranked, {} predicted like a ranked one, {} left out",
        ranking.candidates.len() + ranking.infeasible.len() + ranking.equivalent.len(),
        ranking.candidates.len(),
        ranking.equivalent.len(),
        ranking.infeasible.len()
    );
    if ranking.candidates.is_empty() {
        let why = ranking
            .infeasible
            .iter()
            .map(|i| format!("  {}: {}", i.knobs, i.reason));
        let shown: Vec<String> = why.take(5).collect();
        return Err(Failure::usage(format!(
            "no configuration fits; the first left out:\n{}\ngive a larger --memory-budget, \
             allow --remat always, or more --workers",
            shown.join("\n")
        )));
    }
    println!(
        "{:>4}  {:>12}  {:>7}  {:>16}  train flags (after the model flags)",
        "rank", "predicted/s", "bubble", "peak mem/worker"
    );
    let top = &ranking.candidates[..args.top.min(ranking.candidates.len())];
    for (i, c) in top.iter().enumerate() {
        println!(
            "{:>4}  {:>12.1}  {:>6.1}%  {:>16}  {}",
            i + 1,
            c.samples_per_sec,
            100.0 * c.bubble,
            Bytes(c.peak_memory()).to_string(),
            flags::to_flags(&flags::knobs(c))
        );
    }
    for i in ranking.infeasible.iter().take(3) {
        println!("left out: {}: {}", i.knobs, i.reason);
    }
    let runs = args.run.unwrap_or(args.top).min(ranking.candidates.len());
    let mut winner = &ranking.candidates[0];
    if runs > 0 {
        winner = trials(
            args,
            &ranking.candidates[..runs],
            &layers,
            &batches,
            optimizer,
        )?;
    }
    if let Some(path) = &args.apply {
        let mut pairs = flags::model(train);
        pairs.extend(flags::knobs(winner));
        pipetrain::engine::output::write_atomically(path, flags::to_toml(&pairs).as_bytes())
            .map_err(|e| Failure::runtime(format!("--apply {}: {e}", path.display())))?;
        println!(
            "apply: wrote {} ({}); train with: pipetrain train --config {}",
            path.display(),
            winner.knobs,
            path.display()
        );
    }
    Ok(Exit::Success)
}

/// The cached table for this model, batch, optimizer and space on this machine, or a fresh
/// measurement (then cached).
fn cost_table<L: Layer>(
    cx: &Context<'_>,
    layers: &[L],
    batch: &Batch,
) -> Result<CostTable, Failure> {
    let (args, space, optimizer, device) = (cx.args, &cx.space, &cx.optimizer, &cx.device);
    let (model, optimizer_name) = (&cx.model, &cx.optimizer_name);
    let rows = space.rows_in_play(layers.len());
    let key = format!(
        "{} | batch {} | {optimizer_name} | {} workers | rows {rows:?} | schedules {:?} | {} | pipetrain {}",
        model.describe(),
        space.batch,
        space.workers,
        space
            .schedules
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        cpu_model(),
        env!("CARGO_PKG_VERSION")
    );
    let path = cache::path(&cache::dir(args.cache_dir.as_deref()), &key);
    if !args.remeasure
        && let Some(mut table) = cache::load(&path, &key)
    {
        // The machine's speed drifts (other tenants, clocks): re-anchor the cached times with
        // one check run.
        let factor = drift(&table, layers, batch, optimizer, device)?;
        table.scale(factor);
        println!(
            "cost table: cached {}, times scaled by {factor:.3} after a check run (--remeasure to \
             measure again)",
            path.display()
        );
        return Ok(table);
    }
    let (t, cpu) = (Instant::now(), CpuSnapshot::now());
    let table = measure(
        layers,
        batch,
        space,
        optimizer,
        device,
        Calibration::default(),
    )?;
    match cache::store(&path, &key, &table) {
        Ok(()) => println!(
            "cost table: measured at {rows:?} rows per micro-batch in {:.1}s{}, cached {}",
            t.elapsed().as_secs_f64(),
            others(&cpu),
            path.display()
        ),
        Err(e) => eprintln!("warning: cost table not cached at {}: {e}", path.display()),
    }
    Ok(table)
}

/// Runs `candidates` one after the other and prints measured beside predicted; returns the
/// fastest measured.
fn trials<'a, L: Layer>(
    args: &TuneArgs,
    candidates: &'a [Candidate],
    layers: &[L],
    batches: &[Batch],
    optimizer: &OptimizerConfig,
) -> Result<&'a Candidate, Failure> {
    println!(
        "runs: {} timed step(s) each over {} rounds, each round one configuration after the \
         other (one untimed step, then its timed ones), same initial weights",
        args.run_steps,
        trial::ROUNDS
    );
    let cpu = CpuSnapshot::now();
    let measured = trial::run(
        candidates,
        layers,
        batches,
        optimizer,
        args.train.lr(),
        args.run_steps,
    )?;
    println!(
        "{:>4}  {:>12}  {:>11}  {:>9}  {:>16}  {:>16}",
        "rank", "predicted/s", "measured/s", "meas/pred", "predicted peak", "measured peak"
    );
    let mut best: Option<(f64, &Candidate)> = None;
    for (i, (c, t)) in candidates.iter().zip(&measured).enumerate() {
        println!(
            "{:>4}  {:>12.1}  {:>11.1}  {:>9.2}  {:>16}  {:>16}",
            i + 1,
            c.samples_per_sec,
            t.samples_per_sec,
            t.samples_per_sec / c.samples_per_sec,
            Bytes(c.peak_memory()).to_string(),
            Bytes(t.peak_memory).to_string()
        );
        if best.is_none_or(|(rate, _)| t.samples_per_sec > rate) {
            best = Some((t.samples_per_sec, c));
        }
    }
    println!("runs done{}", others(&cpu));
    let (rate, winner) = best.expect("at least one run");
    let rank = candidates
        .iter()
        .position(|c| std::ptr::eq(c, winner))
        .unwrap_or(0)
        + 1;
    println!(
        "winner: rank {rank}, {} ({rate:.1} samples/s measured); the top prediction measured \
         {:.1}% of it",
        winner.knobs,
        100.0 * measured[0].samples_per_sec / rate
    );
    Ok(winner)
}

/// ` (other processes kept N cores busy meanwhile)` since `start`, or nothing without /proc.
fn others(start: &CpuSnapshot) -> String {
    start
        .others_until(&CpuSnapshot::now())
        .map_or(String::new(), |c| {
            format!(" (other processes kept {c:.2} cores busy meanwhile)")
        })
}
