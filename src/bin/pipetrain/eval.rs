//! Held-out evaluation: accuracy for classifiers, perplexity for the GPT; the end of
//! `pipetrain train` and the whole of `pipetrain eval`.

use std::fmt;

use pipetrain::engine::Activation;
use pipetrain::{Batch, CrossEntropy, Layer, Loss};

use crate::args::TrainArgs;
use crate::data::Data;
use crate::exit::Exit;
use crate::failure::Failure;
use crate::model::Model;
use crate::paths;

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
/// A forward or loss error, as text.
pub fn evaluate(
    mut forward: impl FnMut(Activation) -> Result<Activation, String>,
    batches: Vec<Batch>,
    language_model: bool,
) -> Result<Evaluation, String> {
    let (mut correct, mut examples, mut loss_sum, mut tokens) = (0usize, 0usize, 0.0, 0usize);
    for batch in batches {
        let logits = forward(batch.inputs)?;
        if language_model {
            let n = batch.targets.dims().iter().product::<usize>();
            let loss = CrossEntropy
                .loss(logits, batch.targets)
                .map_err(|e| e.to_string())?
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
pub fn forward_all<L: Layer>(layers: &[L], inputs: Activation) -> Result<Activation, String> {
    let mut x = inputs;
    for layer in layers {
        x = layer.valid().forward(x).map_err(|e| e.to_string())?;
    }
    Ok(x)
}

/// [`evaluate`] of [`forward_all`] through `layers`.
fn evaluate_layers<L: Layer>(
    layers: &[L],
    batches: Vec<Batch>,
    language_model: bool,
) -> Result<Evaluation, String> {
    evaluate(|x| forward_all(layers, x), batches, language_model)
}

/// The weights to evaluate: `--init FILE` (a checkpoint or a state dict) or `--resume FILE` (a
/// checkpoint's weights), else the fresh init.
fn weights<L: Layer>(args: &TrainArgs, model: &Model, layers: Vec<L>) -> Result<Vec<L>, Failure> {
    match args.init.as_ref().or(args.resume.as_ref()) {
        Some(path) => crate::checkpoints::init(path, layers, args, model),
        None => Ok(layers),
    }
}

/// `pipetrain eval`: builds the model from `--seed`, loads `--init FILE` or `--resume FILE` if
/// given (e.g. a checkpoint of a trained run), evaluates it on the held-out split of `--data`, and prints the
/// result.
///
/// # Errors
/// Bad flags, or data or weights that do not fit them (usage); unreadable data or weights, or
/// a forward error (runtime).
pub fn run(args: &TrainArgs) -> Result<Exit, Failure> {
    crate::conflicts::eval(args)?;
    paths::inputs_exist(&[("--init", &args.init), ("--resume", &args.resume)])
        .map_err(Failure::usage)?;
    let device = args.device.first().device().map_err(Failure::usage)?;
    device.seed(args.seed);
    // Nothing trains: the training loader is built with batches of 1, so that a --batch larger
    // than the training split is no error here (it only sizes the held-out chunks).
    let data = Data::open(args, 1)?;
    let model = Model::from_args(args, data.shapes()).map_err(Failure::usage)?;
    model
        .check_fits(args.batch, 0, 1.0)
        .map_err(Failure::usage)?;
    let held_out = data.held_out(&model, args.batch, &device)?;
    let lm = model.is_language_model();
    let m = &model;
    let evaluation = match model {
        Model::Mlp(c) => evaluate_layers(&weights(args, m, c.init(&device))?, held_out, lm),
        Model::ResNet(c) => evaluate_layers(&weights(args, m, c.init(&device))?, held_out, lm),
        Model::UNet(c) => evaluate_layers(&weights(args, m, c.init(&device))?, held_out, lm),
        Model::Gpt(c) => evaluate_layers(&weights(args, m, c.init(&device))?, held_out, lm),
    }?;
    if let Some(path) = args.init.as_ref().or(args.resume.as_ref()) {
        println!("weights: {}", path.display());
    }
    println!("eval: {} on {}", model.describe(), data.describe());
    println!("held-out {evaluation}");
    Ok(Exit::Success)
}
