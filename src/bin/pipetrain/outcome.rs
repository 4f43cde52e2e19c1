//! The end of a training run: `--verify`'s verdict on the single-device copy, then the held-out
//! evaluation, on the pipeline itself or (under MPI, on rank 0) on the model gathered from
//! every process, then `--plot`.

use std::path::Path;

use pipetrain::commands::plot::Curve;
use pipetrain::trainer::Reference;
use pipetrain::trainer::eval::{Evaluation, evaluate};
use pipetrain::trainer::verify::{Verdict, after_gathered, after_step, verdict};
use pipetrain::{Batch, Layer, Pipeline};

use crate::exit::Exit;
use crate::failure::Failure;
use crate::run_failure::cli_message;

/// Verifies (when `reference` is given) and evaluates on `held_out` (batches, and whether the
/// model is a language model); prints both, then draws `plot` with the held-out result.
/// `gathered` is the trained model of a multi-process run, gathered on this process: the
/// pipeline's own inference would need every process, so the gathered model runs layer by
/// layer instead.
pub fn verify_and_evaluate<L: Layer>(
    pipeline: &mut Pipeline<L>,
    gathered: Option<&[L]>,
    reference: Option<Reference<L>>,
    tolerance: f64,
    (held_out, language): (Vec<Batch>, bool),
    plot: Option<(&Path, Curve<'_>)>,
    lost: &Lost,
) -> Result<Exit, Failure> {
    let mut exit = Exit::Success;
    if let Some(reference) = reference {
        let after = match gathered {
            Some(model) => after_gathered(model.to_vec(), pipeline.replicas(), None),
            None => after_step(pipeline),
        };
        exit = print_verdict(&verdict(&reference, &after), tolerance);
    }
    if held_out.is_empty() {
        println!("held-out: nothing held out (--held-out 0)");
        draw(plot, None, lost);
        return Ok(exit);
    }
    let evaluation: Evaluation = match gathered {
        Some(model) => evaluate(
            |x| {
                model
                    .iter()
                    .try_fold(x, |a, layer| layer.forward(a))
                    .map_err(Into::into)
            },
            held_out,
            language,
        )?,
        None => evaluate(|x| pipeline.forward(x), held_out, language)?,
    };
    println!("held-out {evaluation}");
    draw(plot, Some(format!("held-out {evaluation}")), lost);
    Ok(exit)
}

/// Prints `verdict`: `verify: max_rel_diff=<x>` and how it was measured; returns
/// [`Exit::VerifyFailed`] if a replica's weights left replica 0's, if the difference exceeds
/// `tolerance` (`--verify-tolerance`), or on NaN.
fn print_verdict(verdict: &Verdict, tolerance: f64) -> Exit {
    let (max_rel_diff, how) = match verdict {
        Verdict::ReplicasApart { step, replica } => {
            let when = match step {
                0 => "at the end".to_string(),
                s => format!("from step {s} on"),
            };
            eprintln!(
                "verify FAILED: replica {replica} holds different weights than replica 0 ({when})"
            );
            return Exit::VerifyFailed;
        }
        Verdict::Compared {
            max_rel_diff,
            how,
            buffers_excluded,
        } => {
            if *buffers_excluded {
                println!(
                    "verify: comparing trained parameters only: the batch-norm running \
                     statistics are replica 0's, broadcast to every replica"
                );
            }
            (*max_rel_diff, how)
        }
    };
    println!("verify: max_rel_diff={max_rel_diff:.3e}");
    println!("  ({how}; tolerance {tolerance:e})");
    if verdict.passes(tolerance) {
        return Exit::Success;
    }
    let why = match max_rel_diff.is_nan() {
        true => "NaN: the run diverged".to_string(),
        false => format!("max_rel_diff {max_rel_diff:.3e} > tolerance {tolerance:e}"),
    };
    eprintln!("verify FAILED: pipelined weights differ from single-device training ({why})");
    Exit::VerifyFailed
}

/// Draws `plot` (if asked for) with `held_out` under its title, and says so. A plot that
/// cannot be written (a full disk) is a warning and a [`Lost`] output: the training it shows
/// is done and saved, but the run exits 1.
pub fn draw(plot: Option<(&Path, Curve<'_>)>, held_out: Option<String>, lost: &Lost) {
    let Some((path, curve)) = plot else {
        return;
    };
    let curve = Curve { held_out, ..curve };
    match pipetrain::commands::plot::draw(path, &curve) {
        Ok((lo, hi)) => println!(
            "plot: {} (loss from {lo:.4} to {hi:.4} over {} steps){}",
            path.display(),
            curve.losses.len(),
            pipetrain::commands::plot::missing(curve.losses)
                .map_or(String::new(), |m| format!("; {m}"))
        ),
        Err(e) => {
            eprintln!("warning: {}; no plot written", cli_message(&e));
            lost.push(cli_message(&e));
        }
    }
}

/// The side outputs of a run that could not be written (the library's
/// [`LostOutputs`](pipetrain::trainer::LostOutputs)).
pub type Lost = pipetrain::trainer::LostOutputs;

/// `exit`, or [`Exit::Runtime`] when an output was `lost` from a run that otherwise succeeded
/// ([`LostOutputs::error`](pipetrain::trainer::LostOutputs::error)). A failed `--verify` keeps
/// its own code.
pub fn with_lost(exit: Exit, lost: &Lost) -> Exit {
    match (exit, lost.error()) {
        (Exit::Success, Some(error)) => {
            eprintln!("error: {}", cli_message(&error));
            Exit::Runtime
        }
        _ => exit,
    }
}
