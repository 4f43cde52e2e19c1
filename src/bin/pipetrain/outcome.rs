//! The end of a training run: `--verify` against the single-device copy, then the held-out
//! evaluation, on the pipeline itself or (under MPI, on rank 0) on the model gathered from
//! every process.

use std::path::Path;

use pipetrain::{Batch, Layer, Pipeline};

use crate::eval::{Evaluation, evaluate};
use crate::exit::Exit;
use crate::failure::Failure;
use crate::plot::Curve;
use crate::reference::Reference;

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
) -> Result<Exit, Failure> {
    let mut exit = Exit::Success;
    if let Some(reference) = reference {
        let after = match gathered {
            Some(model) => crate::verify::after_gathered(model.to_vec(), pipeline.replicas()),
            None => crate::verify::after_step(pipeline),
        };
        exit = crate::verify::verdict(&reference, &after, tolerance);
    }
    if held_out.is_empty() {
        println!("held-out: nothing held out (--held-out 0)");
        draw(plot, None)?;
        return Ok(exit);
    }
    let evaluation: Evaluation = match gathered {
        Some(model) => evaluate(
            |x| {
                model
                    .iter()
                    .try_fold(x, |a, layer| layer.forward(a))
                    .map_err(|e| e.to_string())
            },
            held_out,
            language,
        )?,
        None => evaluate(
            |x| pipeline.forward(x).map_err(|e| e.to_string()),
            held_out,
            language,
        )?,
    };
    println!("held-out {evaluation}");
    draw(plot, Some(format!("held-out {evaluation}")))?;
    Ok(exit)
}

/// Draws `plot` (if asked for) with `held_out` under its title, and says so. A plot that
/// cannot be written (a full disk) is a warning: the training it shows is done and saved.
fn draw(plot: Option<(&Path, Curve<'_>)>, held_out: Option<String>) -> Result<(), String> {
    let Some((path, curve)) = plot else {
        return Ok(());
    };
    let curve = Curve { held_out, ..curve };
    let (lo, hi) = match crate::plot::draw(path, &curve) {
        Ok(range) => range,
        Err(e) => {
            eprintln!("warning: {e}; no plot written");
            return Ok(());
        }
    };
    println!(
        "plot: {} (loss from {lo:.4} to {hi:.4} over {} steps)",
        path.display(),
        curve.losses.len()
    );
    Ok(())
}
