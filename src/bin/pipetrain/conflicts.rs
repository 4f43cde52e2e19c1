//! Flags that contradict each other, or that a command would silently ignore: refused before
//! anything runs, naming both sides and a remedy.
//!
//! One rule for a flag that does nothing in the combination given (issue 38): it is a usage
//! error naming the flag, its value, what it applies to and how to make it apply, never a
//! warning and never silence. Only flags given (on the command line or in `--config`) count: a
//! default never conflicts.

use std::path::Path;

use clap::ValueEnum;
use pipetrain::commands::plan::short;
use pipetrain::commands::reads::Reader;

use crate::args::{ModelKind, TrainArgs};
use crate::failure::Failure;

/// `pipetrain train`'s conflicts: `--init` with `--resume` (one would silently win), `--verify`
/// after `--resume`.
///
/// # Errors
/// A usage failure naming the flags.
pub fn train(args: &TrainArgs) -> Result<(), Failure> {
    if let (Some(init), Some(resume)) = (&args.init, &args.resume) {
        return Err(both(init, resume));
    }
    if args.keep_last && args.accumulate > 1 {
        return Err(Failure::usage(format!(
            "--keep-last with --accumulate {}: a short batch would weigh as much as a full one \
             in the accumulated step; drop one of them",
            args.accumulate
        )));
    }
    if let Some(gemm) = args.gemm
        && args.device.all_cpu()
    {
        return Err(Failure::usage(format!(
            "--gemm {gemm} chooses the library of a GPU's dense products, but --device {} is \
             a CPU, where every product is burn's matmul: drop --gemm, or train on a GPU \
             (--device cuda:0)",
            args.device
        )));
    }
    ignored(args)?;
    unused_model_flags(args)?;
    unused_by_the_lr_schedule(args)?;
    rename_without_init(args)?;
    if args.given("verify_tolerance") && !args.verify && !args.no_verify {
        return Err(Failure::usage(format!(
            "--verify-tolerance {} is the largest difference --verify accepts, but --verify is \
             not given: add --verify, or drop --verify-tolerance",
            short(args.verify_tolerance)
        )));
    }
    if args.resume.is_some() && args.verify {
        return Err(Failure::usage(
            "--verify compares against single-device training from step 0, so it cannot \
             follow --resume; verify the run that wrote the checkpoint instead",
        ));
    }
    Ok(())
}

/// `pipetrain eval`'s conflicts: a flag eval would not read (the library's one rule,
/// [`pipetrain::commands::reads`]), `--init` with `--resume`.
///
/// # Errors
/// A usage failure naming the flag.
pub fn eval(args: &TrainArgs) -> Result<(), Failure> {
    unread(args, Reader::Eval)?;
    if let (Some(init), Some(resume)) = (&args.init, &args.resume) {
        return Err(both(init, resume));
    }
    if args.held_out == Some(0.0) {
        return Err(Failure::usage(
            "--held-out 0 holds nothing out, so eval would have nothing to evaluate; give a \
             fraction such as 0.1",
        ));
    }
    unused_model_flags(args)?;
    rename_without_init(args)
}

/// `pipetrain tune`'s conflicts: a flag tune would not read (the library's one rule, with
/// `apply` when `--apply FILE` is given, whose file carries the training settings), the flags
/// of another model than `--model`'s, and a precision other than fp32 (tune models fp32
/// runs).
///
/// # Errors
/// A usage failure naming the flag.
pub fn tune(args: &TrainArgs, apply: bool) -> Result<(), Failure> {
    unread(args, Reader::Tune { apply })?;
    unused_model_flags(args)?;
    // tune's cost tables, simulator and memory model are fp32's: a bf16 tune would rank fp32
    // runs under a bf16 name.
    if args.precision.casts() {
        return Err(Failure::usage(format!(
            "--precision {}: `pipetrain tune` measures and models fp32 runs (its cost tables and \
             memory model); tune without --precision, then train the winner with --precision {}",
            args.precision, args.precision
        )));
    }
    Ok(())
}

/// A flag given that `reader` would not read.
fn unread(args: &TrainArgs, reader: Reader) -> Result<(), Failure> {
    let given = args.given_as_typed();
    let given: Vec<(&str, &str)> = given.iter().map(|(k, s)| (*k, s.as_str())).collect();
    pipetrain::commands::reads::check(reader, &given).map_err(Failure::of_build)
}

/// A flag given that sizes another model than `--model`'s (`--d-model` with the MLP).
/// `--context-range` and `--tie-embeddings`, GPT's too, are refused with other models where
/// they are read.
///
/// # Errors
/// A usage failure naming the flag, its value, the models it sizes and the remedy.
fn unused_model_flags(args: &TrainArgs) -> Result<(), Failure> {
    use ModelKind::{Gpt, Llama, Mlp, Resnet, Unet};
    let flags: [(&str, usize, &[ModelKind]); 14] = [
        ("width", args.width, &[Mlp]),
        ("hidden_layers", args.hidden_layers, &[Mlp]),
        ("classes", args.classes, &[Mlp, Resnet, Unet]),
        ("channels", args.channels, &[Resnet, Unet]),
        ("blocks", args.blocks, &[Resnet]),
        ("image", args.image, &[Resnet, Unet]),
        ("depth", args.depth, &[Unet]),
        ("vocab", args.vocab, &[Gpt, Llama]),
        ("context", args.context, &[Gpt, Llama]),
        ("d_model", args.d_model, &[Gpt, Llama]),
        ("heads", args.heads, &[Gpt, Llama]),
        ("layers", args.layers, &[Gpt, Llama]),
        ("kv_heads", args.kv_heads.unwrap_or(0), &[Llama]),
        ("intermediate", args.intermediate.unwrap_or(0), &[Llama]),
    ];
    // A Hugging Face checkpoint given to --init is a Llama, whatever --model's default says
    // (`crate::model::hf_init` refuses the flags that would size another one).
    let model = match args.init.as_deref() {
        Some(p) if pipetrain::trainer::hf::is_checkpoint_dir(p) => Llama,
        _ => args.model,
    };
    let name = |m: &ModelKind| {
        let name = m
            .to_possible_value()
            .map_or("?".into(), |v| v.get_name().to_string());
        format!("--model {name}")
    };
    let unused = flags
        .iter()
        .find(|(id, _, models)| args.given(id) && !models.contains(&model));
    match unused {
        Some((id, value, models)) => {
            let flag = format!("--{}", id.replace('_', "-"));
            let models: Vec<String> = models.iter().map(name).collect();
            let models = models.join(" or ");
            Err(Failure::usage(format!(
                "{flag} {value} sizes {models} only; this run's model is {}, which it would not \
                 change: drop {flag}, or give {models}",
                name(&model)
            )))
        }
        None => Ok(()),
    }
}

