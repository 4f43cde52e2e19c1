//! [`PipelineModel`]: what [`PipelineStrategy`](super::PipelineStrategy) needs of a burn-train
//! model — the layer sequence behind it, and its training items as pipeline batches.

use burn::prelude::*;
use burn::train::{LearnerModel, TrainStep};
use pipetrain_engine::{Activation, Batch, EngineError, Layer};

/// The training input of a burn-train model (its `TrainStep::Input`, e.g. an image batch).
pub type TrainInput<M> = <M as TrainStep>::Input;
/// The training output a burn-train model gives its metrics (its `TrainStep::Output`, e.g.
/// burn's `ClassificationOutput`).
pub type TrainOutput<M> = <M as TrainStep>::Output;

/// A burn-train model that [`PipelineStrategy`](super::PipelineStrategy) can train: a sequence of
/// [`Layer`]s, and its training items as pipeline [`Batch`]es.
///
/// The strategy cuts [`into_layers`](Self::into_layers) into stages and trains them with the
/// pipeline's own step (the model's `TrainStep::step` is not called; the pipeline's loss is the
/// strategy's [`loss`](super::PipelineStrategy::loss)); it rebuilds the whole model with
/// [`with_layers`](Self::with_layers) for validation, checkpoints and the result.
///
/// A model that does not implement it is refused at compile time, with a note saying what to
/// implement:
///
/// ```compile_fail,E0277
/// use burn::optim::SgdConfig;
/// use burn::prelude::*;
/// use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};
/// use pipetrain::learner::PipelineStrategy;
///
/// // A model written as one block, not as a layer sequence.
/// #[derive(Module, Debug)]
/// struct Opaque { linear: burn::nn::Linear }
/// impl TrainStep for Opaque {
///     type Input = (Tensor<2>, Tensor<1, Int>);
///     type Output = ClassificationOutput;
///     fn step(&self, _: Self::Input) -> TrainOutput<ClassificationOutput> { unimplemented!() }
/// }
/// impl InferenceStep for Opaque {
///     type Input = (Tensor<2>, Tensor<1, Int>);
///     type Output = ClassificationOutput;
///     fn step(&self, _: Self::Input) -> ClassificationOutput { unimplemented!() }
/// }
///
/// // error[E0277]: `Opaque` is not a layer sequence: PipelineStrategy trains models that
/// // implement `pipetrain::learner::PipelineModel`
/// let strategy = PipelineStrategy::<Opaque>::new(SgdConfig::new());
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a layer sequence: PipelineStrategy trains models that implement \
               `pipetrain::learner::PipelineModel`",
    label = "`{Self}` does not implement `PipelineModel`",
    note = "implement `pipetrain::learner::PipelineModel` for `{Self}`: name its layer type \
            (`type Layer`, a `pipetrain::Layer`: a burn Module with a forward over an \
            `Activation`; an enum of several kinds), split it into its layers (`into_layers`) \
            and rebuild it from them (`with_layers`), and turn a training item into a \
            `pipetrain::Batch` (`batch`) and the pipeline's outputs into the item your metrics \
            take (`train_output`); examples/learner.rs shows all five on an MLP"
)]
pub trait PipelineModel: LearnerModel + Send {
    /// The layer type: each element of the sequence the pipeline cuts into stages.
    type Layer: Layer;

    /// The model's layers, in forward order.
    fn into_layers(self) -> Vec<Self::Layer>;

    /// This model with its layers replaced by `layers` (trained ones, in the same order).
    fn with_layers(self, layers: Vec<Self::Layer>) -> Self;

    /// A training item as a pipeline batch: the first layer's inputs and the loss's targets.
    fn batch(item: &TrainInput<Self>) -> Batch;

    /// What the training metrics see for `item`: `output` is the last layer's output on the
    /// item's inputs (computed by the pipeline's forward with the weights the step starts from,
    /// as burn's own step computes it), `loss` the step's mean loss (one element).
    fn train_output(
        item: TrainInput<Self>,
        output: Activation,
        loss: Tensor<1>,
    ) -> Result<TrainOutput<Self>, EngineError>;
}
