//! `--verify`'s single-device copy of the model, trained beside the pipeline on the same
//! batches, in one of two modes:
//!
//! - **end to end** (`--verify`): from the same initial weights, compared once at the end. The
//!   strictest check of a short run; over many steps float rounding (summation order differs
//!   with micro-batching) grows chaotically and fails correct runs (AdamW lr 1e-3, m = 4:
//!   7e-8 after 20 steps, 8.7e-3 after 50).
//! - **lockstep** (`--verify --lockstep`): before each step the copy takes the pipeline's
//!   weights, then both take the step and are compared; the worst step is reported. Each
//!   step's update is checked, so a long run verifies the engine, not float chaos.

use pipetrain::engine::{Activation, Difference, SingleDevice, difference};
use pipetrain::{Batch, CrossEntropy, Layer, Pipeline, StageId};

use crate::failure::Failure;

/// The worst step of a lockstep run so far.
#[derive(Clone, Copy, Debug)]
pub struct Worst {
    /// Its `max_rel_diff` (NaN once any step was NaN).
    pub max_rel_diff: f64,
    /// Its `max_abs_diff`.
    pub max_abs_diff: f64,
    /// The step (1-based).
    pub step: u64,
    /// Steps compared.
    pub steps: u64,
}

/// The single-device copy and how it is compared.
pub struct Reference<L: Layer> {
    single: SingleDevice<L>,
    /// Micro-batches per step the copy cuts each batch into (batch norm), or `None`.
    chunks: Option<usize>,
    /// `Some` in lockstep mode.
    worst: Option<Worst>,
}

impl<L: Layer> Reference<L> {
    /// A copy `single` stepping in `chunks` micro-batches (or whole batches), in lockstep mode
    /// or end to end.
    pub fn new(single: SingleDevice<L>, chunks: Option<usize>, lockstep: bool) -> Self {
        let worst = lockstep.then_some(Worst {
            max_rel_diff: 0.0,
            max_abs_diff: 0.0,
            step: 0,
            steps: 0,
        });
        Self {
            single,
            chunks,
            worst,
        }
    }

    /// Trains the copy one step on `batches` (the step's accumulated batches) at `lr`; in
    /// lockstep mode compares it with `pipeline`, which has taken step `step` (1-based) on the
    /// same batches, and then gives the copy the pipeline's weights for the next step.
    ///
    /// # Errors
    /// A failed step of the copy, or weights that do not match the pipeline's model.
    pub fn step(
        &mut self,
        batches: Vec<Batch>,
        lr: f64,
        pipeline: &Pipeline<L>,
        step: u64,
    ) -> Result<(), Failure> {
        let (inputs, targets): (Vec<_>, Vec<_>) =
            batches.into_iter().map(|b| (b.inputs, b.targets)).unzip();
        let (inputs, targets) = (Activation::cat(inputs)?, Activation::cat(targets)?);
        match self.chunks {
            Some(chunks) => self
                .single
                .step_chunked(inputs, targets, chunks, &CrossEntropy, lr)?,
            None => self.single.step(inputs, targets, &CrossEntropy, lr)?,
        };
        let Some(worst) = self.worst.as_mut() else {
            return Ok(());
        };
        // With batch norm and replicas the running statistics are replica 0's, broadcast,
        // which no single-device run reproduces: then the trained parameters only (as at the
        // end of an end-to-end run).
        let (all, trained) = (pipeline.parameters(), pipeline.trainable_parameters());
        let d: Difference = match pipeline.replicas() > 1 && all.len() > trained.len() {
            true => difference(&trained, &self.single.trainable_parameters()),
            false => difference(&all, &self.single.parameters()),
        };
        worst.steps += 1;
        let nan = worst.max_rel_diff.is_nan();
        if !nan && (d.max_relative.is_nan() || d.max_relative > worst.max_rel_diff) {
            (worst.max_rel_diff, worst.max_abs_diff, worst.step) =
                (d.max_relative, d.max_absolute, step);
        }
        let model: Vec<L> = (0..pipeline.stages())
            .flat_map(|s| pipeline.stage_layers(StageId::from(s)).to_vec())
            .collect();
        self.single.load_weights(&model)?;
        Ok(())
    }

    /// The copy.
    pub fn single(&self) -> &SingleDevice<L> {
        &self.single
    }

    /// The worst step, in lockstep mode.
    pub fn lockstep(&self) -> Option<Worst> {
        self.worst
    }
}
