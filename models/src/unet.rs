//! U-Net-like CNN: long skips from each downsampling level to the upsampling level of the same
//! resolution, with a pooling classifier head.
//!
//! ```text
//!   [N, C_in, S, S]
//!   Stem     conv3×3 → ReLU                                         x: [N, c, S, S]
//!   Down d   stash skip{d} = x; conv3×3 stride 2 → ReLU              (d = 0..depth; halves S,
//!                                                                     doubles the channels)
//!   Up d     2× nearest upsample → conv3×3 → + pop skip{d} → ReLU    (d = depth−1..0)
//!   Head     global average pool → Linear                           [N, classes]
//! ```
//!
//! Between layers the image travels as a [`Bundle`]: `x` and every skip stashed and not yet
//! popped, all differentiable. Skip `skip{d}` is made by `Down d` and used by `Up d`, so the
//! partitioner may cut anywhere between them: in a pipeline the engine sends the skip straight
//! from the stage of `Down d` to the stage of `Up d` (the stages between never see it) and its
//! gradient straight back. Each layer declares
//! its skips ([`Layer::stashes`] / [`Layer::pops`]), which the pipeline builder checks. No batch
//! norm: any re-materialization mode is exact.

use burn::nn::conv::Conv2d;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use pipetrain_engine::{Activation, Bundle, EngineError, Layer};

/// The shape of a U-Net-like model.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_engine::Layer;
/// use pipetrain_models::UNetConfig;
/// let device = Device::flex();
/// let layers = UNetConfig::new(4, 2, 3).with_image(1, 8).init(&device);
/// assert_eq!(layers.len(), 6); // stem + 2 down + 2 up + head
/// assert_eq!(layers[1].stashes(), ["skip0"]);
/// assert_eq!(layers[4].pops(), ["skip0"]);
/// let mut x = Tensor::<4>::zeros([2, 1, 8, 8], &device).into();
/// for layer in &layers {
///     x = layer.forward(x).unwrap();
/// }
/// assert_eq!(x.dims(), vec![2, 3]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UNetConfig {
    /// Channels after the stem (doubled at every level down).
    pub channels: usize,
    /// Downsampling levels (and as many upsampling ones); the image side must divide by
    /// `2^depth`.
    pub depth: usize,
    /// Output classes (logits).
    pub classes: usize,
    /// Side of the square input images.
    pub image: usize,
    /// Channels of the input images.
    pub in_channels: usize,
}

