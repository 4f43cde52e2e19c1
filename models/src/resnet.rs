//! ResNet-like CNN: a stem, `blocks` basic residual blocks, and a pooling classifier head.
//!
//! ```text
//!   [N, C_in, H, W]
//!   Stem      conv3×3 → BN → ReLU                                   [N, c, H, W]
//!   Residual  conv3×3 → BN → ReLU → conv3×3 → BN, + skip, ReLU      (× blocks)
//!             skip = identity, or 1×1 stride-2 conv → BN when the block downsamples
//!             (halves H and W, doubles the channels)
//!   Head      global average pool → Linear                          [N, classes]
//! ```
//!
//! Every item of the sequence is one [`ResNetLayer`], so the partitioner can cut between any
//! two: after the stem, between blocks, or before the head.
//!
//! ## Batch norm and micro-batches
//!
//! Batch norm is the one layer whose forward looks across the examples of a batch. The rule
//! here is GPipe's (and torchgpipe's default):
//!
//! - **Normalization** in training uses the statistics of the *micro-batch* the stage is
//!   running, never of the whole mini-batch. No statistics cross micro-batches or stages.
//! - **Running statistics** (`running_mean`, `running_var`) are updated by burn's `BatchNorm`
//!   once per training forward, so a pipeline with `m` micro-batches updates them `m` times per
//!   step (momentum 0.1 each), in micro-batch order, and never on a backward. In evaluation
//!   (a non-autodiff forward) they normalize instead of the batch statistics.
//! - Hence a pipeline with `m` micro-batches matches single-device training that runs the same
//!   `m` micro-batches one after another with accumulated gradients —
//!   [`SingleDevice::step_chunked`](pipetrain_engine::SingleDevice::step_chunked) with
//!   `chunks = m` — and not one full-batch forward
//!   ([`SingleDevice::step`](pipetrain_engine::SingleDevice::step)), whose statistics and
//!   single running-statistics update differ.
//! - Data parallelism sums parameter gradients; running statistics are buffers: each replica
//!   updates its own from its micro-batches, then replica 0's are broadcast to the others after
//!   every optimizer step (PyTorch DDP's `broadcast_buffers`), so replicas stay identical
//!   (tested in the workspace's `tests/engine/data_parallel.rs`).
//! - burn keeps a running state's updates per thread and *averages* the values of different
//!   threads when it syncs. A stage runs each step on one thread of its pool; with
//!   `threads_per_worker(1)` that is always the same thread, so the updates chain exactly as in
//!   the reference. With more threads a step may land on another pool thread and the running
//!   statistics (only they: they never enter a training forward) can drift from the reference.
//! - **Re-materialization must be [`Remat::Never`](pipetrain_engine::Remat::Never)** for a
//!   model with batch norm — and that is not the default (`ExceptLast`), so set it. Remat's
//!   first forward runs on `Module::valid()` copies, where `BatchNorm` takes its evaluation
//!   path (running statistics): the activation sent downstream is not the one the backward
//!   recomputes with micro-batch statistics, so the gradients do not belong to the loss, and
//!   running statistics are updated at recomputation time, in backward order. The test
//!   `remat_is_not_exact_for_batch_norm` shows the difference.
//!
//! The parameter lists compared by [`difference`](pipetrain_engine::difference) include the
//! running statistics (burn visits them like parameters), so the equivalence test checks them
//! too.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::activation::relu;
use pipetrain_engine::{Activation, EngineError, Layer, Linears};

/// The shape of a ResNet-like model.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_engine::Layer;
/// use pipetrain_models::ResNetConfig;
/// let device = Device::flex();
/// let config = ResNetConfig::new(4, 2, 3).with_image(1, 8).with_downsample_every(1);
/// let layers = config.init(&device);
/// assert_eq!(layers.len(), 4); // stem + 2 blocks + head
/// let mut x = Tensor::<4>::zeros([2, 1, 8, 8], &device).into();
/// for layer in &layers {
///     x = layer.forward(x).unwrap();
/// }
/// assert_eq!(x.dims(), vec![2, 3]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResNetConfig {
    /// Channels after the stem (doubled at every downsampling block).
    pub channels: usize,
    /// Residual blocks.
    pub blocks: usize,
    /// Output classes (logits).
    pub classes: usize,
    /// Side of the square input images. The layers accept any side (the head pools globally);
    /// this is the size [`input_dims`](Self::input_dims) and the synthetic data use.
    pub image: usize,
    /// Channels of the input images.
    pub in_channels: usize,
    /// Every `downsample_every`-th block (blocks `k, 2k, …`; never block 0) halves the side with
    /// stride 2, doubles the channels and projects its skip with a 1×1 convolution + BN. `0`:
    /// no block downsamples.
    pub downsample_every: usize,
}

