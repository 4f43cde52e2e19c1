//! `--verify`: the trust button. The pipeline's weights against a single-device copy trained on
//! the same data from the same initial weights.

use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{Layer, Pipeline};

use crate::exit::Exit;

/// Compares the pipeline's weights (every replica's) with the single-device copy's and prints
/// `verify: max_rel_diff=<x>`; [`Exit::VerifyFailed`] if they differ by more than `tolerance`
/// (`--verify-tolerance`), or if the replicas differ from each other.
///
/// Replicas must hold identical parameters and buffers. With batch norm and several replicas
/// the running statistics are replica 0's (broadcast, as DDP does), which no single-device run
/// reproduces: then only the trained parameters are compared, and the output says so.
pub fn verify<L: Layer>(pipeline: &Pipeline<L>, single: &SingleDevice<L>, tolerance: f64) -> Exit {
    let replica0 = pipeline.parameters();
    for r in 1..pipeline.replicas() {
        if pipeline.replica_parameters(r) != replica0 {
            eprintln!("verify FAILED: replica {r} holds different weights than replica 0");
            return Exit::VerifyFailed;
        }
    }
    let (ours, theirs) = (
        pipeline.trainable_parameters(),
        single.trainable_parameters(),
    );
    let buffers = replica0.len() > ours.len();
    let d = if buffers && pipeline.replicas() > 1 {
        println!(
            "verify: comparing trained parameters only: the batch-norm running statistics are \
             replica 0's, broadcast to every replica"
        );
        difference(&ours, &theirs)
    } else {
        difference(&replica0, &single.parameters())
    };
    println!("verify: max_rel_diff={:.3e}", d.max_relative);
    println!(
        "  (max over parameter tensors of ||w_pipe - w_single||_2 / ||w_single||_2; max abs \
         diff {:.3e}; tolerance {tolerance:e})",
        d.max_absolute
    );
    // NaN fails too.
    if d.max_relative.is_nan() || d.max_relative > tolerance {
        eprintln!(
            "verify FAILED: pipelined weights differ from single-device training \
             (max_rel_diff {:.3e} > tolerance {tolerance:e})",
            d.max_relative
        );
        return Exit::VerifyFailed;
    }
    Exit::Success
}
