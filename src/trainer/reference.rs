//! The per-step verification's single-device copy of the model (the binary's `--verify`),
//! trained beside the pipeline on the same batches, on the pipeline's own device (or another),
//! in one of two modes:
//!
//! - **per step** (the default): before each step the copy takes the pipeline's weights, then
//!   both take the step on the same batches and are compared; the worst step is reported. Each
//!   step's update is checked, so a run of any length verifies the engine. An end-to-end
//!   comparison over many steps mostly measures float chaos instead: a replica's half-batch
//!   gradients, summed by the all-reduce, round differently from one full-batch gradient by
//!   about 1e-7, and 20 steps of a ReLU network under Adam amplify that to 4e-2 on a correct run.
//! - **end to end**: from the same initial weights, compared once at the end.
//!   The strictest check of a short run (a few steps), and the same as training a second model.
//!
//! In both modes every replica must hold bit-identical weights: per step, after every step.

use crate::engine::{Activation, Difference, SingleDevice, difference};
use crate::{Batch, CrossEntropy, Error, Layer};

/// How the verification compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Each step from the pipeline's weights (the default).
    PerStep,
    /// Once, at the end, from the same initial weights.
    EndToEnd,
}

/// The worst step of a per-step run so far.
#[derive(Clone, Copy, Debug)]
pub struct Worst {
    /// Its `max_rel_diff` (NaN once any step was NaN).
    pub max_rel_diff: f64,
    /// Its `max_abs_diff`.
    pub max_abs_diff: f64,
    /// The step (1-based).
    pub step: u64,
    /// The parameter tensor of that step's `max_rel_diff` (0-based, in model order).
    pub tensor: usize,
    /// Steps compared.
    pub steps: u64,
}

/// The pipeline's model after a step, as the copy compares it.
pub struct After<L> {
    /// Replica 0's layers, every stage (on this process: gathered under MPI).
    pub model: Vec<L>,
    /// Every float parameter and buffer of replica 0, flattened, in model order.
    pub parameters: Vec<Vec<f32>>,
    /// The trained parameters only.
    pub trainable: Vec<Vec<f32>>,
    /// Replicas, and the first one that holds other weights than replica 0 (`None`: all agree).
    pub replicas: (usize, Option<usize>),
}

/// The single-device copy and how it is compared.
pub struct Reference<L: Layer> {
    single: SingleDevice<L>,
    /// Micro-batches per step the copy cuts each batch into (batch norm), or `None`.
    chunks: Option<usize>,
    mode: Mode,
    worst: Worst,
    /// The first step after which a replica held other weights than replica 0: (step, replica).
    replicas_apart: Option<(u64, usize)>,
}

impl<L: Layer> Reference<L> {
    /// A copy `single` stepping in `chunks` micro-batches (or whole batches), compared in `mode`.
    pub fn new(single: SingleDevice<L>, chunks: Option<usize>, mode: Mode) -> Self {
        Self {
            single,
            chunks,
            mode,
            worst: Worst {
                max_rel_diff: 0.0,
                max_abs_diff: 0.0,
                step: 0,
                tensor: 0,
                steps: 0,
            },
            replicas_apart: None,
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Trains the copy one step on `batches` (the step's accumulated batches) at `lr`. Per step,
    /// compares it with `after` (the pipeline after taking step `step`, 1-based, on the same
    /// batches), then gives the copy the pipeline's weights for the next step.
    ///
    /// # Errors
    /// A failed step of the copy, or weights that do not match the pipeline's model.
    pub fn step(
        &mut self,
        batches: Vec<Batch>,
        lr: f64,
        after: Option<After<L>>,
        step: u64,
    ) -> Result<(), Error> {
        let (inputs, targets): (Vec<_>, Vec<_>) =
            batches.into_iter().map(|b| (b.inputs, b.targets)).unzip();
        let (inputs, targets) = (
            Activation::cat(inputs).map_err(pipetrain_engine::EngineError::bad_batch)?,
            Activation::cat(targets).map_err(pipetrain_engine::EngineError::bad_batch)?,
        );
        match self.chunks {
            Some(chunks) => self
                .single
                .step_chunked(inputs, targets, chunks, &CrossEntropy, lr)?,
            None => self.single.step(inputs, targets, &CrossEntropy, lr)?,
        };
        let Some(after) = after else {
            return Ok(());
        };
        self.replicas_checked(step, after.replicas.1);
        if self.mode == Mode::EndToEnd {
            return Ok(());
        }
        let d = self.compare(&after);
        let worst = &mut self.worst;
        worst.steps += 1;
        let nan = worst.max_rel_diff.is_nan();
        if !nan
            && (worst.steps == 1 || d.max_relative.is_nan() || d.max_relative > worst.max_rel_diff)
        {
            (
                worst.max_rel_diff,
                worst.max_abs_diff,
                worst.step,
                worst.tensor,
            ) = (d.max_relative, d.max_absolute, step, d.worst_tensor);
        }
        self.single.load_weights(&after.model)?;
        Ok(())
    }

    /// The pipeline's weights against the copy's. With batch norm and replicas the running
    /// statistics are replica 0's, broadcast (as DDP does), which no single-device run
    /// reproduces: then the trained parameters only.
    pub fn compare(&self, after: &After<L>) -> Difference {
        match self.buffers_excluded(after) {
            true => difference(&after.trainable, &self.single.trainable_parameters()),
            false => difference(&after.parameters, &self.single.parameters()),
        }
    }

    /// Whether [`compare`](Self::compare) leaves the buffers out.
    pub fn buffers_excluded(&self, after: &After<L>) -> bool {
        after.replicas.0 > 1 && after.parameters.len() > after.trainable.len()
    }

    /// The worst step (per step).
    pub fn worst(&self) -> Worst {
        self.worst
    }

    /// Records that after step `step` (from 1) replica `apart` held other weights than
    /// replica 0 (`None`: every replica agreed); the first such step is kept.
    pub fn replicas_checked(&mut self, step: u64, apart: Option<usize>) {
        if let (None, Some(r)) = (self.replicas_apart, apart) {
            self.replicas_apart = Some((step, r));
        }
    }

    /// The first step after which a replica held other weights than replica 0: (step, replica).
    pub fn replicas_apart(&self) -> Option<(u64, usize)> {
        self.replicas_apart
    }
}
