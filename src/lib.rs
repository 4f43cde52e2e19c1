//! # pipetrain
//!
//! Pipeline- and data-parallel training for burn. Hand it a model as a sequence of layers; it
//! cuts the sequence into stages, streams micro-batches through them under a schedule (GPipe
//! fill-drain, 1F1B, ZB-H1, interleaved 1F1B or ZB-V: [`ScheduleKind`]), can run replicas of
//! the whole pipeline that all-reduce their gradients, and computes what plain single-device
//! training computes. The guide is in `docs/` (start at `docs/README.md`).
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
//! The crate reads builder → setup → pipeline → trainer ([`PipelineBuilder`], [`Setup`],
//! [`Pipeline`], [`trainer`]), with burn-train's `Learner` strategy beside it (`learner`). The
//! binary's subcommands have their library side in [`commands`]: [`commands::plan`] (a plan's
//! report), [`commands::tune`] and, with the `commands` feature (on by default), `bench` (the
//! throughput table) and `export` (a checkpoint as a PyTorch state dict).
//!
//! Crates: [`schedules`] (plan IR, no burn), [`partitioner`] (stage split, no burn),
//! `pipetrain-tune` (the configuration search, no burn; [`commands::tune`] runs it on a model),
//! [`engine`] (workers on burn), `pipetrain-models` (reference models), `pipetrain-data`
//! (datasets, sampler, loaders).

mod builder;
pub mod commands;
mod error;
#[cfg(feature = "burn-train")]
pub mod learner;
mod lr_schedule;
pub mod memory;
mod pipeline;
pub mod remedy;
mod setup;
mod step_report;
#[cfg(feature = "trainer")]
pub mod trainer;

pub use builder::PipelineBuilder;
pub use error::{
    BuildError, CommandError, Error, ErrorClass, LastGood, PathProblem, Result, RunError, RunFile,
    RunFileProblem,
};
pub use lr_schedule::{Decay, LrSchedule};
pub use pipeline::{HeldParameters, Pipeline};
pub use setup::{Setup, WorkerSetup};
pub use step_report::{StageReport, StepReport};

pub use pipetrain_engine as engine;
pub use pipetrain_engine::checkpoint::{Checkpoint, Progress};
pub use pipetrain_engine::{
    Activation, AdamOptions, Backward, Batch, Bundle, CrossEntropy, Dense, DenseActivation,
    EngineError, GemmLibrary, GradGuard, Handoff, Layer, Linears, Loss, MatmulPrecision, Mse,
    OptimizerConfig, Precision, Remat, SgdOptions, Tie, Timing, WarmUp,
};
pub use pipetrain_partitioner as partitioner;
pub use pipetrain_schedules as schedules;
pub use pipetrain_schedules::{MicroBatchId, ReplicaId, ScheduleKind, StageId, WorkerId};

/// The Rust examples of the README and of the guide's pages, compiled and run as doctests so
/// that they stay true; `.ci/check-docs` fails on a page with Rust blocks that is not listed.
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../README.md")]
    pub struct Readme;
    #[doc = include_str!("../docs/library.md")]
    pub struct Library;
    #[doc = include_str!("../docs/data-parallel.md")]
    pub struct DataParallel;
    #[doc = include_str!("../docs/zero.md")]
    pub struct Zero;
    #[doc = include_str!("../docs/mixed-precision.md")]
    pub struct MixedPrecision;
    #[cfg(feature = "commands")]
    #[doc = include_str!("../docs/performance.md")]
    pub struct Performance;
    #[cfg(feature = "commands")]
    #[doc = include_str!("../docs/tune.md")]
    pub struct Tune;
}
