//! # pipetrain-models
//!
//! Reference models for pipetrain, each a sequence of [`Layer`](pipetrain_engine::Layer)s that
//! the partitioner can cut between any two layers, and seeded synthetic data for them.

mod mlp;
pub mod synthetic;

pub use mlp::{Block, MlpConfig, MlpLayer};
pub use pipetrain_engine::Batch;
