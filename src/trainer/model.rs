//! The reference models of `pipetrain-models` as one type, [`Model`]: their synthetic batches,
//! how loaded inputs are shaped for them, their description (stored in checkpoints), and what
//! their single-device reference and PyTorch weights look like.

use burn::prelude::*;
use pipetrain_models::{GptConfig, MlpConfig, ResNetConfig, UNetConfig, synthetic};

use crate::engine::{Activation, EngineError};
use crate::{Batch, Tie};

/// A reference model's configuration.
#[derive(Clone, Copy, Debug)]
pub enum Model {
    /// An MLP.
    Mlp(MlpConfig),
    /// A ResNet-like CNN with batch norm.
    ResNet(ResNetConfig),
    /// A U-Net-like CNN whose skips cross stages.
    UNet(UNetConfig),
    /// A GPT-like decoder.
    Gpt(GptConfig),
}

impl Model {
    /// Rename rules from the names of the PyTorch module that mirrors the model onto its own:
    /// the MLP's `nn.Sequential` (see [`MlpConfig::pytorch_renames`]); none for the GPT, whose
    /// documented PyTorch module has its names (docs/pytorch.md), the ResNet and the U-Net.
    pub fn pytorch_renames(&self) -> Vec<(String, String)> {
        match self {
            Model::Mlp(c) => c.pytorch_renames(),
            Model::ResNet(_) | Model::UNet(_) | Model::Gpt(_) => Vec::new(),
        }
    }

    /// The ties of tied embeddings: the GPT's embedding and head; `None` for a model without
    /// them.
    pub fn embedding_ties(&self) -> Option<Vec<Tie>> {
        match self {
            Model::Gpt(c) => Some(vec![c.tie_embeddings()]),
            _ => None,
        }
    }

    /// A one-line description: the run's banner, and the `model` a checkpoint stores.
    pub fn describe(&self) -> String {
        match self {
            Model::Mlp(c) => format!(
                "MLP-{}x{} (input {}, {} classes)",
                c.hidden_layers, c.width, c.input, c.classes
            ),
            Model::ResNet(c) => format!(
                "ResNet ({} blocks of {} channels, {}×{}×{} images, {} classes)",
                c.blocks, c.channels, c.in_channels, c.image, c.image, c.classes
            ),
            Model::UNet(c) => format!(
                "U-Net ({} levels from {} channels, {}×{}×{} images, {} classes)",
                c.depth, c.channels, c.in_channels, c.image, c.image, c.classes
            ),
            Model::Gpt(c) => format!(
                "GPT ({} layers, d_model {}, {} heads, context {}, vocab {})",
                c.layers, c.d_model, c.heads, c.context, c.vocab
            ),
        }
    }

    /// Synthetic batch `index` of a run seeded with `seed`.
    pub fn synthetic(&self, seed: u64, index: u64, batch: usize, device: &Device) -> Batch {
        match self {
            Model::Mlp(c) => {
                synthetic::classification(seed, index, batch, c.input, c.classes, device)
            }
            Model::ResNet(ResNetConfig {
                in_channels,
                image,
                classes,
                ..
            })
            | Model::UNet(UNetConfig {
                in_channels,
                image,
                classes,
                ..
            }) => synthetic::images(seed, index, batch, *in_channels, *image, *classes, device),
            Model::Gpt(c) => synthetic::tokens(seed, index, batch, c.context, c.vocab, device),
        }
    }

    /// `inputs` of a loaded batch in the shape the model takes: flattened for the MLP, `[N, C,
    /// H, W]` for the ResNet, as they are for the GPT.
    pub fn shape_inputs(&self, inputs: Activation) -> Result<Activation, EngineError> {
        let dims = inputs.dims();
        let n = dims[0];
        let rest: usize = dims[1..].iter().product();
        match self {
            Model::Mlp(_) => match dims.len() {
                3 => Ok(inputs.float::<3>()?.reshape([n, rest]).into()),
                4 => Ok(inputs.float::<4>()?.reshape([n, rest]).into()),
                _ => Ok(inputs), // rank 2 already; other ranks fail in the first layer
            },
            Model::ResNet(ResNetConfig {
                in_channels, image, ..
            })
            | Model::UNet(UNetConfig {
                in_channels, image, ..
            }) => match dims.len() {
                4 => Ok(inputs),
                2 => Ok(inputs
                    .float::<2>()?
                    .reshape([n, *in_channels, *image, *image])
                    .into()),
                _ => Ok(inputs
                    .float::<3>()?
                    .reshape([n, *in_channels, *image, *image])
                    .into()),
            },
            Model::Gpt(_) => Ok(inputs),
        }
    }

    /// Whether the model predicts next tokens (report perplexity, not accuracy).
    pub fn is_language_model(&self) -> bool {
        matches!(self, Model::Gpt(_))
    }

    /// Chunks of the single-device reference step, when it must run micro-batch by
    /// micro-batch (batch norm: each micro-batch is normalized with its own statistics), in the
    /// order the pipeline cuts the batch: `replicas` shards × `micro_batches` each. `None`: one
    /// full-batch step.
    pub fn reference_chunks(&self, replicas: usize, micro_batches: usize) -> Option<usize> {
        matches!(self, Model::ResNet(_)).then_some(replicas * micro_batches)
    }
}
