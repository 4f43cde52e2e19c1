//! The `Linear`s inside a layer, with their backward split: for layers that are more than a
//! [dense](crate::dense) layer (a transformer block, a classifier head behind a pooling) but
//! spend their time in `Linear`s.
//!
//! Such a layer runs its forward through [`Layer::forward_linears`](crate::Layer::forward_linears),
//! calling each `Linear` as `linears.forward(&self.up, x)` instead of `self.up.forward(x)`. The
//! rest of the layer stays on autodiff. When the engine splits the backward, each such call
//! computes `y = x·W + z`, where the weight enters the graph as a constant and `z` — the bias
//! broadcast over the rows, or zeros — is a fresh leaf that requires grad:
//!
//! - the **input-gradient pass** (`I`) is the layer's autodiff backward: it reaches `x` through
//!   the product (`dX = dY·Wᵀ`) but computes no weight gradient, and leaves the output gradient
//!   `dY` on the leaf `z`;
//! - the **weight-gradient pass** (`W`) computes `dW = Xᵀ·dY` and `db = Σ dY` from the kept `x`
//!   and `dY`, once per group of micro-batches over all their rows, as for dense layers
//!   ([`crate::dense`]).
//!
//! Otherwise (inference, a fused backward) each call computes `x·W + b` on the autodiff path.
//! Both compute the same product and the same sum, so the forward's bits do not depend on the
//! mode. Re-materialization's first pass of a split backward replays the split arithmetic with
//! nothing kept and nothing recorded.

use burn::nn::Linear;
use burn::prelude::*;

use crate::adapter::{self, LinearParams};

/// One `Linear` call of a split forward: what its weight gradient needs.
pub(crate) struct Tap {
    /// Which parameters (registered by the `W` pass).
    pub params: LinearParams,
    /// The call's input as rows (plain).
    pub input: Tensor<2>,
    /// The input is the previous call's, the same buffer ([`Linears::forward_each`]): kept
    /// once, so counted once.
    pub shared_input: bool,
    /// The leaf added to the product: its gradient is the output gradient `dY`.
    pub output: Tensor<2>,
}

/// How a layer's `Linear`s run in [`Layer::forward_linears`](crate::Layer::forward_linears):
/// as burn runs them, or split by the engine (see the [module docs](self)).
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::prelude::*;
/// use burn::tensor::activation::gelu;
/// use pipetrain_engine::{Activation, EngineError, Layer, Linears};
///
/// #[derive(Module, Debug)]
/// struct FeedForward {
///     up: Linear,
///     down: Linear,
/// }
///
/// impl Layer for FeedForward {
///     fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
///         self.forward_linears(input, &mut Linears::plain())
///     }
///     // One forward for both modes: the engine passes split `Linears` when it splits the
///     // backward.
///     fn forward_linears(
///         &self,
///         input: Activation,
///         linears: &mut Linears,
///     ) -> Result<Activation, EngineError> {
///         let x: Tensor<3> = input.float()?;
///         let hidden = gelu(linears.forward(&self.up, x));
///         Ok(linears.forward(&self.down, hidden).into())
///     }
///     fn splits_linears(&self) -> bool {
///         true
///     }
/// }
///
/// let device = Device::flex();
/// let layer = FeedForward {
///     up: LinearConfig::new(4, 16).init(&device),
///     down: LinearConfig::new(16, 4).init(&device),
/// };
/// let out = layer.forward(Tensor::<3>::ones([2, 3, 4], &device).into()).unwrap();
/// assert_eq!(out.dims(), vec![2, 3, 4]);
/// ```
#[derive(Default)]
pub struct Linears {
    mode: Mode,
    taps: Vec<Tap>,
}

/// How [`Linears`] runs its calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Mode {
    /// As burn runs them.
    #[default]
    Plain,
    /// Split, each call's tap kept.
    Split,
    /// The split arithmetic (the same bits), nothing kept and nothing recorded on the graph:
    /// re-materialization's first pass of a split backward.
    Replay,
}

impl std::fmt::Debug for Linears {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Linears")
            .field("mode", &self.mode)
            .field("calls", &self.taps.len())
            .finish()
    }
}

impl Linears {
    /// Every `Linear` as burn runs it: `x·W + b` (what
    /// [`Layer::forward`](crate::Layer::forward) passes).
    pub fn plain() -> Self {
        Self::default()
    }

    /// Split by the engine: each call keeps what its weight gradient needs.
    pub(crate) fn split() -> Self {
        Self {
            mode: Mode::Split,
            taps: Vec::new(),
        }
    }

    /// The split calls' arithmetic, keeping nothing: what a split training forward computes,
    /// with no tap and no graph (re-materialization's first pass; its layers' parameters
    /// require no gradient either).
    pub(crate) fn replay() -> Self {
        Self {
            mode: Mode::Replay,
            taps: Vec::new(),
        }
    }

    /// `linear` applied to `x` (`[…, d_input]` → `[…, d_output]`, any rank from 2).
    ///
    /// # Panics
    /// When `x`'s last dimension is not the layer's input size (as `Linear::forward`).
    pub fn forward<const D: usize>(&mut self, linear: &Linear, x: Tensor<D>) -> Tensor<D> {
        let dims = x.dims();
        let [fan_in, fan_out] = linear.weight.dims();
        let rows = Self::rows(&dims, fan_in);
        let y = self.call(linear, x.reshape([rows, fan_in]), false);
        let mut out = dims;
        out[D - 1] = fan_out;
        y.reshape(out)
    }

