//! burn-train's `Learner` through `PipelineStrategy` (examples/learner.rs): the learned weights
//! equal single-device `Learner` training, accuracy and loss reach the renderer, burn's
//! checkpointer and scheduler keep working, and a failing stage ends `fit` on burn-train's error
//! path.

#[path = "../common/mod.rs"]
mod common;
#[path = "../../examples/learner.rs"]
mod example;

mod checkpoint;
mod data;
mod equivalence;
mod failure;
mod recorder;

use std::sync::Arc;

use burn::train::{
    ClassificationOutput, InferenceStep, Learner, LearnerModel, LearningResult, SupervisedTraining,
    TrainStep,
};
use example::ClassBatch;
use pipetrain::learner::PipelineModel;
use recorder::{Recorder, Seen};

/// `training` with a recording renderer, launched with `learner`.
pub fn launch<M: LearnerModel>(
    training: SupervisedTraining<M>,
    learner: Learner<M>,
) -> (LearningResult<M>, Seen) {
    let recorder = Recorder::default();
    let seen = Arc::clone(&recorder.seen);
    let result = training.renderer(Box::new(recorder)).launch(learner);
    (result, seen)
}

/// The example's training (single-device or pipelined) from `model`, rendering to a recorder.
pub fn fit<M>(model: M, pipelined: bool) -> (LearningResult<M>, Seen)
where
    M: PipelineModel
        + TrainStep<Input = ClassBatch, Output = ClassificationOutput>
        + InferenceStep<Input = ClassBatch, Output = ClassificationOutput>,
{
    let dir = common::scratch("learner");
    launch(
        example::training(dir.path(), pipelined),
        example::learner(model),
    )
}

/// The norm-wise relative difference of `actual`'s weights from `reference`'s (as `--verify`).
pub fn rel_diff(actual: &example::Mlp, reference: &example::Mlp) -> f64 {
    let (a, b) = (example::weights(actual), example::weights(reference));
    pipetrain::engine::difference(&a, &b).max_relative
}

/// The values of `metric` that reached the renderer in `split` ("train" or "valid"), in order.
pub fn values(seen: &Seen, split: &str, metric: &str) -> Vec<f64> {
    let seen = seen.lock().unwrap();
    seen.get(&(split.to_string(), metric.to_string()))
        .cloned()
        .unwrap_or_default()
}
