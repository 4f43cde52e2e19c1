//! `--checkpoint`, `--resume` and `--init`: the run's identity that the library's loop stores
//! in every checkpoint (by flag name), and the weights `--init` loads.
//!
//! A run's batches are a function of (data, seed, batch size, accumulation, optimizer step):
//! the checkpoint stores those, and `--resume` refuses a run whose values differ, naming the
//! flag. The stage/replica layout is free to change.

use std::path::Path;

use clap::ValueEnum;
use pipetrain::trainer::RunIdentity;
use pipetrain::{Checkpoint, CheckpointError, Layer};

use crate::args::TrainArgs;
use crate::failure::Failure;
use crate::model::Model;

/// This run's identity, by flag name.
pub fn identity(args: &TrainArgs, model: &Model) -> RunIdentity {
    RunIdentity::new()
        .with("model", model.describe())
        .with("data", &args.data)
        .with("held-out", args.held_out())
        .with("shuffle", !args.no_shuffle)
        // A schedule's rates depend on --lr and --steps: a resumed run must use the same.
        .with("lr-schedule", lr_schedule(args))
        .with("seed", args.seed)
        .with("batch", args.batch)
        .with("accumulate", args.accumulate)
        .with("tie-embeddings", args.tie_embeddings)
        // The engine's check sees the optimizer's family only (sgd with or without momentum
        // look alike), the flag tells them apart.
        .with(
            "optimizer",
            args.optimizer
                .to_possible_value()
                .map(|v| v.get_name().to_string())
                .unwrap_or_default(),
        )
}

/// The identity of `--lr-schedule`: `constant` (any `--lr` may resume it, as before schedules
/// existed), else the schedule with its base rate.
fn lr_schedule(args: &TrainArgs) -> String {
    match crate::optimizer::schedule(args) {
        Ok(s) if s == pipetrain::LrSchedule::default() => "constant".to_string(),
        Ok(s) => format!("{s}, from lr {}", args.lr()),
        Err(_) => String::new(),
    }
}

/// `layers` with the weights of `path`: a pipetrain checkpoint (its weights), or any other
/// safetensors file: a PyTorch state dict (Linear weights `[out, in]`) or burn's layout
/// (`[in, out]`), see [`plain_weights`].
///
/// # Errors
/// The file is unreadable (runtime) or does not fit the model (usage; the error names the
/// tensor).
pub fn init<L: Layer>(
    path: &Path,
    layers: Vec<L>,
    args: &TrainArgs,
    model: &Model,
) -> Result<Vec<L>, Failure> {
    pipetrain::engine::checkpoint::check_renames(&args.rename)
        .map_err(|e| Failure::usage(format!("--rename: {e}")))?;
    match Checkpoint::read(path) {
        Ok(checkpoint) if args.rename.is_empty() => {
            let stored = checkpoint.progress().extra.get("model").cloned();
            checkpoint.load_model(layers).map_err(|e| {
                other_model("--init", path, stored.as_deref(), &model.describe(), &e)
                    .unwrap_or_else(|| failure("--init", e))
            })
        }
        Ok(_) | Err(CheckpointError::NotACheckpoint { .. }) => {
            plain_weights(path, layers, args, model)
        }
        Err(e) => Err(failure("--init", e)),
    }
}

