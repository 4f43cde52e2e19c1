//! `pipetrain train`: train a model through the pipeline, on synthetic or loaded data.
//!
//! [`run`] checks the flags, opens the data, sizes the model from both, and hands the model's
//! layers to [`train_with`], which runs the library's loop ([`pipetrain::trainer::Trainer`])
//! as the flags say and prints what it reports. Around the loop: `--profile` (a chrome
//! trace), `--plot` (the loss curve), `--verify`'s verdict and, at the end, the held-out
//! accuracy or perplexity.

use burn::prelude::*;
use pipetrain::commands::profile::Profile;
use pipetrain::engine::SingleDevice;
use pipetrain::remedy::Remedied;
use pipetrain::trainer::paths::Files;
use pipetrain::trainer::{
    DRIFT_VARIABLE, Distributed, Drift, Event, Mode, Reference, Shared, Signal, Source, Stop,
    Trainer, TrainerSettings, summary,
};
use pipetrain::{Batch, Layer, OptimizerConfig, Remat, Tie};

use crate::args::TrainArgs;
use crate::checkpoints;
use crate::data::Data;
use crate::exit::Exit;
use crate::failure::Failure;
use crate::model::ReferenceModel;
use crate::outcome::Lost;
use crate::paths;
use crate::progress::Progress;
use crate::run_failure::{cli_message, of_run};

/// Runs `pipetrain train`, recording a chrome trace around the run when `--profile` is given.
/// Returns [`Exit::VerifyFailed`] when `--verify` finds the weights apart, else
/// [`Exit::Success`].
///
/// # Errors
/// Bad flags (usage), or bad data, a failed step, or an output file that cannot be written
/// (runtime).
pub fn run(args: &TrainArgs) -> Result<Exit, Failure> {
    // Output files are written at the end: a bad destination must fail now, not after training;
    // and no output may be another flag's file.
    // Every file the data set reads is an input: a directory data set's files too. Under a
    // launcher, every rank's name of the per-rank trace is an output (`dd.st` → `dd.rank1.st`),
    // checked on every rank before MPI starts.
    paths::distinct(
        Files::new()
            .data("--data", &args.data)
            .input("--config", args.config.as_deref())
            .input("--plan", args.plan.as_deref())
            .input("--init", args.init.as_deref())
            .input("--resume", args.resume.as_deref())
            .output("--checkpoint", args.checkpoint.as_deref())
            .output("--metrics", args.metrics.as_deref())
            .per_rank(
                "--profile",
                args.profile.as_deref(),
                Distributed::processes(),
            )
            .output("--plot", args.plot.as_deref())
            // Continuing a run in place: the checkpoint is read before it is replaced, atomically.
            .allow("--resume", "--checkpoint"),
    )?;
    paths::inputs_exist(&[("--resume", &args.resume), ("--init", &args.init)])
        .map_err(Failure::usage)?;
    paths::outputs_writable(&[
        ("--checkpoint", &args.checkpoint),
        ("--plot", &args.plot),
        ("--metrics", &args.metrics),
        ("--profile", &args.profile),
    ])
    .map_err(Failure::usage)?;
    pipetrain::commands::plot::check_format(args.plot.as_deref())
        .map_err(|e| Failure::usage(cli_message(&e)))?;
    if let Some(path) = args.metrics.as_deref() {
        // A wrong format is refused before anything is built.
        pipetrain::trainer::Metrics::check_format(path).map_err(of_run)?;
    }
    // Under an MPI launcher: this process's share of the world (see `distributed`).
    let dist = crate::distributed::start(args)?;
    let leader = dist.as_ref().is_none_or(Distributed::is_leader);
    // One trace per process: `trace.json` → `trace.rank3.json`.
    let profile_path = match &dist {
        Some(d) => args.profile.as_deref().map(|p| d.per_rank(p)),
        None => args.profile.clone(),
    };
    let profile = profile_path
        .as_deref()
        .map(|path| {
            let warn = |w: &pipetrain::trainer::Warning| {
                eprintln!("warning: {}{}", cli_message(w.error()), w.consequence());
            };
            Profile::start(path, warn).map_err(of_run)
        })
        .transpose()?;
    let result = train(args, dist.as_ref());
    let result = match &dist {
        Some(d) => {
            let result = result.map_err(|f| {
                let message = d.name(&f.to_string());
                f.with_message(message)
            });
            let error = result.as_ref().err().map(ToString::to_string);
            if let Some(error) = &error {
                // Before MPI ends: once this process has ended, a peer whose failure ended it
                // ends too, and the launcher then ends every process at once.
                eprintln!("error: {error}");
            }
            d.finish(error.as_deref());
            result.map_err(Failure::printed)
        }
        None => result,
    };
    if let (Some(profile), Some(path)) = (profile, &profile_path) {
        // A trace that could not be written loses no training, but the run exits 1.
        let lost = Lost::default();
        let (slices, flows) = match profile.finish() {
            Ok(Some(counts)) => counts,
            Ok(None) => {
                lost.push(format!("--profile {}", path.display()));
                return result.map(|exit| crate::outcome::with_lost(exit, &lost));
            }
            Err(e) => {
                eprintln!("warning: {}; no trace written", cli_message(&e));
                lost.push(cli_message(&e));
                return result.map(|exit| crate::outcome::with_lost(exit, &lost));
            }
        };
        if result.is_ok() && leader {
            println!(
                "profile: {} ({slices} action slices, {flows} send→receive flows{})",
                path.display(),
                if dist.is_some() {
                    "; one file per rank"
                } else {
                    ""
                }
            );
        }
    }
    result
}

