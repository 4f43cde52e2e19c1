//! Flags that contradict each other, or that a command would silently ignore: refused before
//! anything runs, naming both sides and a remedy.

use std::path::Path;

use crate::args::TrainArgs;
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
    ignored(args)?;
    if args.resume.is_some() && args.verify {
        return Err(Failure::usage(
            "--verify compares against single-device training from step 0, so it cannot \
             follow --resume; verify the run that wrote the checkpoint instead",
        ));
    }
    Ok(())
}

/// `pipetrain eval`'s conflicts: `--init` with `--resume`, and the flags of training outputs,
/// which eval never writes.
///
/// # Errors
/// A usage failure naming the flag.
pub fn eval(args: &TrainArgs) -> Result<(), Failure> {
    if let (Some(init), Some(resume)) = (&args.init, &args.resume) {
        return Err(both(init, resume));
    }
    if args.held_out == Some(0.0) {
        return Err(Failure::usage(
            "--held-out 0 holds nothing out, so eval would have nothing to evaluate; give a \
             fraction such as 0.1",
        ));
    }
    let outputs = [
        ("--checkpoint", args.checkpoint.is_some()),
        ("--metrics", args.metrics.is_some()),
        ("--plot", args.plot.is_some()),
        ("--profile", args.profile.is_some()),
        ("--verify", args.verify),
    ];
    if let Some((flag, _)) = outputs.iter().find(|(_, given)| *given) {
        return Err(Failure::usage(format!(
            "{flag} is a flag of `pipetrain train`: eval trains nothing, so it would be ignored; \
             drop it"
        )));
    }
    Ok(())
}

/// Flags that would do nothing in the combination given: `--virtual-stages` without an
/// interleaved schedule (any value, its default 2 included), `--checkpoint-every` without
/// `--checkpoint`, `--weight-group` with the fused backward or above `--micro-batches`.
///
/// # Errors
/// A usage failure naming the flag, why it does nothing, and what to do.
fn ignored(args: &TrainArgs) -> Result<(), Failure> {
    use crate::backward::BackwardArg;
    use crate::schedule::ScheduleArg;
    let interleaved = matches!(args.schedule, ScheduleArg::Interleaved) || args.plan.is_some();
    if let Some(v) = args.virtual_stages.filter(|_| !interleaved) {
        return Err(Failure::usage(format!(
            "--virtual-stages {v} applies to --schedule interleaved only; this run's schedule \
             has one chunk per worker: drop it, or add --schedule interleaved"
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
