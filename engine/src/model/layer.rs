//! The layer trait: what the partitioner places and a stage runs.

use burn::module::Module;
use burn::tensor::FloatDType;

use crate::dense::Dense;
use crate::error::EngineError;
use crate::linears::Linears;
use crate::model::activation::Activation;

/// A burn [`Module`] that a pipeline can place on a stage: a forward from one [`Activation`] to
/// the next.
///
/// Any `#[derive(Module)]` type becomes a layer with a few lines that say which tensor it takes;
/// a model with several layer types uses an enum (burn's `Module` derive supports enums).
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::prelude::*;
/// use pipetrain_engine::{Activation, EngineError, Layer};
///
/// #[derive(Module, Debug)]
/// struct Dense {
///     linear: Linear,
/// }
///
/// impl Layer for Dense {
///     fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
///         let x: Tensor<2> = input.float()?;
///         Ok(burn::tensor::activation::relu(self.linear.forward(x)).into())
///     }
/// }
///
/// let device = Device::flex();
/// let layer = Dense { linear: LinearConfig::new(3, 2).init(&device) };
/// let out = layer.forward(Tensor::<2>::ones([5, 3], &device).into()).unwrap();
/// assert_eq!(out.dims(), vec![5, 2]);
/// ```
pub trait Layer: Module + 'static {
    /// Forward of one micro-batch. Called with autodiff tensors while training (under
    /// re-materialization's first pass on copies whose parameters require no gradient, from an
    /// input that requires none), plain tensors for inference. An input the layer cannot take is an
    /// error, not a panic: [`EngineError::Mismatch`] (what [`Activation::float`] and its kin
    /// return for a wrong rank or kind), or [`EngineError::LayerRejected`] with the layer's own
    /// reason; the engine reports it as the failing stage's cause, with the input's shape.
    fn forward(&self, input: Activation) -> Result<Activation, EngineError>;

    /// This layer as a [`Dense`] layer (`y = f(x·W + b)`), when it is one: training then runs it
    /// without autodiff and splits its backward into an input gradient, sent upstream at once,
    /// and a weight gradient computed once for a group of micro-batches (see
    /// [`crate::dense`]). It must describe exactly what [`forward`](Layer::forward) computes
    /// (inference and re-materialization's first pass use `forward`); the default, `None`, keeps
    /// the layer on the autodiff path.
    fn dense(&self) -> Option<Dense<'_>> {
        None
    }

    /// The forward with this layer's `Linear`s called through `linears`
    /// (`linears.forward(&self.proj, x)`), for a layer that is not [dense](Layer::dense) but
    /// spends its time in `Linear`s (a transformer block, a pooling + `Linear` head). When the
    /// engine splits the backward it passes split [`Linears`]: the layer's autodiff backward
    /// then computes the input gradient only through those calls, and their weight gradients
    /// are computed once for a group of micro-batches, as for dense layers (see
    /// [`crate::linears`]). Say so with [`splits_linears`](Layer::splits_linears), and make
    /// [`forward`](Layer::forward) call this with [`Linears::plain`]: one code path for both.
    /// The default ignores `linears` and calls [`forward`](Layer::forward).
    fn forward_linears(
        &self,
        input: Activation,
        linears: &mut Linears,
    ) -> Result<Activation, EngineError> {
        let _ = linears;
        self.forward(input)
    }

    /// Whether [`forward_linears`](Layer::forward_linears) calls its `Linear`s through the
    /// [`Linears`] it is given (the engine then splits the layer's backward). The default,
    /// `false`, keeps the layer's weight gradients on the autodiff path.
    fn splits_linears(&self) -> bool {
        false
    }

    /// Whether the training forward normalizes with the batch's own statistics (batch norm).
    /// Re-materialization's first forward runs in evaluation mode, on running statistics, so
    /// it would replay a different function: the pipeline builder then requires
    /// `Remat::Never`. The default is `false`.
    fn batch_statistics(&self) -> bool {
        false
    }

    /// Names of the skip tensors this layer stashes: parts of its output [`Bundle`](crate::Bundle)
    /// that a later layer [pops](Layer::pops) (a U-Net's long skips). The pipeline builder
    /// checks every pop against an earlier stash ([`check_skips`](crate::check_skips)). When
    /// the two layers sit on different stages, the engine takes the skip out of the stashing
    /// stage's output and sends it straight to the popping stage, which finds it in its input
    /// bundle; the stages between never see it ([`SkipRoutes`](crate::SkipRoutes)), so a layer
    /// between the stash and the pop must pass on the parts it does not know (as
    /// [`Bundle::with_parts`](crate::Bundle::with_parts) does) and never read a skip. The
    /// default: none.
    fn stashes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Names of the skip tensors this layer pops: parts of its input bundle that an earlier
    /// layer [stashed](Layer::stashes). The default: none.
    fn pops(&self) -> Vec<String> {
        Vec::new()
    }

    /// Under bf16 mixed precision ([`Precision::Bf16`](crate::Precision::Bf16)): the copy of
    /// this layer a forward runs, cast from the fp32 masters *on the graph* (so each
    /// micro-batch's gradients reach the masters, in fp32). The default casts every float
    /// parameter to `dtype`, and the layer computes in bf16 throughout.
    ///
    /// A layer that computes as `torch.autocast` does casts only the parameters autocast casts
    /// (the `Linear`s' weights and biases, with [`cast_module`](crate::cast_module)) and keeps
    /// the rest (embeddings, norms) fp32, as the built-in Llama does; it then usually keeps its
    /// input's dtype too ([`keeps_input_dtype`](Layer::keeps_input_dtype)).
    fn compute_copy(&self, dtype: FloatDType) -> Self
    where
        Self: Sized,
    {
        crate::adapter::cast_parameters(self.clone(), dtype)
    }

    /// Bytes this layer's training forward adds to what a micro-batch holds in burn's autodiff
    /// graph, given the `input` it took and the `output` it gave (their shapes and dtypes): its
    /// output and every value its ops saved for their backward, less its input where no op of
    /// it saved that (the previous layer counted it as its output; the graph then frees it,
    /// as a transformer block's input once its residual sum is made). `split`: its `Linear`s run split
    /// ([`forward_linears`](Layer::forward_linears) with split [`Linears`]). The memory model
    /// charges it per stashed micro-batch (`pipetrain::memory`).
    ///
    /// The default, the output alone ([`Activation::held_bytes`]), is what a layer keeps
    /// whose every op saves only its input (a `Linear`, a ReLU, a dense layer). A layer with
    /// intermediates its backward needs (norms, attention's scores, an MLP's hidden layer,
    /// convolutions' outputs under batch norm) states them from its shapes with the rules of
    /// [`saved`](crate::saved), one per burn op.
    fn graph_bytes(&self, input: &Activation, output: &Activation, split: bool) -> u64 {
        let _ = (input, split);
        output.held_bytes()
    }

    /// Under bf16 mixed precision: whether the engine leaves this layer's float input in the
    /// dtype it arrives in when the layer begins a stage (stage 0's data, or what a transport
    /// delivers). The default, `false`, casts it to bf16, so activations and input gradients
    /// cross stages in bf16. `true` suits a layer that keeps an fp32 residual stream, as
    /// `torch.autocast` does for a model whose embedding is fp32 (the built-in Llama); its
    /// activations then cross stages in fp32.
    fn keeps_input_dtype(&self) -> bool {
        false
    }
}