/// The settings every model trains with, checked once.
pub(crate) struct Settings<'a> {
    pub(crate) args: &'a TrainArgs,
    pub(crate) schedule: pipetrain::schedules::Schedule,
    pub(crate) remat: Remat,
    pub(crate) optimizer: OptimizerConfig,
    /// The optimizer, its settings and the base learning rate, for the banner.
    optimizer_name: String,
    lr_schedule: pipetrain::LrSchedule,
    model: ReferenceModel,
    data: Data,
    /// The first of `devices`: the model's init and the data.
    device: Device,
    /// Where the `--verify` reference trains: `--verify-device`, else the first of `devices`.
    verify_device: Device,
    /// `--device`: the workers' devices as the builder takes them.
    pub(crate) devices: Vec<Device>,
    pub(crate) ties: Vec<Tie>,
}

/// Checks the flags, opens the data, builds the model and trains it (this process's share of
/// it under MPI: `dist`).
fn train(args: &TrainArgs, dist: Option<&Distributed>) -> Result<Exit, Failure> {
    let chunks = args.virtual_stages.unwrap_or(2);
    let schedule = crate::schedule::of(args.schedule, chunks, args.plan.as_deref())?;
    let remat: Remat = args.remat();
    if args.batch == 0 {
        return Err(Failure::usage("--batch 0: must be at least 1"));
    }
    // The engine's batch rule and its remedy, asked before anything starts; worded in flags.
    // (A count of 0 is the builder's to refuse, with its own remedy.)
    if args.replicas > 0
        && args.micro_batches > 0
        && let Err(refused) = args.layout().check_batch(args.batch)
    {
        let fix = refused.remedy().map(|r| r.render(&crate::style::Flags));
        return Err(Failure::usage(format!(
            "--batch {} does not split into --replicas {} × --micro-batches {} micro-batches \
             of at least one row{}",
            args.batch,
            args.replicas,
            args.micro_batches,
            fix.map(|f| format!("; {f}")).unwrap_or_default()
        )));
    }
    if !(args.bucket_mb.is_finite() && args.bucket_mb > 0.0) {
        return Err(Failure::usage(format!(
            "--bucket-mb {}: must be a positive size in MiB",
            args.bucket_mb
        )));
    }
    if args.steps == 0 {
        return Err(Failure::usage("--steps 0: train at least one step"));
    }
    crate::conflicts::train(args)?;
    let (optimizer, optimizer_name) = crate::optimizer::of(args)?;
    let lr_schedule = crate::optimizer::schedule(args)?;
    let data = crate::data::open(args, args.batch)?;
    if let Some(d) = dist {
        // Every rank trains on the same contents, whatever the path says on each node.
        let fingerprint = pipetrain::trainer::fingerprint::fingerprint(&args.data);
        d.same_data(&fingerprint).map_err(Failure::of_build)?;
    }
    let model = crate::model::from_args(args, data.shapes()).map_err(Failure::usage)?;
    // This process's share of the world's workers (all of them without MPI), plus --verify's
    // single-device reference, which the leader holds.
    let share = dist.map_or(1.0, |d| {
        d.local().len() as f64 / args.layout().workers().max(1) as f64
    });
    let leader = dist.is_none_or(Distributed::is_leader);
    let copies = args.replicas as f64 * share + f64::from(u8::from(args.verify && leader));
    let slots = pipetrain::memory::optimizer_slots(&optimizer);
    crate::model::check_fits(&model, args.batch, slots, copies).map_err(Failure::usage)?;
    if let Some(path) = args.checkpoint.as_deref().filter(|_| leader) {
        // Its size is known now: a disk too small for it fails now, not after the run.
        let params = crate::footprint::Estimate::of(&model).params;
        let needed = pipetrain::trainer::disk::checkpoint_bytes(params, slots);
        pipetrain::trainer::disk::fits("--checkpoint", path, needed)
            .map_err(|e| Failure::usage(cli_message(&e)))?;
    }
    let devices = args
        .device
        .devices(args.matmul_precision)
        .map_err(Failure::usage)?;
    let device = devices[0].clone();
    // Rank 0's weights reach every process by broadcast, whatever each initialised.
    device.seed(dist.map_or(args.seed, |d| d.init_seed(args.seed)));
    let verify_device = match args.verify_device {
        Some(spec) => spec
            .device_of("--verify-device", args.matmul_precision)
            .map_err(Failure::usage)?,
        None => device.clone(),
    };
    let ties = crate::model::ties(&model, args.tie_embeddings).map_err(Failure::usage)?;
    let settings = Settings {
        args,
        schedule,
        remat,
        optimizer,
        optimizer_name,
        lr_schedule,
        model,
        data,
        device,
        verify_device,
        devices,
        ties,
    };
    // SIGINT/SIGTERM/SIGHUP/SIGUSR1: one process stops after the step it is in; under MPI
    // (`mpirun` forwards SIGUSR1 to every rank) the ranks agree at each step's end and stop
    // together.
    let stop = match dist {
        None => Stop::install(),
        Some(d) => Stop::install_for_rank(d.is_leader()),
    };
    let stop = Some(stop.map_err(of_run)?);
    let device = &settings.device;
    match model {
        ReferenceModel::Mlp(c) => train_with(&settings, c.init(device), stop, dist),
        ReferenceModel::ResNet(c) => train_with(&settings, c.init(device), stop, dist),
        ReferenceModel::UNet(c) => train_with(&settings, c.init(device), stop, dist),
        ReferenceModel::Gpt(c) => train_with(&settings, c.init(device), stop, dist),
        ReferenceModel::Llama { config, .. } => {
            let layers =
                pipetrain::trainer::hf::llama_layers(&config, args.init.as_deref(), device)
                    .map_err(of_run)?;
            train_with(&settings, layers, stop, dist)
        }
    }
}

