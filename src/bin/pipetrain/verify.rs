//! `--verify`: the trust button. The pipeline's weights against a single-device copy trained on
//! the same data from the same initial weights.

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference, parameters, trainable_parameters};
use pipetrain::{Layer, Pipeline};

use crate::exit::Exit;
use crate::reference::Worst;

/// Compares the pipeline's weights (every replica's) with the single-device copy's and prints
/// `verify: max_rel_diff=<x>`; [`Exit::VerifyFailed`] if they differ by more than `tolerance`
/// (`--verify-tolerance`), or if the replicas differ from each other.
///
/// Replicas must hold identical parameters and buffers. With batch norm and several replicas
/// the running statistics are replica 0's (broadcast, as DDP does), which no single-device run
/// reproduces: then only the trained parameters are compared, and the output says so.
pub fn verify<L: Layer>(pipeline: &Pipeline<L>, single: &SingleDevice<L>, tolerance: f64) -> Exit {
    verify_parameters(
        pipeline.replicas(),
        (1..pipeline.replicas())
            .map(|r| pipeline.replica_parameters(r))
            .collect(),
        pipeline.parameters(),
        pipeline.trainable_parameters(),
        single,
        tolerance,
    )
}

/// [`verify`] of a model gathered from the processes of a multi-process run (replica 0's
/// stages; the processes already checked that replicas agree when they merged their parts).
pub fn verify_model<L: Layer>(
    model: &[L],
    replicas: usize,
    single: &SingleDevice<L>,
    tolerance: f64,
) -> Exit {
    // On an autodiff device, as a worker's layers are: that is what tells trained parameters
    // from buffers.
    let device = Device::flex().autodiff();
    let model: Vec<L> = model
        .iter()
        .map(|l| l.clone().to_device(&device).train())
        .collect();
    verify_parameters(
        replicas,
        Vec::new(),
        parameters(&model),
        trainable_parameters(&model),
        single,
        tolerance,
    )
}

fn verify_parameters<L: Layer>(
    replicas: usize,
    others: Vec<Vec<Vec<f32>>>,
    replica0: Vec<Vec<f32>>,
    ours: Vec<Vec<f32>>,
    single: &SingleDevice<L>,
    tolerance: f64,
) -> Exit {
    for (r, other) in others.iter().enumerate() {
        if *other != replica0 {
            eprintln!(
                "verify FAILED: replica {} holds different weights than replica 0",
                r + 1
            );
            return Exit::VerifyFailed;
        }
    }
    let theirs = single.trainable_parameters();
    let buffers = replica0.len() > ours.len();
    let d = if buffers && replicas > 1 {
        println!(
            "verify: comparing trained parameters only: the batch-norm running statistics are \
             replica 0's, broadcast to every replica"
        );
        difference(&ours, &theirs)
    } else {
        difference(&replica0, &single.parameters())
    };
    let how = format!(
        "max over parameter tensors of ||w_pipe - w_single||_2 / ||w_single||_2; max abs diff \
         {:.3e}",
        d.max_absolute
    );
    judge(d.max_relative, &how, tolerance)
}

/// `--verify --lockstep`'s verdict: the worst step's difference against `tolerance`.
pub fn verify_lockstep(worst: Worst, tolerance: f64) -> Exit {
    let how = format!(
        "lockstep: the worst of {} steps (step {}), each from the pipeline's weights; max abs \
         diff {:.3e}",
        worst.steps, worst.step, worst.max_abs_diff
    );
    judge(worst.max_rel_diff, &how, tolerance)
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