/// A weights file without pipetrain's metadata, in PyTorch's layout or burn's. The metadata
/// says which when it can (`format: pt` from `safetensors.torch.save_file`, `producer: burn`
/// from burn's store); else the shapes do: a non-square Linear weight fits one layout only. A
/// file whose Linear weights are all square fits both and is refused rather than guessed (a
/// wrong guess transposes every matrix).
///
/// `--rename` rules apply first; then the model's PyTorch names (a `nn.Sequential` MLP's
/// `0.weight`, `2.weight`, …, see [`Model::pytorch_renames`]) are mapped onto its own when every
/// name has that form.
fn plain_weights<L: Layer>(
    path: &Path,
    layers: Vec<L>,
    args: &TrainArgs,
    model: &Model,
) -> Result<Vec<L>, Failure> {
    let bytes = std::fs::read(path).map_err(|e| format!("--init {}: {e}", path.display()))?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| format!("--init {}: {e}", path.display()))?;
    let names: Vec<String> = header.tensors().keys().cloned().collect();
    let names = pipetrain::engine::checkpoint::rename_all(&names, &args.rename)
        .map_err(|e| Failure::usage(format!("--rename: {e}")))?;
    let sequential = names.iter().all(|name| {
        let (index, rest) = name.split_once('.').unwrap_or_default();
        index.parse::<usize>().is_ok() && matches!(rest, "weight" | "bias")
    });
    let mut renames = args.rename.clone();
    if sequential {
        renames.extend(model.pytorch_renames());
    }
    let init_from = |path: &Path, layers: Vec<L>, pytorch: bool| {
        pipetrain::engine::checkpoint::init_renamed(path, layers, pytorch, &renames)
    };
    let meta = header.metadata().clone().unwrap_or_default();
    let known = match (meta.get("format"), meta.get("producer")) {
        (Some(f), _) if f == "pt" => Some(true),
        (_, Some(p)) if p == "burn" => Some(false),
        _ => None,
    };
    if let Some(pytorch) = known {
        return init_from(path, layers, pytorch).map_err(|e| failure("--init", e));
    }
    let as_burn = init_from(path, layers.clone(), false);
    let as_pytorch = init_from(path, layers, true);
    let square = header
        .tensors()
        .into_iter()
        .find(|(_, info)| matches!(info.shape[..], [a, b] if a == b));
    match (as_pytorch, as_burn, square) {
        (Ok(_), Ok(_), Some((name, info))) => Err(Failure::usage(format!(
            "--init {}: tensor `{name}` {:?} and every other matrix is square, so the file \
             fits PyTorch's [out, in] layout and burn's [in, out] alike; save it with \
             `safetensors.torch.save_file` (it records format=pt) or burn's store (it records \
             producer=burn), or add that metadata",
            path.display(),
            info.shape
        ))),
        (Ok(layers), _, _) | (Err(_), Ok(layers), _) => Ok(layers),
        // Wrong names first (as PyTorch's strict load): a layout's shape error would mislead.
        (Err(e @ CheckpointError::Keys { .. }), Err(_), _) | (Err(_), Err(e), _) => {
            Err(failure("--init", e))
        }
    }
}

/// The usage failure of a pipetrain checkpoint saved for `stored`, a model other than this
/// run's `ours`, whose weights do not fit (`error`); `None` when the models are the same (or the
/// file does not say), or when `error` is not about fitting.
fn other_model(
    flag: &str,
    path: &Path,
    stored: Option<&str>,
    ours: &str,
    error: &CheckpointError,
) -> Option<Failure> {
    let stored = stored.filter(|s| pipetrain::trainer::fits(error) && *s != ours)?;
    Some(Failure::usage(other_model_message(
        flag, path, stored, ours, error,
    )))
}

/// The message of a file of `flag` that holds `stored`, whose weights do not fit the model the
/// flags build, `ours`.
pub fn other_model_message(
    flag: &str,
    path: &Path,
    stored: &str,
    ours: &str,
    error: &CheckpointError,
) -> String {
    format!(
        "{flag} {}: the file holds {stored}, but the flags build {ours}; give the flags of the \
         stored model (--model, its sizes such as --width, --hidden-layers, --d-model, \
         --classes, and the same data), or a file of this model ({error})",
        path.display()
    )
}

/// `error` of reading the file of `flag`: a readable file that does not belong to this command
/// line is a usage error; an unreadable or corrupt file a runtime one.
fn failure(flag: &str, error: CheckpointError) -> Failure {
    crate::run_failure::checkpoint_failure(format!("{flag}: {error}"), &error)
}
