//! MLP: `layers` × (Linear(width → width) + ReLU), then a Linear head to `classes` logits.
//!
//! This is exactly the `MLP-<L>x<W>` workload of the PyTorch peer harness
//! (`shared/peers/common.py`): input dim = width, ReLU after every hidden block, none after the
//! head, cross-entropy loss. `MLP-8x1024` is `MlpConfig::new(1024, 8, 10)`.
//!
//! The hidden blocks start from He (Kaiming normal, fan-in, gain √2) weights, the standard for
//! deep ReLU stacks: under PyTorch's and burn's default Linear init (Kaiming uniform with
//! a = √5, variance 1/(3·fan_in)) each ReLU block scales the signal's variance by 1/6, so the
//! logits of MLP-8x1024 start ~10⁻³ of the input's scale and SGD at lr 0.01 does not move the
//! loss in 20 steps. The head keeps the default init. In PyTorch:
//! `nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")`. Timings do not depend on it.

use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use pipetrain_engine::{Activation, Dense, EngineError, Layer};

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

    /// Rename rules (regex, replacement) from the names of the PyTorch module that mirrors
    /// this MLP onto this model's: `nn.Sequential(nn.Linear(input, width), nn.ReLU(), …,
    /// nn.Linear(width, classes))`, whose state dict has `0.weight`, `0.bias`, `2.weight`, …
    /// (the ReLUs take the odd indices), while this model has `0.linear.weight`, … and the head
    /// `{L}.weight`. PyTorch's index is twice the layer's.
    ///
    /// ```
    /// use pipetrain_models::MlpConfig;
    /// let rules = MlpConfig::new(8, 2, 3).pytorch_renames();
    /// assert_eq!(rules[1], (r"^2\.(weight|bias)$".to_string(), "1.linear.$1".to_string()));
    /// assert_eq!(rules[2], (r"^4\.(weight|bias)$".to_string(), "2.$1".to_string()));
    /// ```
    pub fn pytorch_renames(&self) -> Vec<(String, String)> {
        (0..=self.hidden_layers)
            .map(|i| {
                let to = match i < self.hidden_layers {
                    true => format!("{i}.linear.$1"),
                    false => format!("{i}.$1"),
                };
                (format!(r"^{}\.(weight|bias)$", 2 * i), to)
            })
            .collect()
    }

    /// The layer sequence: blocks `fc0..fc{L-1}` (He-initialised), then the head `fc{L}`.
    pub fn init(&self, device: &Device) -> Vec<MlpLayer> {
        let mut layers: Vec<MlpLayer> = (0..self.hidden_layers)
            .map(|j| {
                let inp = if j == 0 { self.input } else { self.width };
                MlpLayer::Block(Block {
                    linear: LinearConfig::new(inp, self.width)
                        .with_initializer(Initializer::KaimingNormal {
                            gain: std::f64::consts::SQRT_2,
                            fan_out_only: false,
                        })
                        .init(device),
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
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        let x: Tensor<2> = input.float()?;
        Ok(match self {
            MlpLayer::Block(b) => relu(pipetrain_engine::linear(&b.linear, x)),
            MlpLayer::Head(l) => pipetrain_engine::linear(l, x),
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
