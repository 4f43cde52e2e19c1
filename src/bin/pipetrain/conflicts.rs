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

fn both(init: &Path, resume: &Path) -> Failure {
    Failure::usage(format!(
        "--init {} and --resume {} both give the starting weights; give one: --resume to \
         continue a run (weights, optimizer state, step), --init to start a new one from weights",
        init.display(),
        resume.display()
    ))
}