impl UNetConfig {
    /// `depth` levels from `channels`, `classes` outputs, 32×32 RGB input.
    pub fn new(channels: usize, depth: usize, classes: usize) -> Self {
        Self {
            channels,
            depth,
            classes,
            image: 32,
            in_channels: 3,
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

    /// Why the image cannot pass `depth` halvings and come back to its size, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        let factor = 1usize.checked_shl(self.depth as u32).unwrap_or(0);
        if factor == 0 || self.image % factor != 0 || self.image == 0 {
            return Err(format!(
                "a {side}×{side} image does not halve {depth} times: use an image side that is \
                 a multiple of 2^{depth} = {factor}, or a smaller depth",
                side = self.image,
                depth = self.depth
            ));
        }
        Ok(())
    }

    /// The layer sequence: stem, `depth` down levels, `depth` up levels, head.
    pub fn init(&self, device: &Device) -> Vec<UNetLayer> {
        let width = |level: usize| self.channels << level;
        let mut layers = vec![UNetLayer::Stem(conv3x3(
            self.in_channels,
            width(0),
            1,
            device,
        ))];
        for level in 0..self.depth {
            layers.push(UNetLayer::Down(Down {
                conv: conv3x3(width(level), width(level + 1), 2, device),
                level,
            }));
        }
        for level in (0..self.depth).rev() {
            layers.push(UNetLayer::Up(Up {
                conv: conv3x3(width(level + 1), width(level), 1, device),
                level,
            }));
        }
        layers.push(UNetLayer::Head(
            LinearConfig::new(width(0), self.classes).init(device),
        ));
        layers
    }
}

/// A 3×3 convolution with padding 1 and a bias (no batch norm here).
fn conv3x3(input: usize, output: usize, stride: usize, device: &Device) -> Conv2d {
    crate::resnet::conv3x3_with_bias(input, output, stride, true, device)
}

/// The name of level `level`'s skip.
fn skip(level: usize) -> String {
    format!("skip{level}")
}

/// A level down: stashes its input as `skip{level}`, then a stride-2 conv3×3 and ReLU.
#[derive(Module, Debug)]
pub struct Down {
    /// `c·2^level → c·2^(level+1)` channels, stride 2.
    pub conv: Conv2d,
    /// Its level (a constant).
    pub level: usize,
}

/// A level up: 2× nearest upsampling, conv3×3, plus the popped `skip{level}`, ReLU.
#[derive(Module, Debug)]
pub struct Up {
    /// `c·2^(level+1) → c·2^level` channels.
    pub conv: Conv2d,
    /// Its level (a constant).
    pub level: usize,
}

/// One layer of a [`UNetConfig`] model. The stem takes rank-4 float images; the levels take and
/// return a bundle of `x` and the skips in flight; the head returns rank-2 float logits.
#[derive(Module, Debug)]
pub enum UNetLayer {
    /// conv3×3 → ReLU.
    Stem(Conv2d),
    /// A level down.
    Down(Down),
    /// A level up.
    Up(Up),
    /// Global average pool → Linear.
    Head(Linear),
}

/// `[N, C, S, S] → [N, C, 2S, 2S]`, each value repeated in a 2×2 block.
fn upsample(x: Tensor<4>) -> Tensor<4> {
    let [n, c, h, w] = x.dims();
    x.reshape([n, c, h, 1, w, 1])
        .expand([n, c, h, 2, w, 2])
        .reshape([n, c, 2 * h, 2 * w])
}

impl Layer for UNetLayer {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        Ok(match self {
            UNetLayer::Stem(conv) => {
                let x: Tensor<4> = input.float()?;
                Bundle::new().with("x", relu(conv.forward(x))).into()
            }
            UNetLayer::Down(d) => {
                let mut b = input.bundle()?;
                let x: Tensor<4> = b.take("x")?.float()?;
                let down = relu(d.conv.forward(x.clone()));
                Bundle::new()
                    .with("x", down)
                    .with(skip(d.level), x)
                    .with_parts(b)
                    .into()
            }
            UNetLayer::Up(u) => {
                let mut b = input.bundle()?;
                let x: Tensor<4> = b.take("x")?.float()?;
                let skipped: Tensor<4> = b.take(&skip(u.level))?.float()?;
                let up = u.conv.forward(upsample(x));
                if up.dims() != skipped.dims() {
                    return Err(EngineError::LayerRejected(format!(
                        "level {} upsampled to {:?} but its skip is {:?}: the image side must \
                         divide by 2^depth",
                        u.level,
                        up.dims(),
                        skipped.dims()
                    )));
                }
                Bundle::new()
                    .with("x", relu(up + skipped))
                    .with_parts(b)
                    .into()
            }
            UNetLayer::Head(linear) => {
                let x: Tensor<4> = input.bundle()?.take("x")?.float()?;
                let [n, c, _, _] = x.dims();
                let pooled = x.mean_dim(3).mean_dim(2).reshape([n, c]);
                pipetrain_engine::linear(linear, pooled).into()
            }
        })
    }

    fn stashes(&self) -> Vec<String> {
        match self {
            UNetLayer::Down(d) => vec![skip(d.level)],
            _ => Vec::new(),
        }
    }

    fn pops(&self) -> Vec<String> {
        match self {
            UNetLayer::Up(u) => vec![skip(u.level)],
            _ => Vec::new(),
        }
    }
}
