//! MLP: `layers` × (Linear(width → width) + ReLU), then a Linear head to `classes` logits.
//!
//! This is exactly the `MLP-<L>x<W>` workload of the PyTorch peer harness
//! (`shared/peers/common.py`): input dim = width, ReLU after every hidden block, none after the
//! head, cross-entropy loss. `MLP-8x1024` is `MlpConfig::new(1024, 8, 10)`.

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use pipetrain_engine::{Activation, ActivationError, Dense, Layer};

/// The shape of an MLP.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_models::MlpConfig;
/// let layers = MlpConfig::new(16, 3, 4).init(&Device::flex());
/// assert_eq!(layers.len(), 4); // 3 hidden blocks + head
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlpConfig {
    /// Input dim and hidden width.
    pub width: usize,
    /// Hidden Linear+ReLU blocks.
    pub hidden_layers: usize,
    /// Output classes (logits).
    pub classes: usize,
    /// Input features (defaults to `width`, as in the peer workload).
    pub input: usize,
}

impl MlpConfig {
    /// `hidden_layers` blocks of `width`, `classes` outputs, input dim = width.
    pub fn new(width: usize, hidden_layers: usize, classes: usize) -> Self {
        Self {
            width,
            hidden_layers,
            classes,
            input: width,
        }
    }

    /// With a different input dim.
    pub fn with_input(self, input: usize) -> Self {
        Self { input, ..self }
    }

    /// The layer sequence: blocks `fc0..fc{L-1}`, then the head `fc{L}`.
    pub fn init(&self, device: &Device) -> Vec<MlpLayer> {
        let mut layers: Vec<MlpLayer> = (0..self.hidden_layers)
            .map(|j| {
                let inp = if j == 0 { self.input } else { self.width };
                MlpLayer::Block(Block {
                    linear: LinearConfig::new(inp, self.width).init(device),
                })
            })
            .collect();
        let head_in = if self.hidden_layers == 0 {
            self.input
        } else {
            self.width
        };
        layers.push(MlpLayer::Head(
            LinearConfig::new(head_in, self.classes).init(device),
        ));
        layers
    }

    /// Parameters in the whole model.
    pub fn num_params(&self) -> usize {
        let mut n = 0;
        let mut inp = self.input;
        for _ in 0..self.hidden_layers {
            n += inp * self.width + self.width;
            inp = self.width;
        }
        n + inp * self.classes + self.classes
    }
}

/// A hidden block: Linear then ReLU.
#[derive(Module, Debug)]
pub struct Block {
    /// The linear map.
    pub linear: Linear,
}

/// One layer of an [`MlpConfig`] model.
#[derive(Module, Debug)]
pub enum MlpLayer {
    /// Linear + ReLU.
    Block(Block),
    /// The final Linear (logits; no activation).
    Head(Linear),
}

impl Layer for MlpLayer {
    fn forward(&self, input: Activation) -> Result<Activation, ActivationError> {
        let x: Tensor<2> = input.float()?;
        Ok(match self {
            MlpLayer::Block(b) => relu(b.linear.forward(x)),
            MlpLayer::Head(l) => l.forward(x),
        }
        .into())
    }

    fn dense(&self) -> Option<Dense<'_>> {
        Some(match self {
            MlpLayer::Block(b) => Dense::linear(&b.linear).relu(),
            MlpLayer::Head(l) => Dense::linear(l),
        })
    }
}
