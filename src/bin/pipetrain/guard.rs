//! `--clip-grad-norm` and `--skip-nonfinite`: the pipeline's gradient guard from the flags,
//! and a failed or non-finite step turned into an error naming the step.

use pipetrain::{Layer, PipelineBuilder, StepReport};

use crate::args::TrainArgs;
use crate::failure::Failure;

/// `builder` with the flags' gradient guard.
pub fn configure<L: Layer>(builder: PipelineBuilder<L>, args: &TrainArgs) -> PipelineBuilder<L> {
    let builder = match args.clip_grad_norm {
        Some(max) => builder.clip_grad_norm(max),
        None => builder,
    };
    if args.skip_nonfinite {
        builder.skip_nonfinite()
    } else {
        builder
    }
}

/// The flags' gradient guard, for the single-device copy of `--verify`.
pub fn of(args: &TrainArgs) -> pipetrain::GradGuard {
    pipetrain::GradGuard {
        clip_norm: args.clip_grad_norm,
        skip_nonfinite: args.skip_nonfinite,
    }
}

/// A step's result with the step (from 1) named in its error. A step whose loss is NaN or
/// infinite fails too, unless `--skip-nonfinite` skipped it: no later step or checkpoint sees
/// what it did.
///
/// # Errors
/// The step's own error, or its non-finite loss (runtime).
pub fn step_result(
    step: u64,
    result: Result<StepReport, pipetrain::Error>,
) -> Result<StepReport, Failure> {
    let report = result.map_err(|e| {
        let failure = Failure::of_build(e);
        let message = format!("step {step}: {failure}");
        failure.with_message(message)
    })?;
    if !report.loss.is_finite() && !report.skipped {
        return Err(Failure::runtime(format!(
            "step {step}: the loss is {}; lower --lr, clip gradients (--clip-grad-norm 1.0) or \
             skip such steps (--skip-nonfinite)",
            report.loss
        )));
    }
    Ok(report)
}

/// Whether `error` stopped a step before any stage applied it (a non-finite gradient, found
/// before the optimizer step): the weights are still those of the last good step.
pub fn weights_intact(error: &pipetrain::Error) -> bool {
    use pipetrain::engine::{Cause, EngineError};
    matches!(
        error,
        pipetrain::Error::Engine(EngineError::StageFailed {
            source: Cause::NonFinite { .. },
            ..
        })
    )
}

/// `--clip-grad-norm`'s check: a positive finite number (clap names the flag).
pub fn parse_clip(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!(
            "`{text}` is not a positive finite number; give the largest global gradient norm, \
             such as 1.0"
        )),
    }
}
