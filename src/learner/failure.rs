//! A pipeline error on burn-train's error path: the [`TrainingError`] that ends `Learner`'s fit
//! and comes back in `LearningResult::error`.

use burn::train::TrainingError;
use burn::train::train::WorkerFailure;
use pipetrain_engine::EngineError;

use crate::error::Error;

/// `error` as burn-train's failed-worker error. A failed stage names its worker: `device_id` is
/// the worker's index in the `replicas × stages` world (replica-major), and the message
/// carries the replica, stage, action and micro-batch; any other error is worker 0's.
pub(crate) fn training_error(error: Error, stages: usize) -> TrainingError {
    let device_id = match &error {
        Error::Engine(EngineError::StageFailed { replica, stage, .. }) => {
            replica.index() * stages + stage.index()
        }
        _ => 0,
    };
    TrainingError::Workers(vec![WorkerFailure {
        device_id,
        message: format!("pipetrain: {error}"),
    }])
}