impl ResNetConfig {
    /// `blocks` residual blocks of `channels`, `classes` outputs, 32×32 RGB input, no
    /// downsampling.
    pub fn new(channels: usize, blocks: usize, classes: usize) -> Self {
        Self {
            channels,
            blocks,
            classes,
            image: 32,
            in_channels: 3,
            downsample_every: 0,
        }
    }

    /// With `in_channels`×`side`×`side` input images.
    pub fn with_image(self, in_channels: usize, side: usize) -> Self {
        Self {
            in_channels,
            image: side,
            ..self
        }
    }

    /// With a downsampling block every `k` blocks (`0`: none).
    pub fn with_downsample_every(self, k: usize) -> Self {
        Self {
            downsample_every: k,
            ..self
        }
    }

    /// The input shape for a batch of `batch` images: `[batch, in_channels, image, image]`.
    pub fn input_dims(&self, batch: usize) -> [usize; 4] {
        [batch, self.in_channels, self.image, self.image]
    }

    /// Whether block `j` downsamples.
    fn downsamples(&self, j: usize) -> bool {
        self.downsample_every > 0 && j > 0 && j % self.downsample_every == 0
    }

    /// The layer sequence: stem, blocks `0..blocks`, head.
    pub fn init(&self, device: &Device) -> Vec<ResNetLayer> {
        let mut layers = vec![ResNetLayer::Stem(Stem {
            conv: conv3x3(self.in_channels, self.channels, 1, device),
            norm: BatchNormConfig::new(self.channels).init(device),
        })];
        let mut channels = self.channels;
        for j in 0..self.blocks {
            let block = if self.downsamples(j) {
                let out = 2 * channels;
                Residual {
                    conv1: conv3x3(channels, out, 2, device),
                    norm1: BatchNormConfig::new(out).init(device),
                    conv2: conv3x3(out, out, 1, device),
                    norm2: BatchNormConfig::new(out).init(device),
                    projection: Some(Projection {
                        conv: Conv2dConfig::new([channels, out], [1, 1])
                            .with_stride([2, 2])
                            .with_bias(false)
                            .init(device),
                        norm: BatchNormConfig::new(out).init(device),
                    }),
                }
            } else {
                Residual {
                    conv1: conv3x3(channels, channels, 1, device),
                    norm1: BatchNormConfig::new(channels).init(device),
                    conv2: conv3x3(channels, channels, 1, device),
                    norm2: BatchNormConfig::new(channels).init(device),
                    projection: None,
                }
            };
            channels = block.norm2.gamma.dims()[0];
            layers.push(ResNetLayer::Residual(block));
        }
        layers.push(ResNetLayer::Head(Head {
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            linear: LinearConfig::new(channels, self.classes).init(device),
        }));
        layers
    }
}

/// A 3×3 convolution with padding 1 and no bias (batch norm follows).
fn conv3x3(input: usize, output: usize, stride: usize, device: &Device) -> Conv2d {
    conv3x3_with_bias(input, output, stride, false, device)
}

/// A 3×3 convolution with padding 1, with or without bias.
pub(crate) fn conv3x3_with_bias(
    input: usize,
    output: usize,
    stride: usize,
    bias: bool,
    device: &Device,
) -> Conv2d {
    Conv2dConfig::new([input, output], [3, 3])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .with_bias(bias)
        .init(device)
}

/// The stem: conv3×3 (`in_channels → channels`) → batch norm → ReLU.
#[derive(Module, Debug)]
pub struct Stem {
    /// The convolution.
    pub conv: Conv2d,
    /// Its batch norm.
    pub norm: BatchNorm,
}

/// The 1×1 stride-2 projection on the skip path of a downsampling block.
#[derive(Module, Debug)]
pub struct Projection {
    /// The 1×1 convolution.
    pub conv: Conv2d,
    /// Its batch norm.
    pub norm: BatchNorm,
}

