//! Losses, computed on the last stage.

use burn::nn::loss::{CrossEntropyLoss, MseLoss, Reduction};
use burn::prelude::*;

use crate::error::EngineError;
use crate::model::activation::Activation;

/// A loss: the mean over one micro-batch of the last stage's output against its targets. The
/// engine weights it by the micro-batch's rows / the batch's rows (micro-batches may differ by a
/// row) so that the step's summed gradients equal the full-batch mean gradient.
pub trait Loss: Send + Sync {
    /// The micro-batch's mean loss, a one-element tensor.
    fn loss(&self, output: Activation, target: Activation) -> Result<Tensor<1>, EngineError>;
}

/// Cross-entropy of logits against int class labels, the mean over every labelled position:
///
/// - classification: rank-2 logits `[batch, classes]` against rank-1 labels `[batch]`;
/// - language modelling: rank-3 logits `[batch, tokens, vocab]` against rank-2 next-token ids
///   `[batch, tokens]`, flattened to `[batch·tokens, vocab]` / `[batch·tokens]`, so the loss is
///   the mean over all tokens of the micro-batch (every row of a batch has the same token count, so
///   the engine's weighting by rows weights by tokens and gives the full-batch token mean).
///
/// Other ranks, float targets, or targets whose shape is not the logits' shape minus the last
/// dimension are an [`EngineError`], not a panic.
///
/// ```
/// use burn::prelude::*;
/// use burn::tensor::Int;
/// use pipetrain_engine::{CrossEntropy, Loss};
/// let device = Device::flex();
/// let logits = Tensor::<3>::zeros([2, 4, 8], &device); // uniform over 8 tokens
/// let ids = Tensor::<2, Int>::zeros([2, 4], &device);
/// let loss = CrossEntropy.loss(logits.into(), ids.into()).unwrap();
/// assert!((loss.into_scalar::<f64>() - 8f64.ln()).abs() < 1e-5);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CrossEntropy;

impl Loss for CrossEntropy {
    fn loss(&self, output: Activation, target: Activation) -> Result<Tensor<1>, EngineError> {
        let (out_dims, target_dims) = (output.dims(), target.dims());
        let labelled = &out_dims[..out_dims.len().saturating_sub(1)];
        let check_shape = || {
            if target_dims[..] == *labelled {
                Ok(())
            } else {
                Err(EngineError::LayerRejected(format!(
                    "cross-entropy needs one label per row of logits: logits {out_dims:?} want \
                     labels {labelled:?}, got {target_dims:?}"
                )))
            }
        };
        let (logits, labels): (Tensor<2>, Tensor<1, Int>) = match out_dims.len() {
            2 => {
                let (logits, labels) = (output.float()?, target.int()?);
                check_shape()?;
                (logits, labels)
            }
            3 => {
                let (logits, ids): (Tensor<3>, Tensor<2, Int>) = (output.float()?, target.int()?);
                check_shape()?;
                let [batch, tokens, vocab] = logits.dims();
                (
                    logits.reshape([batch * tokens, vocab]),
                    ids.reshape([batch * tokens]),
                )
            }
            _ => {
                return Err(output.mismatch(
                    "rank-2 float [batch, classes] or rank-3 float [batch, tokens, vocab]",
                ));
            }
        };
        Ok(CrossEntropyLoss::new(None, &logits.device()).forward(logits, labels))
    }
}

/// Mean squared error between float tensors of the same rank and shape.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mse;

impl Loss for Mse {
    fn loss(&self, output: Activation, target: Activation) -> Result<Tensor<1>, EngineError> {
        let (out_dims, target_dims) = (output.dims(), target.dims());
        if out_dims != target_dims {
            return Err(EngineError::LayerRejected(format!(
                "MSE needs output and target of the same shape: output {out_dims:?}, target {target_dims:?}"
            )));
        }
        let target = target.plain();
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

#[cfg(test)]
mod tests {
    use burn::tensor::TensorData;

    use super::*;

    fn device() -> Device {
        Device::flex()
    }

    #[test]
    fn rank_3_is_the_mean_over_all_tokens_of_the_flattened_rank_2_loss() {
        let values: Vec<f32> = (0..2 * 3 * 5)
            .map(|i| ((i * 7) % 11) as f32 * 0.3)
            .collect();
        let ids: Vec<i64> = vec![0, 4, 2, 1, 3, 3];
        let logits3 = Tensor::<3>::from_data(TensorData::new(values.clone(), [2, 3, 5]), &device());
        let ids2 = Tensor::<2, Int>::from_data(TensorData::new(ids.clone(), [2, 3]), &device());
        let logits2 = Tensor::<2>::from_data(TensorData::new(values, [6, 5]), &device());
        let ids1 = Tensor::<1, Int>::from_data(TensorData::new(ids, [6]), &device());
        let a = CrossEntropy.loss(logits3.into(), ids2.into()).unwrap();
        let b = CrossEntropy.loss(logits2.into(), ids1.into()).unwrap();
        assert_eq!(a.into_scalar::<f64>(), b.into_scalar::<f64>());
    }

    #[test]
    fn wrong_ranks_and_shapes_are_errors() {
        let d = device();
        let ce = |out: Activation, target: Activation| CrossEntropy.loss(out, target).unwrap_err();
        let err = ce(
            Tensor::<4>::zeros([2, 3, 4, 5], &d).into(),
            Tensor::<3, Int>::zeros([2, 3, 4], &d).into(),
        );
        assert!(
            err.to_string()
                .contains("or rank-3 float [batch, tokens, vocab] tensor, got a rank-4 float"),
            "{err}"
        );
        let err = ce(
            Tensor::<3>::zeros([2, 3, 5], &d).into(),
            Tensor::<1, Int>::zeros([6], &d).into(),
        );
        assert!(
            err.to_string()
                .contains("expected a rank-2 int tensor, got a rank-1 int"),
            "{err}"
        );
        let err = ce(
            Tensor::<3>::zeros([2, 3, 5], &d).into(),
            Tensor::<2, Int>::zeros([3, 2], &d).into(),
        );
        assert!(
            err.to_string()
                .contains("logits [2, 3, 5] want labels [2, 3], got [3, 2]"),
            "{err}"
        );
        let err = ce(
            Tensor::<2>::zeros([4, 5], &d).into(),
            Tensor::<1, Int>::zeros([3], &d).into(),
        );
        assert!(err.to_string().contains("got [3]"), "{err}");
    }
}
