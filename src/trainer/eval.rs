//! Held-out evaluation: accuracy for classifiers, perplexity for language models.

use std::fmt;

use crate::engine::Activation;
use crate::{Batch, CrossEntropy, Error, Layer, Loss};

/// The result of evaluating a model on held-out batches.
#[derive(Clone, Copy, Debug)]
pub enum Evaluation {
    /// Fraction of examples whose largest logit is their label.
    Accuracy {
        /// Correct predictions / examples.
        accuracy: f64,
        /// Examples evaluated.
        examples: usize,
    },
    /// `exp` of the mean next-token cross-entropy.
    Perplexity {
        /// The perplexity.
        perplexity: f64,
        /// Tokens evaluated.
        tokens: usize,
    },
}

impl fmt::Display for Evaluation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Evaluation::Accuracy { accuracy, examples } => {
                write!(f, "accuracy {:.2}% ({examples} examples)", 100.0 * accuracy)
            }
            Evaluation::Perplexity { perplexity, tokens } => {
                write!(f, "perplexity {perplexity:.3} ({tokens} tokens)")
            }
        }
    }
}

/// Evaluates `forward` (inference, no autodiff) on `batches`: perplexity for a language model,
/// accuracy otherwise.
///
/// # Errors
/// A forward or loss error.
pub fn evaluate(
    mut forward: impl FnMut(Activation) -> Result<Activation, Error>,
    batches: Vec<Batch>,
    language_model: bool,
) -> Result<Evaluation, Error> {
    let (mut correct, mut examples, mut loss_sum, mut tokens) = (0usize, 0usize, 0.0, 0usize);
    for batch in batches {
        let logits = forward(batch.inputs)?;
        if language_model {
            let n = batch.targets.dims().iter().product::<usize>();
            let loss = CrossEntropy
                .loss(logits, batch.targets)
                .map_err(pipetrain_engine::EngineError::bad_batch)?
                .into_scalar::<f64>();
            loss_sum += loss * n as f64;
            tokens += n;
        } else {
            let dims = logits.dims();
            let classes = *dims.last().unwrap_or(&1);
            let values = logits.to_f64_vec();
            let labels = batch.targets.to_f64_vec();
            for (row, label) in values.chunks(classes).zip(&labels) {
                let best = row
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map_or(0, |(i, _)| i);
                correct += usize::from(best as f64 == *label);
                examples += 1;
            }
        }
    }
    Ok(if language_model {
        Evaluation::Perplexity {
            perplexity: (loss_sum / tokens.max(1) as f64).exp(),
            tokens,
        }
    } else {
        Evaluation::Accuracy {
            accuracy: correct as f64 / examples.max(1) as f64,
            examples,
        }
    })
}

/// Inference through a whole layer sequence (evaluation mode: batch norm uses its running
/// statistics).
///
/// # Errors
/// A layer's forward error.
pub fn forward_all<L: Layer>(layers: &[L], inputs: Activation) -> Result<Activation, Error> {
    let mut x = inputs;
    for layer in layers {
        x = pipetrain_engine::inference_copy(layer)
            .forward(x)
            .map_err(pipetrain_engine::EngineError::bad_batch)?;
    }
    Ok(x)
}

/// [`evaluate`] of [`forward_all`] through `layers`.
///
/// # Errors
/// A forward or loss error.
pub fn evaluate_layers<L: Layer>(
    layers: &[L],
    batches: Vec<Batch>,
    language_model: bool,
) -> Result<Evaluation, Error> {
    evaluate(|x| forward_all(layers, x), batches, language_model)
}