/// A basic residual block: `relu(bn2(conv2(relu(bn1(conv1(x))))) + skip(x))`.
#[derive(Module, Debug)]
pub struct Residual {
    /// First 3×3 convolution (stride 2 if the block downsamples).
    pub conv1: Conv2d,
    /// Batch norm after `conv1`.
    pub norm1: BatchNorm,
    /// Second 3×3 convolution.
    pub conv2: Conv2d,
    /// Batch norm after `conv2`.
    pub norm2: BatchNorm,
    /// The skip's projection; `None`: identity skip.
    pub projection: Option<Projection>,
}

/// The classifier: global average pool, then a Linear to the class logits.
#[derive(Module, Debug)]
pub struct Head {
    /// Pools each channel to 1×1.
    pub pool: AdaptiveAvgPool2d,
    /// Channels → classes.
    pub linear: Linear,
}

/// One layer of a [`ResNetConfig`] model. Takes and returns rank-4 float `[N, C, H, W]`, except
/// the head, which returns rank-2 float logits `[N, classes]`.
#[derive(Module, Debug)]
// A model holds a handful of layers, once; boxing the block would only add an indirection.
#[allow(clippy::large_enum_variant)]
pub enum ResNetLayer {
    /// conv3×3 → BN → ReLU.
    Stem(Stem),
    /// A residual block.
    Residual(Residual),
    /// Pool and classify.
    Head(Head),
}

impl ResNetLayer {
    /// Channels this layer takes.
    fn in_channels(&self) -> usize {
        match self {
            ResNetLayer::Stem(s) => s.conv.weight.dims()[1],
            ResNetLayer::Residual(r) => r.conv1.weight.dims()[1],
            ResNetLayer::Head(h) => h.linear.weight.dims()[0],
        }
    }
}

impl Layer for ResNetLayer {
    /// The stem and the residual blocks hold batch norm; the head does not.
    fn batch_statistics(&self) -> bool {
        !matches!(self, ResNetLayer::Head(_))
    }

    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        self.forward_linears(input, &mut Linears::plain())
    }

    /// The head's `Linear` runs through `linears` (the engine splits its backward).
    fn forward_linears(
        &self,
        input: Activation,
        linears: &mut Linears,
    ) -> Result<Activation, EngineError> {
        let x: Tensor<4> = input.float()?;
        let channels = x.dims()[1];
        if channels != self.in_channels() {
            return Err(EngineError::LayerRejected(format!(
                "this ResNet layer takes {} channels, got {channels} (input {:?}); check the \
                 model's in_channels and the data's channel count",
                self.in_channels(),
                x.dims()
            )));
        }
        Ok(match self {
            ResNetLayer::Stem(s) => relu(s.norm.forward(s.conv.forward(x))).into(),
            ResNetLayer::Residual(r) => {
                let skip = match &r.projection {
                    Some(p) => p.norm.forward(p.conv.forward(x.clone())),
                    None => x.clone(),
                };
                let y = relu(r.norm1.forward(r.conv1.forward(x)));
                let y = r.norm2.forward(r.conv2.forward(y));
                relu(y + skip).into()
            }
            ResNetLayer::Head(h) => {
                let [n, c, _, _] = x.dims();
                let pooled: Tensor<2> = h.pool.forward(x).reshape([n, c]);
                linears.forward(&h.linear, pooled).into()
            }
        })
    }

    fn splits_linears(&self) -> bool {
        matches!(self, ResNetLayer::Head(_))
    }

    /// What each op keeps ([`saved`](pipetrain_engine::saved)), beside the input (which the first convolution saves,
    /// and a block's identity skip reads), each value of the output's shape and width: a
    /// convolution's output (batch norm saves its input), batch norm's output (ReLU saves its
    /// input), ReLU's output (the next convolution saves it). The stem: those three. A block:
    /// its first convolution, norm and ReLU; its second convolution and norm, the skip's sum
    /// made in the norm's buffer (the sum saves nothing) and the last ReLU's output; a
    /// projection's convolution too (its norm's output, saved by nothing, is freed after the
    /// sum). The head: its logits (pooling and the `Linear` save their inputs).
    fn graph_bytes(&self, input: &Activation, output: &Activation, split: bool) -> u64 {
        let _ = (input, split);
        let out = output.held_bytes();
        match self {
            ResNetLayer::Stem(_) => 3 * out,
            ResNetLayer::Residual(r) => (6 + u64::from(r.projection.is_some())) * out,
            ResNetLayer::Head(_) => out,
        }
    }
}
