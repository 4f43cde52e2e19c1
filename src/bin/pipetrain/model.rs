//! `--model mlp|resnet|unet|gpt`: the model's configuration from the flags and the data's shapes,
//! its synthetic batches, and how its inputs and its single-device reference look.

use burn::prelude::*;
use pipetrain::engine::{Activation, ActivationError};
use pipetrain::{Batch, Remat, Tie};
use pipetrain_models::{GptConfig, MlpConfig, ResNetConfig, UNetConfig, synthetic};

use crate::args::{ModelKind, TrainArgs};
use crate::data::Shapes;

/// A model's configuration, one variant per `--model`.
#[derive(Clone, Copy, Debug)]
pub enum Model {
    /// `--model mlp`.
    Mlp(MlpConfig),
    /// `--model resnet`.
    ResNet(ResNetConfig),
    /// `--model unet`.
    UNet(UNetConfig),
    /// `--model gpt`.
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

    /// The ties of `--tie-embeddings` (`tie`): the GPT's embedding and head, no other model's.
    ///
    /// # Errors
    /// The flag with another model.
    pub fn ties(&self, tie: bool) -> Result<Vec<Tie>, String> {
        match (self, tie) {
            (Model::Gpt(c), true) => Ok(vec![c.tie_embeddings()]),
            (_, true) => {
                Err("--tie-embeddings ties a GPT's embeddings: use it with --model gpt".into())
            }
            (_, false) => Ok(Vec::new()),
        }
    }

    /// The model the flags describe; with loaded data, input sizes follow the data's `shapes`
    /// (the flags give the rest: `--classes` and `--vocab` are never raised to fit the data,
    /// whose labels are checked against them at load).
    pub fn from_args(args: &TrainArgs, shapes: Option<&Shapes>) -> Result<Self, String> {
        let positive = |name: &str, value: usize| {
            if value == 0 {
                Err(format!("{name} 0: must be at least 1"))
            } else {
                Ok(())
            }
        };
        let classes = args.classes;
        positive("--classes", classes)?;
        if let Some(range) = args
            .context_range
            .filter(|_| !matches!(args.model, ModelKind::Gpt))
        {
            return Err(format!(
                "--context-range {range} varies the sequence length of token data: use it with \
                 --model gpt, or drop it"
            ));
        }
        match args.model {
            ModelKind::Mlp => {
                positive("--width", args.width)?;
                let input = shapes.map_or(args.width, |s| s.input.iter().product());
                Ok(Model::Mlp(
                    MlpConfig::new(args.width, args.hidden_layers, classes).with_input(input),
                ))
            }
            ModelKind::Resnet => {
                let (in_channels, side) = images(args, shapes, "resnet")?;
                let remat = args.remat();
                if remat != Remat::Never {
                    return Err(format!(
                        "--model resnet needs --remat never (batch norm: re-materialization's \
                         first forward uses running statistics), got --remat {remat}"
                    ));
                }
                Ok(Model::ResNet(
                    ResNetConfig::new(args.channels, args.blocks, classes)
                        .with_image(in_channels, side)
                        .with_downsample_every(2),
                ))
            }
            ModelKind::Unet => {
                let (in_channels, side) = images(args, shapes, "unet")?;
                let config = UNetConfig::new(args.channels, args.depth, classes)
                    .with_image(in_channels, side);
                config
                    .check()
                    .map_err(|e| format!("--model unet --depth {}: {e}", args.depth))?;
                Ok(Model::UNet(config))
            }
            ModelKind::Gpt => {
                for (name, value) in [
                    ("--vocab", args.vocab),
                    ("--context", args.context),
                    ("--d-model", args.d_model),
                    ("--heads", args.heads),
                ] {
                    positive(name, value)?;
                }
                if args.d_model % args.heads != 0 {
                    return Err(format!(
                        "--heads {} does not divide --d-model {}: use a --d-model that is a \
                         multiple of the heads",
                        args.heads, args.d_model
                    ));
                }
                let (vocab, context) = match shapes {
                    None => (args.vocab, args.context),
                    Some(s) => match s.input[..] {
                        [t] if !s.float_inputs => (args.vocab, t),
                        _ => {
                            return Err(format!(
                                "--model gpt needs token ids: int inputs of shape [T], the data \
                                 has {} inputs of shape {:?}",
                                if s.float_inputs { "float" } else { "int" },
                                s.input
                            ));
                        }
                    },
                };
                if let Some(range) = args.context_range.filter(|r| r.max > context) {
                    return Err(format!(
                        "--context-range {range}: sequences of {} tokens do not fit the context \
                         of {context} (--context); give --context {} or a smaller MAX",
                        range.max, range.max
                    ));
                }
                Ok(Model::Gpt(GptConfig::new(
                    vocab,
                    context,
                    args.d_model,
                    args.heads,
                    args.layers,
                )))
            }
        }
    }

    /// A one-line description for the run's banner.
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
    pub fn shape_inputs(&self, inputs: Activation) -> Result<Activation, ActivationError> {
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

    /// Refuses a model that this machine cannot train (see [`crate::footprint`]): `batch`
    /// examples a step, an optimizer of `slots` state slots per parameter, `copies` copies of
    /// the model in this process (replicas, plus `--verify`'s reference).
    ///
    /// # Errors
    /// The estimate, the memory available and the flags that size the model.
    pub fn check_fits(&self, batch: usize, slots: u64, copies: f64) -> Result<(), String> {
        let flags = match self {
            Model::Mlp(_) => "--width, --hidden-layers, --classes or --batch",
            Model::ResNet(_) => "--channels, --blocks, --image, --classes or --batch",
            Model::UNet(_) => "--channels, --depth, --image, --classes or --batch",
            Model::Gpt(_) => "--d-model, --layers, --vocab, --context or --batch",
        };
        crate::footprint::check_training(self, batch, slots, copies, flags)
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

/// Batch `index` of the run cut to its drawn sequence length under `--context-range` (else
/// as it is).
///
/// # Errors
/// A batch without token sequences as long as the range's MAX.
pub fn cut_to_length(args: &TrainArgs, index: u64, batch: Batch) -> Result<Batch, String> {
    match args.context_range {
        Some(range) => range
            .cut(batch, range.length_at(args.seed, index))
            .map_err(|e| format!("--context-range: {e}")),
        None => Ok(batch),
    }
}

/// `--channels` and `--image` checked, and the input images' channels and side: 3 × `--image`
/// for synthetic data, the data's own otherwise.
fn images(
    args: &TrainArgs,
    shapes: Option<&Shapes>,
    model: &str,
) -> Result<(usize, usize), String> {
    for (name, value) in [("--channels", args.channels), ("--image", args.image)] {
        if value == 0 {
            return Err(format!("{name} 0: must be at least 1"));
        }
    }
    Ok(match shapes {
        None => (3, args.image),
        Some(s) => image_shape(&s.input).ok_or_else(|| {
            format!(
                "--model {model} needs images: inputs of shape [C, H, H] or [H·H], \
                 the data has {:?}",
                s.input
            )
        })?,
    })
}

/// `(channels, side)` of image inputs `[C, H, H]`, `[H, H]` or flattened `[H·H]` (one channel).
fn image_shape(input: &[usize]) -> Option<(usize, usize)> {
    match *input {
        [c, h, w] if h == w => Some((c, h)),
        [h, w] if h == w => Some((1, h)),
        [f] => {
            let side = (f as f64).sqrt().round() as usize;
            (side * side == f).then_some((1, side))
        }
        _ => None,
    }
}
