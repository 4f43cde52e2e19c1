//! `--verify`: the trust button. The pipeline's weights against a single-device copy trained on
//! the same data on the pipeline's own device ([`Reference`]): per step by default, end to end
//! with `--end-to-end`. Every replica must hold bit-identical weights.

use burn::prelude::*;
use pipetrain::engine::{parameters, trainable_parameters};
use pipetrain::{Layer, Pipeline, StageId};

use crate::exit::Exit;
use crate::reference::{After, Mode, Reference};

/// The in-process pipeline after a step, as [`Reference`] compares it: replica 0's model, and
/// whether every other replica holds the same bits.
pub fn after_step<L: Layer>(pipeline: &Pipeline<L>) -> After<L> {
    let model: Vec<L> = (0..pipeline.stages())
        .flat_map(|s| pipeline.stage_layers(StageId::from(s)).to_vec())
        .collect();
    let parameters = pipeline.parameters();
    let apart = (1..pipeline.replicas()).find(|&r| pipeline.replica_parameters(r) != parameters);
    After {
        model,
        trainable: pipeline.trainable_parameters(),
        parameters,
        replicas: (pipeline.replicas(), apart),
    }
}

/// A model gathered from the processes of a multi-process run (replica 0's stages; the
/// processes checked that replicas agree when they merged their parts), as [`Reference`]
/// compares it.
pub fn after_gathered<L: Layer>(model: Vec<L>, replicas: usize) -> After<L> {
    // On an autodiff device, as a worker's layers are: that is what tells trained parameters
    // from buffers.
    let device = model
        .first()
        .and_then(|l| l.devices().into_iter().next())
        .unwrap_or_else(Device::flex)
        .autodiff();
    let model: Vec<L> = model
        .into_iter()
        .map(|l| l.to_device(&device).train())
        .collect();
    After {
        parameters: parameters(&model),
        trainable: trainable_parameters(&model),
        model,
        replicas: (replicas, None),
    }
}

/// The verdict, printed: `verify: max_rel_diff=<x>` and how it was measured;
/// [`Exit::VerifyFailed`] if a replica's weights left replica 0's, if the difference exceeds
/// `tolerance` (`--verify-tolerance`), or on NaN. `after` is the pipeline at the end of the run.
pub fn verdict<L: Layer>(reference: &Reference<L>, after: &After<L>, tolerance: f64) -> Exit {
    let apart = reference
        .replicas_apart()
        .or_else(|| after.replicas.1.map(|r| (0, r)));
    if let Some((step, r)) = apart {
        let when = match step {
            0 => "at the end".to_string(),
            s => format!("from step {s} on"),
        };
        eprintln!("verify FAILED: replica {r} holds different weights than replica 0 ({when})");
        return Exit::VerifyFailed;
    }
    if reference.buffers_excluded(after) {
        println!(
            "verify: comparing trained parameters only: the batch-norm running statistics are \
             replica 0's, broadcast to every replica"
        );
    }
    match reference.mode() {
        Mode::PerStep => {
            let worst = reference.worst();
            let how = format!(
                "per step: the worst of {} steps (step {}), each from the pipeline's weights; max \
                 abs diff {:.3e}",
                worst.steps, worst.step, worst.max_abs_diff
            );
            judge(worst.max_rel_diff, &how, tolerance)
        }
        Mode::EndToEnd => {
            let d = reference.compare(after);
            let how = format!(
                "end to end: max over parameter tensors of ||w_pipe - w_single||_2 / \
                 ||w_single||_2; max abs diff {:.3e}",
                d.max_absolute
            );
            judge(d.max_relative, &how, tolerance)
        }
    }
}

/// Prints `verify: max_rel_diff=<x>` and `how` it was measured; fails above `tolerance` or on
/// NaN (a diverged run).
fn judge(max_rel_diff: f64, how: &str, tolerance: f64) -> Exit {
    println!("verify: max_rel_diff={max_rel_diff:.3e}");
    println!("  ({how}; tolerance {tolerance:e})");
    if max_rel_diff.is_nan() || max_rel_diff > tolerance {
        let why = match max_rel_diff.is_nan() {
            true => "NaN: the run diverged".to_string(),
            false => format!("max_rel_diff {max_rel_diff:.3e} > tolerance {tolerance:e}"),
        };
        eprintln!("verify FAILED: pipelined weights differ from single-device training ({why})");
        return Exit::VerifyFailed;
    }
    Exit::Success
}
