//! `--clip-grad-norm` and `--skip-nonfinite`: the pipeline's gradient guard from the flags.

use pipetrain::{Layer, PipelineBuilder};

use crate::args::TrainArgs;

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