/// The run's batches as the library's loop takes them: `--data`'s, shaped for the model and
/// cut to `--context-range`'s length.
struct Batches<'a> {
    s: &'a Settings<'a>,
}

impl Source for Batches<'_> {
    fn batch(&self, index: u64) -> pipetrain::Result<Batch> {
        let s = self.s;
        let batch = s.data.batch(&s.model, index, s.args.batch, &s.device)?;
        let cut = crate::model::cut_to_length(s.args, index, batch);
        cut.map_err(|reason| {
            pipetrain::Error::Run(pipetrain::RunError::Batch {
                index,
                data: None,
                reason,
            })
        })
    }

    fn position(&self, index: u64) -> String {
        self.s.data.position(index)
    }
}

/// The loop's settings from the flags.
fn trainer_settings(s: &Settings<'_>) -> TrainerSettings {
    let args = s.args;
    TrainerSettings {
        learning_rate: args.lr(),
        lr_schedule: s.lr_schedule,
        checkpoint: args.checkpoint.clone(),
        checkpoint_every: args.checkpoint_every,
        resume: args.resume.clone(),
        metrics: args.metrics.clone(),
        ..TrainerSettings::new(args.steps)
    }
}

/// Trains `layers` as the flags in `s` say, through the library's loop, printing what it
/// reports; then verifies, evaluates and plots.
fn train_with<L: Layer>(
    s: &Settings<'_>,
    layers: Vec<L>,
    stop: Option<Stop>,
    dist: Option<&Distributed>,
) -> Result<Exit, Failure> {
    let args = s.args;
    let leader = dist.is_none_or(Distributed::is_leader);
    let params: usize = layers.iter().map(|l| l.num_params()).sum();
    let layers = match &args.init {
        // A Hugging Face checkpoint: its layers are the model's already.
        Some(path) if pipetrain::trainer::hf::is_checkpoint_dir(path) => {
            if leader {
                println!("init: Hugging Face checkpoint {}", path.display());
            }
            layers
        }
        Some(path) => {
            let layers = checkpoints::init(path, layers, args, &s.model)?;
            if leader {
                println!("init: weights from {}", path.display());
            }
            layers
        }
        None => layers,
    };
    // Every process starts from rank 0's weights, whatever it initialised or loaded.
    let layers = match dist {
        Some(d) => d
            .broadcast_model(layers, s.optimizer.name())
            .map_err(of_run)?,
        None => layers,
    };
    // Under MPI, rank 0 gathers the trained model into a copy of this.
    let shared = dist.map(|d| Shared::new(d, layers.clone()));
    let mode = match args.end_to_end {
        true => Mode::EndToEnd,
        false => Mode::PerStep,
    };
    let reference = match args.verify && leader {
        true => Some(Reference::new(
            SingleDevice::new(layers.clone(), &s.verify_device, &s.optimizer)
                .with_guard(crate::guard::of(args))
                .with_precision(args.precision)
                .with_ties(&s.ties)?,
            // Under bf16 each micro-batch's weight gradients round to bf16 before they are
            // summed in fp32: the reference steps micro-batch by micro-batch too.
            (s.model.reference_chunks(args.layout()))
                .or(args.precision.casts().then_some(args.layout().parts()))
                .map(|c| c * args.accumulate.max(1)),
            mode,
        )),
        false => None,
    };
    let source = Batches { s };
    // A split by time or memory budget is measured on the run's first batch.
    let sample = source.batch(0).map_err(of_run)?;
    // On a GPU, the kernel cache before the first step: its line says whether that step
    // compiled or tuned anything (the cache grew) or the cache served it.
    let cache_before = (!args.device.all_cpu()).then(|| {
        pipetrain::engine::device::folder_size(&pipetrain::engine::device::kernel_cache_dir())
    });
    let mut pipeline = crate::setup::pipeline(s, layers, dist, &sample)?;
    let progress = Progress::of_process(args.steps, dist.is_some(), leader);
    banner(s, &pipeline, params, dist, &progress);
    // The side outputs that could not be written: the run then exits 1, its training done.
    let lost = Lost::default();
    let mut trainer = Trainer::new(&mut pipeline, &source, trainer_settings(s))
        .identity(checkpoints::identity(args, &s.model))
        .on_event(|event| report(event, &progress, args, &lost, cache_before));
    if let Some(stop) = stop {
        trainer = trainer.stop(stop);
    }
    if let Some(shared) = &shared {
        trainer = trainer.processes(shared);
    }
    if args.verify {
        trainer = trainer.verify(mode, reference);
    }
    // The test hook of `pipetrain::trainer::Drift`: no flag, no use in a real run.
    if let Ok(value) = std::env::var(DRIFT_VARIABLE) {
        let drift = Drift::parse(&value, args.replicas).map_err(Failure::usage)?;
        trainer = trainer.drift(drift);
    }
    let outcome = trainer.run().map_err(of_run)?;
    progress.finish();
    let title = format!(
        "pipetrain: {}, {} stages × {} replicas, {} lr {}, {}",
        pipetrain::commands::plot::short(&s.model.describe()),
        pipeline.stages(),
        pipeline.replicas(),
        pipetrain::commands::plot::short(&s.optimizer_name),
        args.lr(),
        s.lr_schedule
    );
    let curve = pipetrain::commands::plot::Curve::new(&title, &outcome.losses, &outcome.rates);
    let plot = args.plot.as_deref().map(|path| (path, curve));
    if let Some(signal) = outcome.stopped {
        // A graceful stop writes what the end writes: the checkpoint, the metrics, the
        // trace and the plot of the steps done.
        if leader {
            crate::outcome::draw(plot, None, &lost);
        }
        return Ok(stopped(signal, outcome.step, args, leader));
    }
    progress.println(&format!(
        "done: {} steps in {:.2}s, median {:.1} samples/s (first step excluded{})",
        args.steps - outcome.first_step,
        outcome.elapsed.as_secs_f64(),
        outcome.median_samples_per_sec,
        outcome
            .first_step_time
            .map(|t| format!(
                ": {:.2}s, building and, on a GPU, compiling and tuning kernels",
                t.as_secs_f64()
            ))
            .unwrap_or_default()
    ));
    if !leader {
        return Ok(Exit::Success);
    }
    // What follows is printed directly, after the relayed lines.
    progress.drain();
    let mut summary = Vec::new();
    if let Some(report) = &outcome.last {
        // Under MPI, rank 0's workers only.
        summary = summary::bubbles(report, pipeline.replicas());
    }
    if pipeline.replicas() > 1 && dist.is_none() {
        summary.extend(summary::optimizer_state(&pipeline, &crate::style::Flags));
    }
    for line in summary {
        println!("{line}");
    }
    let held_out = s.data.held_out(&s.model, args.batch, &s.device);
    let held_out = held_out.map_err(of_run)?;
    let exit = crate::outcome::verify_and_evaluate(
        &mut pipeline,
        outcome.gathered.as_deref(),
        outcome.reference,
        args.verify_tolerance,
        (held_out, s.model.is_language_model()),
        plot,
        &lost,
    )?;
    Ok(crate::outcome::with_lost(exit, &lost))
}