/// `--min-lr` without a schedule that decays to it, `--lr-step-size` or `--lr-gamma` without
/// `--lr-schedule step`.
///
/// # Errors
/// A usage failure naming the flag, its value and the schedules it applies to.
fn unused_by_the_lr_schedule(args: &TrainArgs) -> Result<(), Failure> {
    use crate::args::ScheduleKindArg as Lr;
    let schedule = args
        .lr_schedule
        .to_possible_value()
        .map_or("?".into(), |v| v.get_name().to_string());
    let decays = matches!(args.lr_schedule, Lr::Cosine | Lr::Linear);
    let steps = matches!(args.lr_schedule, Lr::Step);
    let unused = [
        ("min_lr", short(args.min_lr), decays, "cosine or linear"),
        ("lr_step_size", args.lr_step_size.to_string(), steps, "step"),
        ("lr_gamma", short(args.lr_gamma), steps, "step"),
    ];
    match unused
        .iter()
        .find(|(id, _, applies, _)| args.given(id) && !applies)
    {
        Some((id, value, _, schedules)) => {
            let flag = format!("--{}", id.replace('_', "-"));
            Err(Failure::usage(format!(
                "{flag} {value} applies to --lr-schedule {schedules} only; this run's schedule \
                 is {schedule}: drop {flag}, or give --lr-schedule {}",
                schedules.split(' ').next().unwrap_or(schedules)
            )))
        }
        None => Ok(()),
    }
}

/// `--rename` without `--init`, whose file it renames.
///
/// # Errors
/// A usage failure naming the rule and `--init`.
fn rename_without_init(args: &TrainArgs) -> Result<(), Failure> {
    match args.rename.first().filter(|_| args.init.is_none()) {
        Some((from, to)) => Err(Failure::usage(format!(
            "--rename {from}={to} rewrites the tensor names of an --init file, but no --init \
             is given: add --init FILE, or drop --rename"
        ))),
        None => Ok(()),
    }
}

/// Flags that would do nothing in the combination given: `--virtual-stages` without an
/// interleaved, interleaved zero bubble or looped BFS schedule (any value, its default 2
/// included), `--checkpoint-every` without
/// `--checkpoint`, `--weight-group` with the fused backward or above `--micro-batches`.
///
/// # Errors
/// A usage failure naming the flag, why it does nothing, and what to do.
fn ignored(args: &TrainArgs) -> Result<(), Failure> {
    use crate::backward::BackwardArg;
    use crate::schedule::ScheduleArg;
    if let (Some(v), Some(plan)) = (args.virtual_stages, &args.plan) {
        return Err(Failure::usage(format!(
            "--virtual-stages {v}: the --plan file {} gives its own chunks per rank, so it would \
             change nothing; drop --virtual-stages",
            plan.display()
        )));
    }
    let looped = matches!(
        args.schedule,
        ScheduleArg::Interleaved | ScheduleArg::LoopedBfs | ScheduleArg::InterleavedZb
    );
    if let Some(v) = args.virtual_stages.filter(|_| !looped) {
        return Err(Failure::usage(format!(
            "--virtual-stages {v} applies to --schedule interleaved, interleaved-zb and looped-bfs \
             only; this run's schedule has one chunk per worker: drop it, or add --schedule \
             interleaved"
        )));
    }
    if args.checkpoint_every > 0 && args.checkpoint.is_none() {
        return Err(Failure::usage(format!(
            "--checkpoint-every {} saves --checkpoint FILE every N steps, but no --checkpoint \
             is given: add --checkpoint FILE, or drop --checkpoint-every",
            args.checkpoint_every
        )));
    }
    if args.weight_group > 0 && matches!(args.backward, BackwardArg::Fused) {
        return Err(Failure::usage(format!(
            "--weight-group {} groups the weight gradients of --backward split; the fused \
             backward computes them per micro-batch: drop one of them",
            args.weight_group
        )));
    }
    if args.weight_group > args.micro_batches {
        return Err(Failure::usage(format!(
            "--weight-group {} is above --micro-batches {}: a group holds at most a step's \
             micro-batches; give at most {} (or 0 for all of them)",
            args.weight_group, args.micro_batches, args.micro_batches
        )));
    }
    Ok(())
}

fn both(init: &Path, resume: &Path) -> Failure {
    Failure::usage(format!(
        "--init {} and --resume {} both give the starting weights; give one: --resume to \
         continue a run (weights, optimizer state, step), --init to start a new one from weights",
        init.display(),
        resume.display()
    ))
}
