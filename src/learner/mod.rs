//! pipetrain as a burn-train `Learner` strategy (feature `burn-train`): an existing burn
//! training set-up goes pipeline- and data-parallel by passing a [`PipelineStrategy`] to
//! `SupervisedTraining::with_training_strategy`, for a model that is a layer sequence
//! ([`PipelineModel`]). examples/learner.rs shows the switch on burn's classic MLP classifier.

mod epoch;
mod failure;
mod model;
mod resume;
mod slot;
mod strategy;

pub use model::{PipelineModel, TrainInput, TrainOutput};
pub use strategy::PipelineStrategy;