/// The run's opening lines: the model, the layout and the settings, then the data.
fn banner<L: Layer>(
    s: &Settings<'_>,
    pipeline: &pipetrain::Pipeline<L>,
    params: usize,
    dist: Option<&Distributed>,
    progress: &Progress,
) {
    let args = s.args;
    progress.println(&format!(
        "pipetrain: {} ({params} params), {} replicas × {} stages, {} micro-batches of {}, \
         {}, remat {}, {} backward, {}, lr schedule {}, {} threads/worker on {}",
        s.model.describe(),
        pipeline.replicas(),
        pipeline.stages(),
        args.micro_batches,
        args.layout().rows_per_part(args.batch),
        s.schedule,
        s.remat,
        args.backward.describe(args.weight_group),
        s.optimizer_name,
        s.lr_schedule,
        pipeline.threads_per_worker(),
        args.device,
    ));
    if let Some(d) = dist {
        progress.println(&d.describe());
    }
    if !pipetrain::engine::device::is_cpu(&s.device) {
        let precision =
            pipetrain::engine::device::matmul_precision(&s.device).unwrap_or(args.matmul_precision);
        progress.println(&format!(
            "gpu: f32 matmuls in {precision}, tensors between threads by {} copy",
            args.handoff
        ));
    }
    // On a CPU the GPU's settings change nothing; given, the banner says what reached the
    // workers and what a CPU does instead.
    let worker = pipeline.setup().workers().first();
    if let Some(w) = worker.filter(|w| {
        pipetrain::engine::device::is_cpu(&w.device)
            && (w.matmul_precision != Default::default() || w.handoff != Default::default())
    }) {
        progress.println(&format!(
            "gpu settings on a cpu: f32 matmuls in {} (a CPU multiplies in IEEE fp32), tensors \
             between threads by {} copy (a CPU passes handles)",
            w.matmul_precision, w.handoff
        ));
    }
    if args.precision.casts() {
        progress.println(&format!(
            "precision: {} compute, fp32 master weights, gradients, all-reduce and optimizer",
            args.precision
        ));
    }
    progress.println(&format!("data: {}", s.data.describe()));
    if let Some(r) = args.context_range {
        progress.println(&format!(
            "  sequence length per batch drawn from {r} (batch 0: {})",
            r.max
        ));
    }
    if args.accumulate > 1 || args.zero > 0 {
        progress.println(&format!(
            "  accumulate {} batches per optimizer step; ZeRO stage {}",
            args.accumulate, args.zero
        ));
    }
}

