//! The builder's checks of its plain settings: counts, sizes, the learning rate and the
//! gradient guard, each refused with the value and a remedy.

use crate::BuildError;
use pipetrain_engine::Layer;

use super::PipelineBuilder;
use crate::error::{Error, Result, invalid};
use crate::remedy::{Remedy, Setting, Value};
use pipetrain_schedules::{Schedule, ScheduleError, ScheduleKind};

impl<L: Layer> PipelineBuilder<L> {
    /// Every plain setting checked; the split, devices and plan are checked by `build`.
    pub(super) fn check_settings(&self) -> Result<()> {
        if self.micro_batches == 0 {
            return Err(ScheduleError::ZeroMicroBatches.into());
        }
        // Before `.stages(p)` is read as p × v model stages: v = 0 would make it 0 stages.
        if let Schedule::Kind(
            kind @ (ScheduleKind::Interleaved { virtual_stages }
            | ScheduleKind::LoopedBfs { virtual_stages }
            | ScheduleKind::InterleavedZb { virtual_stages }),
        ) = self.schedule
            && virtual_stages < 2
        {
            return Err(ScheduleError::VirtualStages {
                schedule: kind.family(),
                virtual_stages,
            }
            .into());
        }
        // In f32, the weights' type, 1e-320 is 0: refused as 0 is. (A rate too large is the
        // first update's to report, naming it.)
        let in_f32 = self.learning_rate as f32;
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0 && in_f32 > 0.0) {
            return invalid(
                Setting::LearningRate,
                crate::commands::plan::compact(self.learning_rate),
                "not a positive finite number in f32, the weights' type (it is 0 below 1e-45)",
                Some(Remedy::set(Setting::LearningRate, Value::Number(0.01))),
            );
        }
        if self.replicas == 0 {
            return invalid(
                Setting::Replicas,
                0,
                "at least one replica runs (1 is no data parallelism)",
                Some(Remedy::set(Setting::Replicas, Value::Count(1))),
            );
        }
        if self.accumulation == 0 {
            return invalid(
                Setting::Accumulation,
                0,
                "each optimizer step takes at least one batch (1 steps after every batch)",
                Some(Remedy::set(Setting::Accumulation, Value::Count(1))),
            );
        }
        if self.zero > 3 {
            return invalid(
                Setting::Zero,
                self.zero,
                "no such level: 0 is off, 1 shards the optimizer state, 2 the gradients too, 3 \
                 the parameters too",
                Some(Remedy::set(Setting::Zero, Value::Count(3))),
            );
        }
        if self.zero >= 2 && self.accumulation > 1 && !self.ties.is_empty() && self.replicas > 1 {
            // Each replica's shard of a tied parameter would be summed into the other stage's
            // copy by the next batch's tie sum, and counted twice.
            return invalid(
                Setting::Zero,
                self.zero,
                "tied parameters are summed between their stages before the reduce, and \
                 between the batches of an accumulation each replica keeps only its own shard \
                 of each copy: ZeRO-2/3 cannot accumulate them",
                Some(Remedy::one_of([
                    Remedy::set(Setting::Zero, Value::Count(1)),
                    Remedy::set(Setting::Accumulation, Value::Count(1)),
                ])),
            );
        }
        if self.bucket_bytes < 4 {
            return invalid(
                Setting::BucketBytes,
                self.bucket_bytes,
                "a bucket cannot hold one f32 gradient in fewer than 4 bytes (default 25 MiB)",
                Some(Remedy::set(Setting::BucketBytes, Value::Bytes(4))),
            );
        }
        if self.threads == Some(0) {
            return invalid(
                Setting::ThreadsPerWorker,
                0,
                "each worker needs at least one thread",
                Some(Remedy::set(Setting::ThreadsPerWorker, Value::Count(1))),
            );
        }
        self.check_guard()
    }

    /// `.clip_grad_norm(x)`: a positive finite norm, with parameters counted once (no ties).
    fn check_guard(&self) -> Result<()> {
        let Some(max) = self.guard.clip_norm else {
            return Ok(());
        };
        if !(max.is_finite() && max > 0.0) {
            return invalid(
                Setting::ClipGradNorm,
                crate::commands::plan::compact(max),
                "the largest gradient norm must be a positive finite number",
                Some(Remedy::set(Setting::ClipGradNorm, Value::Number(1.0))),
            );
        }
        if !self.ties.is_empty() {
            return Err(Error::Build(BuildError::ClipWithTies));
        }
        Ok(())
    }
}
