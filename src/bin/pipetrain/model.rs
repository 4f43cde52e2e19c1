//! `--model mlp|resnet|unet|gpt|llama` (or a Hugging Face checkpoint's config.json): the
//! library's [`ReferenceModel`] from the flags and the data's shapes, and the checks of the flags
//! that size it.

use pipetrain::Batch;
use pipetrain::Remat;
use pipetrain::Tie;
use pipetrain::remedy::Remedied;
pub use pipetrain::trainer::ReferenceModel;
use pipetrain_models::{GptConfig, LlamaConfig, MlpConfig, ResNetConfig, UNetConfig};

use crate::args::{ModelKind, TrainArgs};
use crate::data::Shapes;
use crate::style::Flags;

/// The ties of `--tie-embeddings` (`tie`): the GPT's embedding and head, no other model's.
///
/// # Errors
/// The flag with another model.
pub fn ties(model: &ReferenceModel, tie: bool) -> Result<Vec<Tie>, String> {
    // A Llama's tie is its config's (`--tie-embeddings` sets it for a new model).
    if let ReferenceModel::Llama { config, .. } = model {
        return Ok(match config.tie_word_embeddings {
            true => vec![config.tie_embeddings()],
            false => Vec::new(),
        });
    }
    match (model.embedding_ties(), tie) {
        (Some(ties), true) => Ok(ties),
        (None, true) => Err(
            "--tie-embeddings ties a decoder's embeddings: use it with --model gpt or llama".into(),
        ),
        (_, false) => Ok(Vec::new()),
    }
}

/// The Hugging Face checkpoint `--init` names (`hf:DIR`, or a directory holding config.json),
/// if any, with its configuration; refuses the flags that would size another model.
///
/// # Errors
/// `--model` other than llama, a flag that sizes a new model (it would do nothing), or a
/// config.json pipetrain cannot read.
pub fn hf_init(args: &TrainArgs) -> Result<Option<(std::path::PathBuf, LlamaConfig)>, String> {
    let Some(dir) = args
        .init
        .as_deref()
        .filter(|p| pipetrain::trainer::hf::is_checkpoint_dir(p))
    else {
        return Ok(None);
    };
    if args.given("model") && !matches!(args.model, ModelKind::Llama) {
        return Err(format!(
            "--init {}: a Hugging Face checkpoint (config.json) of a Llama-family decoder, which \
             --model {:?} cannot load: use --model llama, or drop --model",
            dir.display(),
            args.model
        ));
    }
    for (id, flag) in [
        ("vocab", "--vocab"),
        ("d_model", "--d-model"),
        ("heads", "--heads"),
        ("kv_heads", "--kv-heads"),
        ("layers", "--layers"),
        ("intermediate", "--intermediate"),
        ("tie_embeddings", "--tie-embeddings"),
    ] {
        if args.given(id) {
            return Err(format!(
                "{flag} sizes a new model, but --init {} brings its own in config.json: drop \
                 {flag}",
                dir.display()
            ));
        }
    }
    let config = pipetrain::trainer::hf::read_config(dir).map_err(|e| e.to_string())?;
    Ok(Some((dir.to_path_buf(), config)))
}

/// The sizes both decoders share: `--vocab`, `--context`, `--d-model` and `--heads` at least
/// 1, and the heads dividing the width.
fn decoder_sizes(args: &TrainArgs) -> Result<(), String> {
    for (name, value) in [
        ("--vocab", args.vocab),
        ("--context", args.context),
        ("--d-model", args.d_model),
        ("--heads", args.heads),
    ] {
        if value == 0 {
            return Err(format!("{name} 0: must be at least 1"));
        }
    }
    if args.d_model % args.heads != 0 {
        return Err(format!(
            "--heads {} does not divide --d-model {}: use a --d-model that is a multiple of the \
             heads",
            args.heads, args.d_model
        ));
    }
    Ok(())
}

/// Tokens per example of a decoder: `--context` for synthetic data, the data's sequence
/// length for token data (a different `--context` given is refused).
fn token_context(args: &TrainArgs, shapes: Option<&Shapes>, model: &str) -> Result<usize, String> {
    match shapes {
        None => Ok(args.context),
        Some(s) => match s.input[..] {
            // The data's sequences size the context; a --context given otherwise would be
            // overridden in silence (and the checkpoint then refused by `eval` with the same
            // flags).
            [t] if !s.float_inputs && args.given("context") && args.context != t => Err(format!(
                "--context {}: the data's sequences hold {t} tokens, which size the context; \
                 give --context {t}, or drop --context",
                args.context
            )),
            [t] if !s.float_inputs => Ok(t),
            _ => Err(format!(
                "--model {model} needs token ids: int inputs of shape [T], the data has {} \
                 inputs of shape {:?}",
                if s.float_inputs { "float" } else { "int" },
                s.input
            )),
        },
    }
}