/// Prints what the loop reports: resumes, step lines (or the bar), checkpoints, warnings, the
/// stage split after the first step, and the signal test hook's notes.
fn report<L: Layer>(
    event: Event<'_, L>,
    progress: &Progress,
    args: &TrainArgs,
    lost: &Lost,
    cache_before: Option<(u64, u64)>,
) {
    match event {
        Event::Resumed {
            path,
            step,
            steps,
            position,
        } => progress.println_everywhere(&format!(
            "resumed: {} at step {step} of {steps}{}",
            path.display(),
            position
                .map(|p| format!(" (next data: {p})"))
                .unwrap_or_default()
        )),
        Event::FirstStep { pipeline } => {
            let p = pipeline.partition();
            progress.println(&format!("stage split: {p} (balance {:?})", p.balance()));
            if let Some(before) = cache_before {
                progress.println(&pipetrain::trainer::kernel_cache_line(before));
            }
            crate::schedule::warn_fused(pipeline, p, args.precision);
        }
        Event::Step(record) => progress.step(
            &record.line(args.clip_grad_norm.is_some()),
            record.totals.loss,
            record.samples_per_sec,
        ),
        Event::Checkpoint { path, step } => {
            progress.println(&format!("checkpoint: {} (step {step})", path.display()));
        }
        Event::Warning(w) => {
            eprintln!("warning: {}{}", cli_message(w.error()), w.consequence());
            lost.push(cli_message(w.error()));
        }
        Event::Held { step, path } => {
            eprintln!(
                "test hook: step {step} held until {} exists",
                path.display()
            );
        }
        Event::SignalWhileHeld { step, signal } => {
            eprintln!("test hook: {signal} arrived during step {step}");
        }
    }
}

