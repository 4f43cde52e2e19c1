//! [`PipelineStrategy`]: burn-train's `Learner` trains through a pipeline. The epoch loop is
//! burn's own single-device loop (events, validation, checkpointer, early stopping); each
//! mini-batch's train step is the pipeline's.

use crate::BuildError;
use std::path::PathBuf;
use std::sync::Arc;

use burn::prelude::*;
use burn::train::{
    EventProcessorTraining, Learner, LearnerEvent, SupervisedLearningStrategy,
    SupervisedTrainingEventProcessor, TrainLoader, TrainingComponents, TrainingStrategy,
    ValidLoader,
};
use pipetrain_engine::{CrossEntropy, Loss, OptimizerConfig};
use pipetrain_schedules::{Schedule, StageId};

use super::failure::training_error;
use super::model::PipelineModel;
use super::slot::Slot;
use super::{epoch, resume};
use crate::builder::{PipelineBuilder, Validated};
use crate::error::{Error, Result};
use crate::pipeline::Pipeline;

/// Settings the strategy does not name, applied to the pipeline builder last.
type Configure<L> = Arc<dyn Fn(PipelineBuilder<L>) -> PipelineBuilder<L> + Send + Sync>;

/// Pipeline- and data-parallel training as a burn-train strategy: pass it to
/// `SupervisedTraining::with_training_strategy` and the `Learner` set-up stays as it is —
/// metrics, renderer, checkpointer, early stopping, validation and the learning-rate scheduler.
///
/// ```text
/// let training = SupervisedTraining::new(dir, train, valid)
///     .metrics((AccuracyMetric::new(), LossMetric::new()))
///     .num_epochs(3)
///     // the one new line:
///     .with_training_strategy(PipelineStrategy::new(SgdConfig::new()).stages(2).replicas(2).micro_batches(8).into());
/// let result = training.launch(Learner::new(model, SgdConfig::new().init(), 0.05));
/// ```
/// (examples/learner.rs runs this, with the model.)
///
/// How it trains (see [`PipelineModel`] for what the model provides):
/// - **train step**: the model's layers ([`PipelineModel::into_layers`]) become a
///   [`Pipeline`]; each mini-batch from the train loader is one [`Pipeline::train_step`] (stages
///   × replicas × micro-batches; equal to one single-device step on the whole mini-batch), at
///   the learning rate the `Learner`'s scheduler gives for that step. The training metrics see
///   the pipeline's forward on the mini-batch with the weights the step starts from (one extra
///   inference pass per mini-batch) and the step's loss.
/// - **validation** runs on the **merged model**: after each epoch the trained layers are put
///   back into the model ([`PipelineModel::with_layers`]) and burn's own validation loop runs its
///   `InferenceStep` — so validation metrics are exactly what single-device training reports.
/// - **checkpoints** go through burn-train's checkpointer, with the merged model's full record.
///   The optimizer state stays inside the pipeline (each stage's): the optimizer record burn
///   saves beside it is the `Learner`'s own, which this strategy does not step, so a resumed run
///   restarts the optimizer state (exact for plain SGD) unless the pipeline's own checkpoints
///   are kept too ([`optimizer_state_dir`](Self::optimizer_state_dir)).
/// - **errors**: a failed stage ends `fit` through burn-train's error path: the result's `error`
///   is a `TrainingError::Workers` naming the worker, stage, action and micro-batch.
///
/// The optimizer is given here ([`new`](Self::new)), as the `Learner`'s is opaque; use the same
/// config. burn-train's `grads_accumulation` is refused (it sums gradients; the pipeline's
/// micro-batches already accumulate); per-group learning rates are not applied (the scheduler's
/// base rate is). The pipeline runs on the CPU unless given devices:
/// `.with_pipeline(|b| b.devices([..]))`.
pub struct PipelineStrategy<M: PipelineModel> {
    optimizer: OptimizerConfig,
    stages: Option<usize>,
    replicas: usize,
    micro_batches: usize,
    schedule: Option<Schedule>,
    loss: Arc<dyn Loss>,
    configure: Option<Configure<M::Layer>>,
    state_dir: Option<PathBuf>,
}

impl<M: PipelineModel> PipelineStrategy<M> {
    /// A strategy that trains with `optimizer` (the same config the `Learner`'s optimizer was
    /// made from); one stage, one replica, one micro-batch, 1F1B, cross-entropy loss until set.
    pub fn new(optimizer: impl Into<OptimizerConfig>) -> Self {
        Self {
            optimizer: optimizer.into(),
            stages: None,
            replicas: 1,
            micro_batches: 1,
            schedule: None,
            loss: Arc::new(CrossEntropy),
            configure: None,
            state_dir: None,
        }
    }

    /// Pipeline stages (split by time measured on the first batch; see
    /// [`PipelineBuilder::stages`]).
    pub fn stages(mut self, stages: usize) -> Self {
        self.stages = Some(stages);
        self
    }

    /// Data-parallel replicas of the pipeline ([`PipelineBuilder::replicas`]).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Micro-batches per mini-batch ([`PipelineBuilder::micro_batches`]). The train loader's
    /// batches must have at least `replicas × micro_batches` rows (they split as
    /// [`Batch::shard`](pipetrain_engine::Batch::shard) says).
    pub fn micro_batches(mut self, micro_batches: usize) -> Self {
        self.micro_batches = micro_batches;
        self
    }

    /// The schedule ([`PipelineBuilder::schedule`]).
    pub fn schedule(mut self, schedule: impl Into<Schedule>) -> Self {
        self.schedule = Some(schedule.into());
        self
    }

    /// The training loss, computed on the last stage (default [`CrossEntropy`]): the one the
    /// model's own `TrainStep` computes.
    pub fn loss(mut self, loss: impl Loss + 'static) -> Self {
        self.loss = Arc::new(loss);
        self
    }

