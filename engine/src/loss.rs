//! Losses, computed on the last stage.

use burn::nn::loss::{CrossEntropyLoss, MseLoss, Reduction};
use burn::prelude::*;

use crate::activation::{Activation, ActivationError};

/// A loss: the mean over one micro-batch of the last stage's output against its targets. The
/// engine scales it by 1/(m·R) so that the step's summed gradients equal the full-batch mean
/// gradient.
pub trait Loss: Send + Sync {
    /// The micro-batch's mean loss, a one-element tensor.
    fn loss(&self, output: Activation, target: Activation) -> Result<Tensor<1>, ActivationError>;
}

/// Cross-entropy of rank-2 logits `[batch, classes]` against rank-1 int class labels `[batch]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrossEntropy;

impl Loss for CrossEntropy {
    fn loss(&self, output: Activation, target: Activation) -> Result<Tensor<1>, ActivationError> {
        let logits: Tensor<2> = output.float()?;
        let labels: Tensor<1, Int> = target.int()?;
        Ok(CrossEntropyLoss::new(None, &logits.device()).forward(logits, labels))
    }
}

/// Mean squared error between float tensors of the same rank and shape.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mse;

impl Loss for Mse {
    fn loss(&self, output: Activation, target: Activation) -> Result<Tensor<1>, ActivationError> {
        let (out_dims, target_dims) = (output.dims(), target.dims());
        if out_dims != target_dims {
            return Err(ActivationError::Other(format!(
                "MSE needs output and target of the same shape: output {out_dims:?}, target {target_dims:?}"
            )));
        }
        let target = target.detach();
        macro_rules! mse {
            ($d:literal) => {
                MseLoss::new().forward(
                    output.float::<$d>()?,
                    target.float::<$d>()?,
                    Reduction::Mean,
                )
            };
        }
        Ok(match out_dims.len() {
            1 => mse!(1),
            2 => mse!(2),
            3 => mse!(3),
            _ => mse!(4),
        })
    }
}
