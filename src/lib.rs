//! # pipetrain
//!
//! Pipeline- and data-parallel training for burn. Hand it a model as a sequence of layers; it
//! cuts the sequence into stages, streams micro-batches through them under a schedule (GPipe
//! fill-drain, 1F1B), and computes exactly what plain single-device training computes.
//!
//! ```
//! use burn::prelude::*;
//! use pipetrain::{OptimizerConfig, Pipeline, Remat, ScheduleKind};
//! use pipetrain_models::{MlpConfig, synthetic};
//!
//! let device = Device::flex();
//! let mut pipeline = Pipeline::builder()
//!     .layers(MlpConfig::new(32, 4, 10).init(&device))
//!     .balance([3, 2])
//!     .micro_batches(8)
//!     .schedule(ScheduleKind::OneFOneB)
//!     .remat(Remat::ExceptLast)
//!     .optimizer(OptimizerConfig::adam())
//!     .learning_rate(1e-3)
//!     .build()?;
//! for step in 0..3 {
//!     let batch = synthetic::classification(42, step, 64, 32, 10, &device);
//!     let report = pipeline.train_step(&batch)?;
//!     println!("step {step}: loss {:.4}, {:.0} samples/s", report.loss, report.samples_per_sec());
//! }
//! # Ok::<(), pipetrain::Error>(())
//! ```
//!
//! Crates: [`schedules`] (plan IR, no burn), [`partitioner`] (stage split, no burn),
//! [`engine`] (workers on burn), `pipetrain-models` (reference models).

mod builder;
mod checkpoint;
mod error;
#[cfg(feature = "burn-train")]
pub mod learner;
mod learning_rate;
mod lr_schedule;
pub mod memory;
mod pipeline;
mod report;
pub mod tune;

pub use builder::PipelineBuilder;
pub use error::{Error, Result};
pub use lr_schedule::{Decay, LrSchedule};
pub use pipeline::Pipeline;
pub use report::{StageReport, StepReport};

pub use pipetrain_engine as engine;
pub use pipetrain_engine::checkpoint::{Checkpoint, CheckpointError, Progress};
pub use pipetrain_engine::{
    Activation, ActivationError, AdamOptions, Backward, Batch, Bundle, CrossEntropy, Dense,
    DenseActivation, GradGuard, Layer, Linears, Loss, Mse, OptimizerConfig, OptimizerError, Remat,
    SgdOptions, Tie, Timing,
};
pub use pipetrain_partitioner as partitioner;
pub use pipetrain_schedules as schedules;
pub use pipetrain_schedules::{MicroBatchId, ReplicaId, ScheduleKind, StageId, WorkerId};

/// The README's Rust examples, compiled and run as doctests so that they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