    /// Each of `linears` applied to the one input `x`, in order (attention's q, k and v; a
    /// gated MLP's gate and up): the same bits as calling [`forward`](Self::forward) on each
    /// with a clone of `x`, but a split backward keeps `x` once for all of them, and the memory
    /// accounting counts it once.
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::prelude::*;
    /// use pipetrain_engine::Linears;
    ///
    /// let device = Device::flex();
    /// let q = LinearConfig::new(4, 4).init(&device);
    /// let k = LinearConfig::new(4, 2).init(&device);
    /// let x = Tensor::<3>::ones([2, 3, 4], &device);
    /// let [yq, yk] = Linears::plain().forward_each([&q, &k], x);
    /// assert_eq!((yq.dims(), yk.dims()), ([2, 3, 4], [2, 3, 2]));
    /// ```
    ///
    /// # Panics
    /// When `x`'s last dimension is not every layer's input size.
    pub fn forward_each<const D: usize, const N: usize>(
        &mut self,
        linears: [&Linear; N],
        x: Tensor<D>,
    ) -> [Tensor<D>; N] {
        let dims = x.dims();
        let Some(fan_in) = linears.first().map(|l| l.weight.dims()[0]) else {
            return linears.map(|_| x.clone());
        };
        let rows = Self::rows(&dims, fan_in);
        // One reshape: every call's kept input is the same buffer.
        let x = x.reshape([rows, fan_in]);
        let mut first = true;
        linears.map(|linear| {
            let y = self.call(linear, x.clone(), !first);
            first = false;
            let mut out = dims;
            out[D - 1] = linear.weight.dims()[1];
            y.reshape(out)
        })
    }

    /// The rows of an input of dimensions `dims` to a `Linear` of `fan_in` input features.
    fn rows<const D: usize>(dims: &[usize; D], fan_in: usize) -> usize {
        assert_eq!(
            dims[D - 1],
            fan_in,
            "this Linear takes {fan_in} input features, got {dims:?}"
        );
        dims[..D - 1].iter().product()
    }

    /// `linear` applied to the rows `x`; `shared`: `x` is the previous call's input.
    fn call(&mut self, linear: &Linear, x: Tensor<2>, shared: bool) -> Tensor<2> {
        let [fan_in, _] = linear.weight.dims();
        Self::rows(&x.dims(), fan_in);
        if self.mode == Mode::Plain {
            return adapter::linear_rows(
                x,
                linear.weight.val(),
                linear.bias.as_ref().map(|b| b.val()),
            );
        }
        let track = self.mode == Mode::Split;
        let product = adapter::split_product(
            x,
            linear.weight.val(),
            linear.bias.as_ref().map(|b| b.val()),
            track,
        );
        if track {
            self.taps.push(Tap {
                params: LinearParams::of(linear),
                input: product.input,
                shared_input: shared,
                output: product.leaf,
            });
        }
        product.output
    }

    /// The calls' kept values, in call order.
    pub(crate) fn into_taps(self) -> Vec<Tap> {
        self.taps
    }
}

#[cfg(test)]
mod tests {
    use burn::nn::LinearConfig;

    use super::*;

    /// Plain and split calls compute the same bits (a re-materialized forward replays what was
    /// sent), with and without a bias, on rank 2 and 3; only the split one keeps a tap.
    #[test]
    fn plain_and_split_forwards_are_bitwise_equal() {
        let device = adapter::autodiff_device(&Device::flex());
        for bias in [true, false] {
            let linear = LinearConfig::new(6, 5).with_bias(bias).init(&device);
            let x = Tensor::<3>::random([2, 3, 6], burn::tensor::Distribution::Default, &device);
            let (mut plain, mut split) = (Linears::plain(), Linears::split());
            let a = plain.forward(&linear, x.clone()).into_data();
            let b = split.forward(&linear, x.clone()).into_data();
            assert_eq!(a, b, "bias={bias}");
            let burn = linear.forward(x.clone()).into_data();
            burn.assert_approx_eq::<f32>(&a, burn::tensor::Tolerance::default());
            let y2 = split.forward(&linear, x.clone().reshape([6, 6]));
            assert_eq!(y2.dims(), [6, 5]);
            // Replayed on a copy whose parameters require no gradient: the same bits, no
            // tap, and nothing on the graph.
            let mut replay = Linears::replay();
            let untracked = adapter::untracked_copy(&linear);
            let c = replay.forward(&untracked, x.clone());
            assert!(
                !adapter::is_tracked(&c),
                "bias={bias}: the replay recorded a step"
            );
            assert_eq!(a, c.into_data(), "bias={bias}");
            assert!(replay.into_taps().is_empty());
            assert!(plain.into_taps().is_empty());
            let taps = split.into_taps();
            assert_eq!(taps.len(), 2);
            assert_eq!(taps[0].input.dims(), [6, 6]);
            assert_eq!(taps[0].output.dims(), [6, 5]);
            assert_eq!(taps[0].params.has_bias(), bias);
        }
    }
}