/// The model the flags describe; with loaded data, input sizes follow the data's `shapes`
/// (the flags give the rest: `--classes` and `--vocab` are never raised to fit the data,
/// whose labels are checked against them at load).
pub fn from_args(args: &TrainArgs, shapes: Option<&Shapes>) -> Result<ReferenceModel, String> {
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
    if let Some((_, config)) = hf_init(args)? {
        let context = token_context(args, shapes, "llama")?;
        if context > config.max_positions {
            return Err(format!(
                "--context {context}: longer than the checkpoint's max_position_embeddings {}; \
                 give --context {} or less",
                config.max_positions, config.max_positions
            ));
        }
        return Ok(ReferenceModel::Llama { config, context });
    }
    match args.model {
        ModelKind::Llama => {
            decoder_sizes(args)?;
            let heads = args.heads;
            let kv_heads = args.kv_heads.unwrap_or(heads);
            let intermediate = args
                .intermediate
                .unwrap_or_else(|| (8 * args.d_model).div_ceil(3).div_ceil(8) * 8);
            positive("--kv-heads", kv_heads)?;
            positive("--intermediate", intermediate)?;
            if heads % kv_heads != 0 {
                return Err(format!(
                    "--kv-heads {kv_heads} does not divide --heads {heads}: each key/value head \
                     serves a whole group of query heads; give a divisor of {heads}"
                ));
            }
            if (args.d_model / heads) % 2 != 0 {
                return Err(format!(
                    "--d-model {} / --heads {heads} = {} per head, odd: rotary embeddings \
                     rotate pairs; give an even width per head",
                    args.d_model,
                    args.d_model / heads
                ));
            }
            let context = token_context(args, shapes, "llama")?;
            let config = LlamaConfig {
                max_positions: context,
                tie_word_embeddings: args.tie_embeddings,
                ..LlamaConfig::new(
                    args.vocab,
                    args.d_model,
                    intermediate,
                    args.layers,
                    heads,
                    kv_heads,
                )
            };
            Ok(ReferenceModel::Llama { config, context })
        }
        ModelKind::Mlp => {
            positive("--width", args.width)?;
            let input = shapes.map_or(args.width, |s| s.input.iter().product());
            Ok(ReferenceModel::Mlp(
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
            Ok(ReferenceModel::ResNet(
                ResNetConfig::new(args.channels, args.blocks, classes)
                    .with_image(in_channels, side)
                    .with_downsample_every(2),
            ))
        }
        ModelKind::Unet => {
            let (in_channels, side) = images(args, shapes, "unet")?;
            let config =
                UNetConfig::new(args.channels, args.depth, classes).with_image(in_channels, side);
            config
                .check()
                .map_err(|e| format!("--model unet --depth {}: {e}", args.depth))?;
            Ok(ReferenceModel::UNet(config))
        }
        ModelKind::Gpt => {
            decoder_sizes(args)?;
            let (vocab, context) = (args.vocab, token_context(args, shapes, "gpt")?);
            if let Some(range) = args.context_range.filter(|r| r.max > context) {
                return Err(format!(
                    "--context-range {range}: sequences of {} tokens do not fit the context \
                     of {context} (--context); give --context {} or a smaller MAX",
                    range.max, range.max
                ));
            }
            Ok(ReferenceModel::Gpt(GptConfig::new(
                vocab,
                context,
                args.d_model,
                args.heads,
                args.layers,
            )))
        }
    }
}

/// Refuses a model that this machine cannot train (see [`crate::footprint`]): `batch`
/// examples a step, an optimizer of `slots` state slots per parameter, `copies` copies of
/// the model in this process (replicas, plus `--verify`'s reference).
///
/// # Errors
/// The estimate, the memory available and the flags that size the model.
pub fn check_fits(
    model: &ReferenceModel,
    batch: usize,
    slots: u64,
    copies: f64,
) -> Result<(), String> {
    let flags = match model {
        ReferenceModel::Mlp(_) => "--width, --hidden-layers, --classes or --batch",
        ReferenceModel::ResNet(_) => "--channels, --blocks, --image, --classes or --batch",
        ReferenceModel::UNet(_) => "--channels, --depth, --image, --classes or --batch",
        ReferenceModel::Gpt(_) => "--d-model, --layers, --vocab, --context or --batch",
        ReferenceModel::Llama { .. } => {
            "--d-model, --layers, --intermediate, --vocab, --context or --batch (or a smaller \
             checkpoint)"
        }
    };
    crate::footprint::check_training(model, batch, slots, copies, flags)
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
            .map_err(|e| format!("--context-range: {}", e.explain(&Flags))),
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
        Some(s) => s.image().ok_or_else(|| {
            format!(
                "--model {model} needs images: inputs of shape [C, H, H] or [H·H], \
                 the data has {:?}",
                s.input
            )
        })?,
    })
}
