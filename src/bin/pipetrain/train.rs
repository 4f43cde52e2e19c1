//! `pipetrain train`: train a model through the pipeline, on synthetic or loaded data.
//!
//! [`run`] checks the flags, opens the data, sizes the model from both, and hands the model's
//! layers to [`train_with`], the one training loop, generic over the layer type. Around the
//! loop: `--profile` (a chrome trace), `--metrics` (a row per optimizer step), `--plot` (the
//! loss curve), `--verify` (a single-device copy trained on the same batches) and, at the end,
//! the held-out accuracy or perplexity.

use std::time::Instant;

use burn::prelude::*;
use pipetrain::engine::SingleDevice;
use pipetrain::{Batch, Layer, OptimizerConfig, Remat, Tie};

use crate::args::TrainArgs;
use crate::checkpoints;
use crate::data::Data;
use crate::distributed::Distributed;
use crate::exit::Exit;
use crate::failure::Failure;
use crate::metrics::{Metrics, Row};
use crate::model::Model;
use crate::paths;
use crate::profile::Profile;
use crate::progress::Progress;
use crate::reference::Reference;
use crate::stop::Stop;
use crate::summary;
use crate::totals::StepTotals;

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
    let data = data_file(args);
    paths::distinct(
        &[
            ("--data", data.as_deref()),
            ("--config", args.config.as_deref()),
            ("--plan", args.plan.as_deref()),
            ("--init", args.init.as_deref()),
            ("--resume", args.resume.as_deref()),
        ],
        &[
            ("--checkpoint", args.checkpoint.as_deref()),
            ("--metrics", args.metrics.as_deref()),
            ("--profile", args.profile.as_deref()),
            ("--plot", args.plot.as_deref()),
        ],
        // Continuing a run in place: the checkpoint is read before it is replaced, atomically.
        &[("--resume", "--checkpoint")],
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
    crate::plot::check_format(args.plot.as_deref()).map_err(Failure::usage)?;
    // Under an MPI launcher: this process's share of the world (see `distributed`).
    let stages = args
        .balance
        .as_ref()
        .map_or(args.stages.unwrap_or(2), Vec::len);
    let dist = Distributed::start(args, stages)?;
    let leader = dist.as_ref().is_none_or(Distributed::is_leader);
    let mut metrics = match (leader, &args.metrics) {
        (true, Some(path)) => Some(Metrics::create(path, args.resume.is_some())?),
        _ => None,
    };
    // One trace per process: `trace.json` → `trace.rank3.json`.
    let profile_path = match &dist {
        Some(d) => args.profile.as_deref().map(|p| d.per_rank(p)),
        None => args.profile.clone(),
    };
    let profile = profile_path.as_deref().map(Profile::start).transpose()?;
    let result = train(args, &mut metrics, dist.as_ref());
    if let Some(warning) = metrics.and_then(Metrics::finish) {
        eprintln!("{warning}");
    }
    let result = match &dist {
        Some(d) => {
            let result = result.map_err(|f| {
                let message = d.name(&f.to_string());
                f.with_message(message)
            });
            d.finish(result.as_ref().err().map(ToString::to_string).as_deref());
            result
        }
        None => result,
    };
    if let (Some(profile), Some(path)) = (profile, &profile_path) {
        // A trace that could not be written loses no training: a warning, not a failure.
        let (slices, flows) = match profile.finish() {
            Ok(Some(counts)) => counts,
            Ok(None) => return result,
            Err(e) => {
                eprintln!("warning: {e}; no trace written");
                return result;
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

/// The file `--data` reads (`tensors:F`, `text:F`), if it names one.
fn data_file(args: &TrainArgs) -> Option<std::path::PathBuf> {
    match args.data.parse() {
        Ok(pipetrain_data::DataSpec::Tensors(f) | pipetrain_data::DataSpec::Text(f)) => Some(f),
        _ => None,
    }
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
    model: Model,
    data: Data,
    /// The first of `devices`: the model's init and the data.
    device: Device,
    /// Where the `--verify` reference trains: `--verify-device`, else the first of `devices`.
    verify_device: Device,
    /// `--device`: the workers' devices as the builder takes them.
    pub(crate) devices: Vec<Device>,
    pub(crate) ties: Vec<Tie>,
    /// SIGINT/SIGTERM, in a one-process run.
    stop: Option<Stop>,
}

/// Checks the flags, opens the data, builds the model and trains it (this process's share of
/// it under MPI: `dist`).
fn train(
    args: &TrainArgs,
    metrics: &mut Option<Metrics>,
    dist: Option<&Distributed>,
) -> Result<Exit, Failure> {
    let schedule = crate::schedule::of(args.schedule, args.virtual_stages, args.plan.as_deref())?;
    let remat: Remat = args.remat();
    if args.batch == 0 {
        return Err(Failure::usage("--batch 0: must be at least 1"));
    }
    let parts = args.micro_batches * args.replicas;
    if args.batch < parts {
        return Err(Failure::usage(format!(
            "--batch {} does not split into --replicas {} × --micro-batches {} micro-batches \
             of at least one row; use a batch of at least {parts} rows or fewer micro-batches",
            args.batch, args.replicas, args.micro_batches
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
    let data = Data::open(args, args.batch)?;
    let model = Model::from_args(args, data.shapes()).map_err(Failure::usage)?;
    // This process's share of the world's workers (all of them without MPI), plus --verify's
    // single-device reference, which the leader holds.
    let stages = args
        .balance
        .as_ref()
        .map_or(args.stages.unwrap_or(2), Vec::len);
    let share = dist.map_or(1.0, |d| {
        d.local().len() as f64 / (args.replicas * stages).max(1) as f64
    });
    let leader = dist.is_none_or(Distributed::is_leader);
    let copies = args.replicas as f64 * share + f64::from(u8::from(args.verify && leader));
    let slots = pipetrain::memory::optimizer_slots(&optimizer);
    model
        .check_fits(args.batch, slots, copies)
        .map_err(Failure::usage)?;
    let devices = args.device.devices().map_err(Failure::usage)?;
    let device = devices[0].clone();
    // Rank 0's weights reach every process by broadcast, whatever each initialised.
    device.seed(dist.map_or(args.seed, |d| d.init_seed(args.seed)));
    let verify_device = match args.verify_device {
        Some(spec) => spec.device().map_err(Failure::usage)?,
        None => device.clone(),
    };
    let ties = model.ties(args.tie_embeddings).map_err(Failure::usage)?;
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
        stop: dist.is_none().then(Stop::install).transpose()?,
    };
    match model {
        Model::Mlp(c) => train_with(&settings, c.init(&settings.device), metrics, dist),
        Model::ResNet(c) => train_with(&settings, c.init(&settings.device), metrics, dist),
        Model::UNet(c) => train_with(&settings, c.init(&settings.device), metrics, dist),
        Model::Gpt(c) => train_with(&settings, c.init(&settings.device), metrics, dist),
    }
}

/// The training loop, for any layer type.
fn train_with<L: Layer>(
    s: &Settings<'_>,
    layers: Vec<L>,
    metrics: &mut Option<Metrics>,
    dist: Option<&Distributed>,
) -> Result<Exit, Failure> {
    let args = s.args;
    let leader = dist.is_none_or(Distributed::is_leader);
    let params: usize = layers.iter().map(|l| l.num_params()).sum();
    let layers = match &args.init {
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
        Some(d) => d.broadcast_model(layers, s.optimizer.name())?,
        None => layers,
    };
    // Under MPI, rank 0 gathers the trained model into a copy of this at the end.
    let template = dist.map(|_| layers.clone());
    let k = args.accumulate.max(1);
    let mode = match args.end_to_end {
        true => crate::reference::Mode::EndToEnd,
        false => crate::reference::Mode::PerStep,
    };
    let mut reference = match args.verify && leader {
        true => Some(Reference::new(
            SingleDevice::new(layers.clone(), &s.verify_device, &s.optimizer)
                .with_guard(crate::guard::of(args))
                .with_ties(&s.ties)?,
            (s.model.reference_chunks(args.replicas, args.micro_batches)).map(|c| c * k),
            mode,
        )),
        false => None,
    };

    // A split by time or memory budget is measured on the run's first batch.
    let sample = s.data.batch(&s.model, 0, args.batch, &s.device)?;
    let sample = crate::model::cut_to_length(args, 0, sample)?;
    let mut pipeline = crate::setup::pipeline(s, layers, dist, &sample)?;
    let run = checkpoints::RunIdentity::of(args, &s.model);
    let first_step = match &args.resume {
        Some(path) => {
            let read = dist.map(|d| d.broadcast_checkpoint(path)).transpose()?;
            let (step, saved) = checkpoints::resume(&mut pipeline, path, read, &run, args.steps)?;
            let expected = s.data.position(step * k as u64);
            if saved.as_ref().is_some_and(|p| *p != expected) {
                return Err(Failure::usage(format!(
                    "--resume {}: the checkpoint's next data is {}, this data gives {expected} \
                     at step {step}; the dataset changed",
                    path.display(),
                    saved.unwrap_or_default()
                )));
            }
            step
        }
        None => 0,
    };

    if let Some(m) = metrics.as_mut() {
        // A resumed run's rows must fit the earlier run's columns: refused before any step.
        m.check_columns(pipeline.stages())?;
    }
    let progress = Progress::of_process(args.steps, dist.is_some(), leader);
    progress.println(&format!(
        "pipetrain: {} ({params} params), {} replicas × {} stages, {} micro-batches of {}, \
         {}, remat {}, {} backward, {}, lr schedule {}, {} threads/worker on {}",
        s.model.describe(),
        pipeline.replicas(),
        pipeline.stages(),
        args.micro_batches,
        args.batch / (args.micro_batches * args.replicas).max(1),
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
    let started = Instant::now();
    let mut throughput = Vec::new();
    let (mut losses, mut rates) = (Vec::new(), Vec::new());
    let (mut last, mut skipped) = (None, 0);
    // The step of the last checkpoint written.
    let mut saved_step = None;
    for step in first_step..args.steps {
        if let Some(stop) = &s.stop {
            stop.hold(step + 1);
        }
        let batches: Vec<Batch> = (0..k as u64)
            .map(|j| {
                let index = step * k as u64 + j;
                let batch = s.data.batch(&s.model, index, args.batch, &s.device)?;
                crate::model::cut_to_length(args, index, batch)
            })
            .collect::<Result<_, _>>()?;
        let lr = s.lr_schedule.at(args.lr(), step);
        pipeline
            .set_learning_rate(lr)
            .map_err(|e| Failure::usage(format!("--lr-schedule at step {step}: {e}")))?;
        let mut totals = StepTotals::default();
        let mut report = None;
        for batch in &batches {
            let result = pipeline.train_step(batch);
            let intact = result
                .as_ref()
                .err()
                .is_some_and(crate::guard::weights_intact);
            let mut r = match crate::guard::step_result(step + 1, result) {
                Ok(r) => r,
                Err(failure) if intact => {
                    let last = LastGood {
                        step,
                        first_step,
                        saved: saved_step,
                        position: s.data.position(step * k as u64),
                    };
                    return Err(last.save(&pipeline, dist, args, &run, failure, &progress));
                }
                Err(failure) => return Err(failure),
            };
            if let Some(d) = dist {
                // Each process has its own last stages' share of the loss.
                r.loss = d.total_loss(r.loss)?;
            }
            totals.add(&r, k);
            report = Some(r);
        }
        let report = report.expect("at least one batch per step");
        if step == first_step {
            let p = pipeline.partition();
            progress.println(&format!("stage split: {p} (balance {:?})", p.balance()));
            crate::schedule::warn_fused(&pipeline, p);
        }
        // The pipeline after this step, for the per-step comparison and the replica check:
        // under MPI every process takes part in gathering it on rank 0 (an end-to-end check of
        // a multi-process run compares the gathered model once, at the end).
        let after = match (args.verify, dist, &template) {
            (false, ..) => None,
            (true, Some(d), Some(template)) => match mode {
                crate::reference::Mode::PerStep => d
                    .gather_model(&pipeline, template.clone())?
                    .map(|m| crate::verify::after_gathered(m, pipeline.replicas())),
                crate::reference::Mode::EndToEnd => None,
            },
            (true, ..) => Some(crate::verify::after_step(&pipeline)),
        };
        if let Some(r) = reference.as_mut() {
            r.step(batches, lr, after, step + 1)?;
        }
        let sps = totals.samples as f64 / totals.wall.as_secs_f64().max(1e-12);
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
        let line = format!(
            "step {:>4}/{}  loss {:.6}  {:>8.1} samples/s  bubble {:>5.1}%{overlap}{}",
            step + 1,
            args.steps,
            totals.loss,
            sps,
            100.0 * report.bubble_fraction(),
            totals.describe_guard(args.clip_grad_norm.is_some())
        );
        skipped += u64::from(totals.skipped);
        progress.step(&line, totals.loss, sps);
        if let Some(m) = metrics.as_mut() {
            m.write(&Row {
                step: step + 1,
                loss: totals.loss,
                lr,
                samples_per_sec: sps,
                wall_ms: totals.wall.as_secs_f64() * 1e3,
                bubble: totals.bubble(),
                all_reduce_ms: totals.all_reduce.as_secs_f64() * 1e3,
                grad_norm: totals.grad_norm.unwrap_or(f64::NAN),
                skipped,
                stages: totals
                    .stages
                    .iter()
                    .map(|(c, i)| (c.as_secs_f64() * 1e3, i.as_secs_f64() * 1e3))
                    .collect(),
            })?;
        }
        if step > first_step || args.steps == first_step + 1 {
            throughput.push(sps);
        }
        losses.push(totals.loss);
        rates.push(lr);
        last = Some(report);
        // A signal stops the run here, after a whole step, saving it first.
        let stopping = s.stop.as_ref().and_then(Stop::requested);
        let every = args.checkpoint_every;
        let due = step + 1 == args.steps || (every > 0 && (step + 1) % every == 0);
        if let Some(path) = args
            .checkpoint
            .as_ref()
            .filter(|_| due || stopping.is_some())
        {
            let position = s.data.position((step + 1) * k as u64);
            checkpoints::save(&pipeline, dist, path, &run, position)?;
            saved_step = Some(step + 1);
            progress.println(&format!(
                "checkpoint: {} (step {})",
                path.display(),
                step + 1
            ));
        }
        if let Some(exit) = stopping {
            progress.finish();
            return Ok(crate::stop::stopped(exit, step + 1, args));
        }
        if let Some(stop) = &s.stop {
            // A step completed: a signal now lets the next one finish and saves it.
            stop.graceful();
        }
    }
    progress.finish();
    throughput.sort_by(f64::total_cmp);
    let median = throughput[throughput.len() / 2];
    progress.println(&format!(
        "done: {} steps in {:.2}s, median {:.1} samples/s (first step excluded)",
        args.steps - first_step,
        started.elapsed().as_secs_f64(),
        median
    ));
    // Under MPI: the whole trained model on rank 0 (every process sends its stages).
    let gathered = match (dist, template) {
        (Some(d), Some(template)) => d.gather_model(&pipeline, template)?,
        _ => None,
    };
    if !leader {
        return Ok(Exit::Success);
    }
    if let Some(report) = &last {
        // Under MPI, rank 0's workers only.
        summary::print_bubbles(report, pipeline.replicas());
    }
    if pipeline.replicas() > 1 && dist.is_none() {
        summary::print_optimizer_state(&pipeline);
    }
    let title = format!(
        "pipetrain: {}, {} stages × {} replicas, {} lr {}, {}",
        crate::plot::short(&s.model.describe()),
        pipeline.stages(),
        pipeline.replicas(),
        crate::plot::short(&s.optimizer_name),
        args.lr(),
        s.lr_schedule
    );
    let curve = crate::plot::Curve::new(&title, &losses, &rates);
    let plot = args.plot.as_deref().map(|path| (path, curve));
    let held_out = s.data.held_out(&s.model, args.batch, &s.device)?;
    crate::outcome::verify_and_evaluate(
        &mut pipeline,
        gathered.as_deref(),
        reference,
        args.verify_tolerance,
        (held_out, s.model.is_language_model()),
        plot,
    )
}

/// The last good step of a run whose next step stopped before any stage applied it.
struct LastGood {
    /// Optimizer steps done.
    step: u64,
    /// The step the run started from.
    first_step: u64,
    /// The step of the last checkpoint written.
    saved: Option<u64>,
    /// The data position after `step`.
    position: String,
}

impl LastGood {
    /// `failure` with what became of `--checkpoint`: the weights are intact, so it is written
    /// for the last good step (in a one-process run) and the message says so.
    fn save<L: Layer>(
        self,
        pipeline: &pipetrain::Pipeline<L>,
        dist: Option<&Distributed>,
        args: &TrainArgs,
        run: &checkpoints::RunIdentity,
        failure: Failure,
        progress: &Progress,
    ) -> Failure {
        let Some(path) = &args.checkpoint else {
            return failure;
        };
        let shown = path.display();
        let step = self.step;
        let note = if self.saved == Some(step) {
            format!("--checkpoint {shown} holds step {step}, the last good one")
        } else if step == self.first_step {
            format!("no step completed, so --checkpoint {shown} was not written")
        } else if dist.is_some() {
            format!("--checkpoint {shown} was not written (a multi-process run)")
        } else {
            match checkpoints::save(pipeline, None, path, run, self.position) {
                Ok(()) => {
                    progress.println(&format!("checkpoint: {shown} (step {step})"));
                    format!(
                        "no stage applied it, so --checkpoint {shown} was written with the \
                         weights of step {step}, the last good one"
                    )
                }
                Err(e) => format!("--checkpoint {shown} of step {step} failed too: {e}"),
            }
        };
        let message = format!("{failure}\n{note}");
        failure.with_message(message)
    }
}
