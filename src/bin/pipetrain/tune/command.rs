//! `pipetrain tune`: flags → model and space → the library's tune session (cost table,
//! ranking, trial runs, winner), printed as it goes → `--apply`.

use burn::prelude::*;
use pipetrain::commands::bench::cpu_model;
use pipetrain::commands::tune::{
    Busy, Calibration, ROUNDS, Ranking, RankingTable, Recompute, Space, TableSource, TuneProgress,
    TuneSettings, cache_dir,
};
use pipetrain::memory::Bytes;
use pipetrain::{Batch, Layer, OptimizerConfig, ScheduleKind};

use super::args::TuneArgs;
use super::flags;
use crate::exit::Exit;
use crate::failure::Failure;
use crate::model::ReferenceModel;

/// Distinct synthetic batches the runs cycle through.
const BATCHES: u64 = 4;

/// Runs `pipetrain tune`.
///
/// # Errors
/// Bad flags, an `--apply` path that cannot be written (probed before any tuning) or nothing
/// that fits (usage), a failed measurement or run, or a failed write of `--apply` (runtime).
pub fn run(args: &TuneArgs) -> Result<Exit, Failure> {
    let train = &args.train;
    pipetrain::trainer::Distributed::alone("tune").map_err(Failure::of_build)?;
    crate::conflicts::tune(train, args.apply.is_some())?;
    // The applied file is an output like any other: never the data, the config or another
    // input of this command.
    crate::paths::distinct(
        pipetrain::trainer::paths::Files::new()
            .data("--data", &train.data)
            .input("--config", train.config.as_deref())
            .output("--apply", args.apply.as_deref()),
    )?;
    crate::paths::outputs_writable(&[("--apply", &args.apply)]).map_err(Failure::usage)?;
    let unwritten = crate::interrupt::unwritten("--apply", args.apply.as_deref());
    crate::interrupt::exit_on_signal("tune", unwritten)?;
    crate::interrupt::hold_for_test("tune");
    let model = crate::model::from_args(train, None).map_err(Failure::usage)?;
    let (optimizer, optimizer_name) = crate::optimizer::of(train)?;
    let slots = pipetrain::memory::optimizer_slots(&optimizer);
    crate::model::check_fits(&model, train.batch, slots, 1.0).map_err(Failure::usage)?;
    let space = space(args)?;
    let devices = train
        .device
        .devices(train.matmul_precision)
        .map_err(Failure::usage)?;
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
        ReferenceModel::Mlp(c) => tune(&cx, c.init(&cx.device)),
        ReferenceModel::ResNet(c) => tune(&cx, c.init(&cx.device)),
        ReferenceModel::UNet(c) => tune(&cx, c.init(&cx.device)),
        ReferenceModel::Gpt(c) => tune(&cx, c.init(&cx.device)),
        ReferenceModel::Llama { config, .. } => tune(&cx, config.init(&cx.device)),
    }
}

/// What every step of a tune run reads.
struct Context<'a> {
    args: &'a TuneArgs,
    model: ReferenceModel,
    space: Space,
    optimizer: OptimizerConfig,
    optimizer_name: String,
    device: Device,
}

/// The search space the flags describe.
fn space(args: &TuneArgs) -> Result<Space, Failure> {
    let workers = args
        .workers
        .unwrap_or_else(pipetrain::trainer::threads::cores);
    let mut space = pipetrain::commands::tune::default_space(
        args.train.batch,
        workers,
        args.train.memory_budget,
    );
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
    space.check().map_err(Failure::usage)?;
    Ok(space)
}

/// Tunes (the library's [`tune`]), printing as it goes, then applies.
fn tune<L: Layer>(cx: &Context<'_>, layers: Vec<L>) -> Result<Exit, Failure> {
    let Context {
        args,
        model,
        space,
        optimizer,
        optimizer_name,
        device,
    } = cx;
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
    let settings = TuneSettings {
        space: space.clone(),
        model: model.describe(),
        optimizer: optimizer.clone(),
        optimizer_name: optimizer_name.clone(),
        learning_rate: train.lr(),
        runs: args.run.unwrap_or(args.top),
        run_steps: args.run_steps,
        cache_dir: Some(cache_dir(args.cache_dir.as_deref())),
        remeasure: args.remeasure,
        calibration: Calibration::default(),
        files: files(args),
    };
    let report = pipetrain::commands::tune::tune(&layers, &batches, &settings, device, &mut |p| {
        show(args, p);
    })
    .map_err(|e| match e {
        // A poisoned cache: --remeasure replaces it.
        e @ (pipetrain::Error::Command(pipetrain::CommandError::TuneNothingFits { .. })
        | pipetrain::Error::Command(pipetrain::CommandError::TuneCache { .. })
        | pipetrain::Error::Run(pipetrain::RunError::Path { .. })
        | pipetrain::Error::Run(pipetrain::RunError::SameFile { .. })) => Failure::usage(e),
        e => Failure::of_build(e),
    })?;
    print!("{report}");
    if let Some(path) = &args.apply {
        let winner = report.winner();
        let mut pairs = flags::model(train);
        pairs.extend(flags::knobs(winner));
        // The settings tune did not choose, as given: the file reproduces the tuned run.
        let mut file: Vec<(String, toml::Value)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        file.extend(flags::carried(train, &pairs));
        pipetrain::engine::output::write_atomically(path, flags::to_toml(&file).as_bytes())
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

/// The command's files that the tune cache may not be: the data set's, `--config` and
/// `--apply`.
fn files(args: &TuneArgs) -> Vec<(String, std::path::PathBuf)> {
    let data = args.train.data.parse::<pipetrain_data::DataSpec>();
    let data = data.map(|d| d.files()).unwrap_or_default();
    data.into_iter()
        .map(|f| ("--data".to_string(), f))
        .chain(args.train.config.clone().map(|f| ("--config".into(), f)))
        .chain(args.apply.clone().map(|f| ("--apply".into(), f)))
        .collect()
}

/// The cost table's source, then the ranking, as the session reaches them.
fn show(args: &TuneArgs, progress: TuneProgress<'_>) {
    match progress {
        TuneProgress::CostTable(TableSource::Cached { path, factor }) => println!(
            "cost table: cached {}, times scaled by {factor:.3} after a check run (--remeasure to \
             measure again)",
            path.display()
        ),
        TuneProgress::CostTable(TableSource::Measured {
            rows,
            seconds,
            others,
            cached,
        }) => match cached {
            Some(Ok(path)) => println!(
                "cost table: measured at {rows:?} rows per micro-batch in {seconds:.1}s{}, cached {}",
                Busy(*others),
                path.display()
            ),
            Some(Err(why)) => eprintln!("warning: cost table not cached at {why}"),
            None => {}
        },
        TuneProgress::Ranked(ranking) => print_ranking(args, ranking),
    }
}

/// The model flags, then the library's table of the ranking with each candidate's flags.
fn print_ranking(args: &TuneArgs, ranking: &Ranking) {
    println!(
        "model flags: {}",
        flags::command_line(&flags::model(&args.train))
    );
    let table = RankingTable {
        ranking,
        top: args.top,
        heading: "train flags (after the model flags)",
        settings: &|c| flags::command_line(&flags::knobs(c)),
    };
    print!("{table}");
    if !ranking.candidates.is_empty() && args.run.unwrap_or(args.top) > 0 {
        println!(
            "runs: {} timed step(s) each over {ROUNDS} rounds, each round one configuration after \
             the other (one untimed step, then its timed ones), same initial weights",
            args.run_steps,
        );
    }
}
