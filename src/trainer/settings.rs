//! What a [`Trainer`](crate::trainer::Trainer) run does besides stepping: how many steps, at
//! which rates, and which files it reads and writes.

use std::path::PathBuf;

use crate::LrSchedule;

/// A run's settings. `TrainerSettings::new(steps)` trains `steps` optimizer steps at the
/// pipeline's learning rate and writes nothing; the fields add the rest.
#[derive(Clone, Debug)]
pub struct TrainerSettings {
    /// Optimizer steps in the whole run (a resumed run continues to this total).
    pub steps: u64,
    /// The base learning rate, which `lr_schedule` varies step by step.
    pub learning_rate: f64,
    /// The learning-rate schedule over the run's steps.
    pub lr_schedule: LrSchedule,
    /// Where the checkpoint goes: written after the last step, every `checkpoint_every`
    /// steps, when a signal stops the run, and for the last good step when a step fails before
    /// any stage applied it. Written atomically; any stage/replica layout can resume it.
    pub checkpoint: Option<PathBuf>,
    /// Also write the checkpoint every this many optimizer steps (0: only at the end).
    pub checkpoint_every: u64,
    /// Continue the run saved in this checkpoint: weights, optimizer state and step. Its
    /// [`RunIdentity`](crate::trainer::RunIdentity) must be this run's.
    pub resume: Option<PathBuf>,
    /// One row per optimizer step to this file, CSV (`.csv`) or JSON lines (`.jsonl`)
    /// ([`Metrics`](crate::trainer::Metrics)). A resumed run keeps the earlier rows.
    pub metrics: Option<PathBuf>,
}

impl TrainerSettings {
    /// `steps` optimizer steps at learning rate 1e-3 under a constant schedule, no files.
    pub fn new(steps: u64) -> Self {
        Self {
            steps,
            learning_rate: 1e-3,
            lr_schedule: LrSchedule::default(),
            checkpoint: None,
            checkpoint_every: 0,
            resume: None,
            metrics: None,
        }
    }

    /// Whether a checkpoint is due after `step` (from 1): the last step, or every
    /// `checkpoint_every`.
    pub fn checkpoint_due(&self, step: u64) -> bool {
        let every = self.checkpoint_every;
        step == self.steps || (every > 0 && step % every == 0)
    }
}
