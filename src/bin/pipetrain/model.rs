//! `--model mlp|resnet|unet|gpt`: the model's configuration from the flags and the data's shapes,
//! its synthetic batches, and how its inputs and its single-device reference look.

use burn::prelude::*;
use pipetrain::engine::{Activation, ActivationError};
use pipetrain::{Batch, Remat};
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

    /// Refuses, before anything is allocated, a model whose output layer (the GPT's: its
    /// embedding) alone cannot fit in this machine's memory while training: its f32 weights,
    /// gradients and two optimizer moments. `--classes 2147483648` is then an error naming the
    /// flag, not an out-of-memory kill.
    ///
    /// # Errors
    /// The bytes needed and the machine's, and the flags to lower.
    pub fn check_fits(&self) -> Result<(), String> {
        let (params, flags): (u128, &str) = match self {
            Model::Mlp(c) => (c.width as u128 * c.classes as u128, "--classes or --width"),
            Model::ResNet(c) => (c.channels as u128 * c.classes as u128, "--classes"),
            Model::UNet(c) => (c.channels as u128 * c.classes as u128, "--classes"),
            Model::Gpt(c) => (c.vocab as u128 * c.d_model as u128, "--vocab or --d-model"),
        };
        let needed = params * 4 * 4;
        match memory_total() {
            Some(total) if needed > total => Err(format!(
                "{}: its output layer alone needs {:.1} GiB to train (weights, gradients, \
                 optimizer state), more than this machine's {:.1} GiB; use a smaller {flags}",
                self.describe(),
                needed as f64 / f64::from(1u32 << 30),
                total as f64 / f64::from(1u32 << 30)
            )),
            _ => Ok(()),
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

/// This machine's memory in bytes (Linux: `MemTotal` of `/proc/meminfo`), if known.
fn memory_total() -> Option<u128> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
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
