//! The trust button (the binary's `--verify`): the pipeline's weights against a single-device
//! copy trained on the same data ([`Reference`]): per step by default, or end to end. Every
//! replica must hold bit-identical weights.

use crate::engine::{parameters, trainable_parameters};
use crate::trainer::{After, Mode, Reference};
use crate::{Layer, Pipeline, StageId};
use burn::prelude::*;

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

/// A model gathered from the processes of a multi-process run (replica 0's stages), as
/// [`Reference`] compares it; `apart` is the first replica whose weights differ from replica
/// 0's ([`Processes::replicas_apart`](crate::trainer::Processes::replicas_apart)), if any.
pub fn after_gathered<L: Layer>(model: Vec<L>, replicas: usize, apart: Option<usize>) -> After<L> {
    // On an autodiff device, as a worker's layers are: that is what tells trained parameters
    // from buffers.
    let device = model
        .first()
        .and_then(|l| l.devices().into_iter().next())
        .unwrap_or_else(Device::flex);
    let model: Vec<L> = model
        .into_iter()
        .map(|l| pipetrain_engine::trainable(l, &device))
        .collect();
    After {
        parameters: parameters(&model),
        trainable: trainable_parameters(&model),
        model,
        replicas: (replicas, apart),
    }
}

/// What the verification found at the end of a run ([`verdict`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// A replica's weights left replica 0's: at `step` (0: found at the end).
    ReplicasApart {
        /// The first step after which they differed (0: at the end).
        step: u64,
        /// The replica.
        replica: usize,
    },
    /// The largest relative difference, and how it was measured.
    Compared {
        /// `max_rel_diff`: NaN when the run diverged.
        max_rel_diff: f64,
        /// How it was measured (per step or end to end, and the absolute difference).
        how: String,
        /// Whether the batch-norm running statistics were left out (replica 0's, broadcast).
        buffers_excluded: bool,
    },
}

impl Verdict {
    /// Whether the pipeline passes at `tolerance`: every replica agrees and the difference is
    /// finite and at most `tolerance`.
    pub fn passes(&self, tolerance: f64) -> bool {
        match self {
            Verdict::ReplicasApart { .. } => false,
            Verdict::Compared { max_rel_diff, .. } => {
                !max_rel_diff.is_nan() && *max_rel_diff <= tolerance
            }
        }
    }
}

/// The verdict on `reference`'s run: whether a replica's weights left replica 0's, else the
/// difference, per step (the worst step) or end to end. `after` is the pipeline at the end of
/// the run.
pub fn verdict<L: Layer>(reference: &Reference<L>, after: &After<L>) -> Verdict {
    let apart = reference
        .replicas_apart()
        .or_else(|| after.replicas.1.map(|r| (0, r)));
    if let Some((step, replica)) = apart {
        return Verdict::ReplicasApart { step, replica };
    }
    let buffers_excluded = reference.buffers_excluded(after);
    match reference.mode() {
        Mode::PerStep => {
            let worst = reference.worst();
            let how = format!(
                "per step: the worst of {} steps (step {}, parameter tensor {}), each from the \
                 pipeline's weights; max abs diff {:.3e}",
                worst.steps, worst.step, worst.tensor, worst.max_abs_diff
            );
            Verdict::Compared {
                max_rel_diff: worst.max_rel_diff,
                how,
                buffers_excluded,
            }
        }
        Mode::EndToEnd => {
            let d = reference.compare(after);
            let how = format!(
                "end to end: max over parameter tensors of ||w_pipe - w_single||_2 / \
                 ||w_single||_2 (parameter tensor {}); max abs diff {:.3e}",
                d.worst_tensor, d.max_absolute
            );
            Verdict::Compared {
                max_rel_diff: d.max_relative,
                how,
                buffers_excluded,
            }
        }
    }
}
