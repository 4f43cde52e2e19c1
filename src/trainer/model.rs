//! The reference models of `pipetrain-models` as one type, [`ReferenceModel`]: their synthetic batches,
//! how loaded inputs are shaped for them, their description (stored in checkpoints), and what
//! their single-device reference and PyTorch weights look like.

use burn::prelude::*;
use pipetrain_models::{GptConfig, LlamaConfig, MlpConfig, ResNetConfig, UNetConfig, synthetic};

use crate::engine::{Activation, EngineError, Layout};
use crate::{Batch, Tie};

/// A reference model's configuration.
#[derive(Clone, Copy, Debug)]
pub enum ReferenceModel {
    /// An MLP.
    Mlp(MlpConfig),
    /// A ResNet-like CNN with batch norm.
    ResNet(ResNetConfig),
    /// A U-Net-like CNN whose skips cross stages.
    UNet(UNetConfig),
    /// A GPT-like decoder.
    Gpt(GptConfig),
    /// A Llama-family decoder (from flags, or a Hugging Face checkpoint's `config.json`).
    Llama {
        /// The decoder.
        config: LlamaConfig,
        /// Tokens per example (synthetic sequences, `text:` windows): at most the config's
        /// `max_positions`.
        context: usize,
    },
}

impl ReferenceModel {
    /// Rename rules from the names of the PyTorch module that mirrors the model onto its own:
    /// the MLP's `nn.Sequential` (see [`MlpConfig::pytorch_renames`]); none for the GPT, whose
    /// documented PyTorch module has its names (docs/pytorch.md), the ResNet and the U-Net.
    pub fn pytorch_renames(&self) -> Vec<(String, String)> {
        match self {
            ReferenceModel::Mlp(c) => c.pytorch_renames(),
            ReferenceModel::ResNet(_)
            | ReferenceModel::UNet(_)
            | ReferenceModel::Gpt(_)
            | ReferenceModel::Llama { .. } => Vec::new(),
        }
    }

    /// The ties of tied embeddings: the GPT's embedding and head; `None` for a model without
    /// them.
    pub fn embedding_ties(&self) -> Option<Vec<Tie>> {
        match self {
            ReferenceModel::Gpt(c) => Some(vec![c.tie_embeddings()]),
            ReferenceModel::Llama { config, .. } => Some(vec![config.tie_embeddings()]),
            _ => None,
        }
    }

    /// A one-line description: the run's banner, and the `model` a checkpoint stores.
    pub fn describe(&self) -> String {
        match self {
            ReferenceModel::Mlp(c) => format!(
                "MLP-{}x{} (input {}, {} classes)",
                c.hidden_layers, c.width, c.input, c.classes
            ),
            ReferenceModel::ResNet(c) => format!(
                "ResNet ({} blocks of {} channels, {}×{}×{} images, {} classes)",
                c.blocks, c.channels, c.in_channels, c.image, c.image, c.classes
            ),
            ReferenceModel::UNet(c) => format!(
                "U-Net ({} levels from {} channels, {}×{}×{} images, {} classes)",
                c.depth, c.channels, c.in_channels, c.image, c.image, c.classes
            ),
            ReferenceModel::Gpt(c) => format!(
                "GPT ({} layers, d_model {}, {} heads, context {}, vocab {})",
                c.layers, c.d_model, c.heads, c.context, c.vocab
            ),
            ReferenceModel::Llama { config: c, context } => format!(
                "Llama ({} layers, hidden {}, {} heads, {} kv heads, intermediate {}, context \
                 {context} of {}, vocab {}{})",
                c.layers,
                c.hidden,
                c.heads,
                c.kv_heads,
                c.intermediate,
                c.max_positions,
                c.vocab,
                if c.tie_word_embeddings { ", tied" } else { "" }
            ),
        }
    }

    /// Synthetic batch `index` of a run seeded with `seed`.
    pub fn synthetic(&self, seed: u64, index: u64, batch: usize, device: &Device) -> Batch {
        match self {
            ReferenceModel::Mlp(c) => {
                synthetic::classification(seed, index, batch, c.input, c.classes, device)
            }
            ReferenceModel::ResNet(ResNetConfig {
                in_channels,
                image,
                classes,
                ..
            })
            | ReferenceModel::UNet(UNetConfig {
                in_channels,
                image,
                classes,
                ..
            }) => synthetic::images(seed, index, batch, *in_channels, *image, *classes, device),
            ReferenceModel::Gpt(c) => {
                synthetic::tokens(seed, index, batch, c.context, c.vocab, device)
            }
            ReferenceModel::Llama { config, context } => {
                synthetic::tokens(seed, index, batch, *context, config.vocab, device)
            }
        }
    }

    /// `inputs` of a loaded batch in the shape the model takes: flattened for the MLP, `[N, C,
    /// H, W]` for the ResNet, as they are for the GPT.
    pub fn shape_inputs(&self, inputs: Activation) -> Result<Activation, EngineError> {
        let dims = inputs.dims();
        let n = dims[0];
        let rest: usize = dims[1..].iter().product();
        match self {
            ReferenceModel::Mlp(_) => match dims.len() {
                3 => Ok(inputs.float::<3>()?.reshape([n, rest]).into()),
                4 => Ok(inputs.float::<4>()?.reshape([n, rest]).into()),
                _ => Ok(inputs), // rank 2 already; other ranks fail in the first layer
            },
            ReferenceModel::ResNet(ResNetConfig {
                in_channels, image, ..
            })
            | ReferenceModel::UNet(UNetConfig {
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
            ReferenceModel::Gpt(_) | ReferenceModel::Llama { .. } => Ok(inputs),
        }
    }

    /// Whether the model predicts next tokens (report perplexity, not accuracy).
    pub fn is_language_model(&self) -> bool {
        matches!(self, ReferenceModel::Gpt(_) | ReferenceModel::Llama { .. })
    }

    /// Chunks of the single-device reference step, when it must run micro-batch by
    /// micro-batch (batch norm: each micro-batch is normalized with its own statistics), in the
    /// order the pipeline cuts the batch: the layout's [`parts`](Layout::parts). `None`: one
    /// full-batch step.
    pub fn reference_chunks(&self, layout: Layout) -> Option<usize> {
        matches!(self, ReferenceModel::ResNet(_)).then_some(layout.parts())
    }
}