/// Ends a run that `signal` stopped after `step` optimizer steps: says on stderr what was
/// saved (the checkpoint just written, the metrics flushed every step; the trace is written
/// on the way out) and returns its exit code.
fn stopped(signal: Signal, step: u64, args: &TrainArgs, leader: bool) -> Exit {
    let mut saved = Vec::new();
    if let Some(path) = &args.checkpoint {
        saved.push(format!("checkpoint {} (step {step})", path.display()));
    }
    if let Some(path) = &args.metrics {
        saved.push(format!("metrics {}", path.display()));
    }
    if let Some(path) = &args.profile {
        saved.push(format!("trace {}", path.display()));
    }
    if let Some(path) = &args.plot {
        saved.push(format!("plot {}", path.display()));
    }
    let saved = match saved.is_empty() {
        true => "nothing (no --checkpoint, --metrics or --profile)".to_string(),
        false => saved.join(", "),
    };
    // Under MPI every rank stopped after the same step; the leader, which wrote the outputs,
    // says so.
    if leader {
        eprintln!(
            "{signal}: stopped after step {step} of {}; saved: {saved}",
            args.steps
        );
    }
    match signal {
        Signal::Interrupt => Exit::Interrupted,
        Signal::Terminate => Exit::Terminated,
        Signal::Hangup => Exit::HungUp,
        Signal::User1 => Exit::User1,
    }
}
