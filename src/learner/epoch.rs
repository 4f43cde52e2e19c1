//! One epoch's training split (a pipeline step per mini-batch) and validation split (burn's
//! `InferenceStep` on the merged model), reporting every item to burn-train's event processor.

use std::sync::Arc;

use burn::data::dataloader::{DataLoader, Progress};
use burn::prelude::*;
use burn::train::{
    EventProcessorTraining, InferenceStep, Interrupter, Learner, LearnerEvent,
    SupervisedTrainingEventProcessor, TrainLoader, TrainingItem, ValidLoader,
};

use super::failure::training_error;
use super::model::{PipelineModel, TrainInput, TrainOutput};
use super::slot::Slot;
use crate::error::Result;

/// What an epoch's splits report to.
pub(crate) struct Run<'a, M: PipelineModel> {
    pub processor: &'a mut SupervisedTrainingEventProcessor<M>,
    pub interrupter: &'a Interrupter,
    /// Stages of the pipeline (to name a failed worker).
    pub stages: usize,
    /// The epoch, from 1.
    pub epoch: usize,
}

impl<M: PipelineModel> Run<'_, M> {
    /// The training split: each mini-batch of `loader` is one pipeline step at the rate the
    /// learner's scheduler gives; stops at the first error (the interrupter keeps it).
    pub fn train(
        &mut self,
        pipeline: &mut Slot<M::Layer>,
        learner: &mut Learner<M>,
        loader: &TrainLoader<M>,
        device: &Device,
    ) {
        let start = LearnerEvent::StartSplit {
            epoch_number: self.epoch,
            total_items: loader.num_items(),
        };
        self.interrupter
            .fail_on_error(self.processor.process_train(start));
        each_item(loader, self.interrupter, |item, progress, iteration| {
            learner.lr_step();
            let learning_rate = learner.lr_current();
            let output = match step::<M>(pipeline, item, learning_rate.base(), device) {
                Ok(output) => output,
                Err(error) => {
                    self.interrupter.fail(training_error(error, self.stages));
                    return;
                }
            };
            let item = TrainingItem::new(output, progress, Some(iteration), Some(learning_rate));
            let processed = self
                .processor
                .process_train(LearnerEvent::ProcessedItem(item));
            self.interrupter.fail_on_error(processed);
        });
        let end = self
            .processor
            .process_train(LearnerEvent::EndSplit(self.epoch));
        self.interrupter.fail_on_error(end);
    }

    /// The validation split, burn's own: the model's `InferenceStep` on every batch of `loader`.
    pub fn valid(&mut self, model: &M, loader: &ValidLoader<M>) {
        let start = LearnerEvent::StartSplit {
            epoch_number: self.epoch,
            total_items: loader.num_items(),
        };
        self.interrupter
            .fail_on_error(self.processor.process_valid(start));
        let model = pipetrain_engine::inference_copy(model);
        each_item(loader, self.interrupter, |item, progress, iteration| {
            let output = InferenceStep::step(&model, item);
            let item = TrainingItem::new(output, progress, Some(iteration), None);
            let processed = self
                .processor
                .process_valid(LearnerEvent::ProcessedItem(item));
            self.interrupter.fail_on_error(processed);
        });
        let end = self
            .processor
            .process_valid(LearnerEvent::EndSplit(self.epoch));
        self.interrupter.fail_on_error(end);
    }
}

/// burn's split loop: `visit` each item of `loader` with its progress and 1-based iteration,
/// until the loader ends or the interrupter says stop (a loader error stops it too).
fn each_item<T>(
    loader: &Arc<dyn DataLoader<T>>,
    interrupter: &Interrupter,
    mut visit: impl FnMut(T, Progress, usize),
) {
    let mut iterator = loader.iter();
    let mut iteration = 0;
    while let Some(item) = iterator.next() {
        let item = match item {
            Ok(item) => item,
            Err(error) => {
                interrupter.fail(error);
                break;
            }
        };
        iteration += 1;
        visit(item, iterator.progress(), iteration);
        if interrupter.should_stop() {
            break;
        }
    }
}

/// One mini-batch: the metrics' forward with the weights the step starts from, then the
/// pipeline's step (the pipeline is built on the first).
fn step<M: PipelineModel>(
    slot: &mut Slot<M::Layer>,
    item: TrainInput<M>,
    learning_rate: f64,
    device: &Device,
) -> Result<TrainOutput<M>> {
    let batch = M::batch(&item);
    let pipeline = slot.get(&batch)?;
    pipeline.set_learning_rate(learning_rate)?;
    let output = pipeline.forward(batch.inputs.clone())?;
    let report = pipeline.train_step(&batch)?;
    let loss = Tensor::<1>::from_floats([report.loss as f32], device);
    Ok(M::train_output(item, output, loss).map_err(pipetrain_engine::EngineError::bad_batch)?)
}
