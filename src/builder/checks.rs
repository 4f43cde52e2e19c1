//! The builder's checks of its plain settings: counts, sizes, the learning rate and the
//! gradient guard, each refused with the value and a remedy.

use pipetrain_engine::Layer;

use super::PipelineBuilder;
use crate::error::{Result, config};

impl<L: Layer> PipelineBuilder<L> {
    /// Every plain setting checked; the split, devices and plan are checked by `build`.
    pub(super) fn check_settings(&self) -> Result<()> {
        if self.micro_batches == 0 {
            return config(
                "micro_batches = 0: each step needs at least one micro-batch (use .micro_batches(1))",
            );
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return config(format!(
                "learning rate {} is not a positive finite number; try 0.01",
                self.learning_rate
            ));
        }
        if self.replicas == 0 {
            return config("replicas = 0: use .replicas(1) for no data parallelism");
        }
        if self.accumulation == 0 {
            return config("accumulation = 0: use .accumulation(1) to step after every batch");
        }
        if self.zero > 1 {
            return config(format!(
                "ZeRO stage {} is not supported: use 0 (off) or 1 (optimizer state sharded)",
                self.zero
            ));
        }
        if self.bucket_bytes < 4 {
            return config(format!(
                "bucket of {} bytes cannot hold one f32 gradient; use at least 4 (default 25 MiB)",
                self.bucket_bytes
            ));
        }
        if self.threads == Some(0) {
            return config("threads_per_worker = 0: each worker needs at least one thread");
        }
        self.check_guard()
    }

    /// `.clip_grad_norm(x)`: a positive finite norm, with parameters counted once (no ties).
    fn check_guard(&self) -> Result<()> {
        let Some(max) = self.guard.clip_norm else {
            return Ok(());
        };
        if !(max.is_finite() && max > 0.0) {
            return config(format!(
                "clip_grad_norm {max}: the largest gradient norm must be a positive finite \
                 number, e.g. .clip_grad_norm(1.0)"
            ));
        }
        if !self.ties.is_empty() {
            return config(
                "clip_grad_norm with tied parameters is not supported yet (a tied parameter's \
                 gradient would count twice in the norm); drop the ties or the clipping",
            );
        }
        Ok(())
    }
}