    /// Any other pipeline setting (balance, remat, devices, ZeRO, …), applied to the builder
    /// after the strategy's own: `.with_pipeline(|b| b.balance([2, 1]).remat(Remat::Never))`.
    pub fn with_pipeline(
        mut self,
        configure: impl Fn(PipelineBuilder<M::Layer>) -> PipelineBuilder<M::Layer>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.configure = Some(Arc::new(configure));
        self
    }

    /// Saves the pipeline's own checkpoint (weights, every stage's optimizer state, step count)
    /// at the end of every epoch, as `dir/pipeline-{epoch}.safetensors`, and loads that epoch's
    /// when the run resumes with `SupervisedTraining::checkpoint(epoch)`: exact resume for any
    /// optimizer (burn's own optimizer record does not hold the pipeline's state). One file per
    /// epoch is kept.
    pub fn optimizer_state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// The pipeline's settings over `model`'s layers, validated before any thread starts.
    fn settings(&self, model: M, grad_accumulation: Option<usize>) -> Result<Validated<M::Layer>> {
        if let Some(k) = grad_accumulation {
            return Err(Error::Build(BuildError::GradAccumulation { batches: k }));
        }
        // Off the Learner's autodiff device: each worker moves its layers to its own device and
        // puts them back in training mode.
        let mut builder = Pipeline::builder()
            .layers(pipetrain_engine::inference_copy(&model).into_layers())
            .replicas(self.replicas)
            .micro_batches(self.micro_batches)
            .optimizer(self.optimizer.clone())
            .loss(SharedLoss(Arc::clone(&self.loss)));
        if let Some(stages) = self.stages {
            builder = builder.stages(stages);
        }
        if let Some(schedule) = &self.schedule {
            builder = builder.schedule(schedule.clone());
        }
        if let Some(configure) = &self.configure {
            builder = configure(builder);
        }
        builder.validated()
    }
}

impl<M: PipelineModel> From<PipelineStrategy<M>> for TrainingStrategy<M> {
    fn from(strategy: PipelineStrategy<M>) -> Self {
        TrainingStrategy::Custom(Arc::new(strategy))
    }
}

/// The strategy's loss, shared by the pipelines it builds.
struct SharedLoss(Arc<dyn Loss>);

impl Loss for SharedLoss {
    fn loss(
        &self,
        output: pipetrain_engine::Activation,
        target: pipetrain_engine::Activation,
    ) -> std::result::Result<Tensor<1>, pipetrain_engine::EngineError> {
        self.0.loss(output, target)
    }
}

/// The whole model with the pipeline's trained layers (replica 0's), or `model` as it is if the
/// pipeline is not built yet (no training batch yet).
fn merged<M: PipelineModel>(slot: &Slot<M::Layer>, model: M) -> M {
    let Some(pipeline) = slot.built() else {
        return model;
    };
    let layers = StageId::range(pipeline.stages())
        .flat_map(|stage| pipeline.stage_layers(stage).to_vec())
        .collect();
    model.with_layers(layers)
}

impl<M: PipelineModel> SupervisedLearningStrategy<M> for PipelineStrategy<M> {
    fn fit(
        &self,
        components: TrainingComponents<M>,
        mut learner: Learner<M>,
        train: TrainLoader<M>,
        valid: ValidLoader<M>,
        starting_epoch: usize,
    ) -> (M, SupervisedTrainingEventProcessor<M>) {
        let TrainingComponents {
            num_epochs,
            checkpoint: resumed,
            mut checkpointer,
            grad_accumulation,
            interrupter,
            mut early_stopping,
            event_processor: mut processor,
            event_store,
            ..
        } = components;
        let mut model = learner.model();
        let device = model.devices().into_iter().next().unwrap_or_default();
        let resume = match (&self.state_dir, resumed) {
            (Some(dir), Some(epoch)) => Some(resume::path(dir, epoch)),
            _ => None,
        };
        let restored = self
            .settings(model.clone(), grad_accumulation)
            .and_then(|settings| Slot::new(settings, resume));
        let mut pipeline = match restored {
            Ok(pipeline) => pipeline,
            Err(error) => {
                interrupter.fail(training_error(error, 1));
                return (model, processor);
            }
        };
        let stages = pipeline.stages();
        for epoch in starting_epoch..=num_epochs {
            let mut run = epoch::Run {
                processor: &mut processor,
                interrupter: &interrupter,
                stages,
                epoch,
            };
            run.train(&mut pipeline, &mut learner, &train, &device);
            // After a failed step the stages may be partly updated: keep the last epoch's model.
            if interrupter.error().is_none() {
                model = merged(&pipeline, model);
            }
            if interrupter.should_stop() {
                break;
            }
            run.valid(&model, &valid);
            interrupter.fail_on_error(processor.process_train(LearnerEvent::EndEpoch(epoch)));
            if checkpointer.is_some() || early_stopping.is_some() {
                interrupter.fail_on_error(processor.flush());
            }
            if interrupter.should_stop() {
                break;
            }
            if let (Some(dir), Some(built)) = (&self.state_dir, pipeline.built()) {
                let saved = resume::save(built, dir, epoch);
                if let Err(error) = saved {
                    interrupter.fail(training_error(error, stages));
                    break;
                }
            }
            if let Some(checkpointer) = &mut checkpointer {
                // The full merged model is what burn's checkpointer saves.
                learner.load_model(model.clone().into_record());
                checkpointer.checkpoint(&learner, epoch, &event_store);
            }
            let stop_early = early_stopping.as_mut();
            if stop_early.is_some_and(|e| e.should_stop(epoch, &event_store)) {
                break;
            }
        }
        (model, processor)
    }
}
