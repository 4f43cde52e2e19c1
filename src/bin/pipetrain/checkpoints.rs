//! `--checkpoint`, `--resume` and `--init`: what a run saves beside its weights, and the checks
//! that make a resumed run continue bit for bit.
//!
//! A run's batches are a function of (data, seed, batch size, accumulation, optimizer step):
//! the checkpoint stores those, and `--resume` refuses a run whose values differ, naming the
//! flag. The stage/replica layout is free to change.

use std::collections::BTreeMap;
use std::path::Path;

use clap::ValueEnum;
use pipetrain::{Checkpoint, CheckpointError, Layer, Pipeline};

use crate::args::TrainArgs;
use crate::distributed::Distributed;
use crate::failure::{Failure, explain};
use crate::model::Model;

/// The settings a resumed run must share with the saved one, by flag name.
pub struct RunIdentity {
    entries: BTreeMap<String, String>,
}

impl RunIdentity {
    /// This run's identity.
    pub fn of(args: &TrainArgs, model: &Model) -> Self {
        let entries = [
            ("model", model.describe()),
            ("data", args.data.clone()),
            ("held-out", args.held_out().to_string()),
            ("shuffle", (!args.no_shuffle).to_string()),
            // A schedule's rates depend on --lr and --steps: a resumed run must use the same.
            ("lr-schedule", lr_schedule(args)),
            ("seed", args.seed.to_string()),
            ("batch", args.batch.to_string()),
            ("accumulate", args.accumulate.to_string()),
            ("tie-embeddings", args.tie_embeddings.to_string()),
            // The engine's check sees the optimizer's family only (sgd with or without
            // momentum look alike), the flag tells them apart.
            (
                "optimizer",
                args.optimizer
                    .to_possible_value()
                    .map(|v| v.get_name().to_string())
                    .unwrap_or_default(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Self { entries }
    }

    /// The model's description, as the checkpoint stores it.
    pub fn model(&self) -> &str {
        self.entries.get("model").map_or("", String::as_str)
    }

    /// What goes into the checkpoint.
    pub fn extra(&self) -> BTreeMap<String, String> {
        self.entries.clone()
    }
}

/// The checkpoint key of the next training batch's position (informative: it follows from the
/// step and the identity flags, which are checked).
pub const DATA_POSITION: &str = "data-position";

/// Saves `pipeline` (this process's share of it under MPI: `dist`) to `path`, with the run's
/// identity and `position`, the next training batch's.
///
/// # Errors
/// The checkpoint cannot be assembled or written (runtime).
pub fn save<L: Layer>(
    pipeline: &Pipeline<L>,
    dist: Option<&Distributed>,
    path: &Path,
    run: &RunIdentity,
    position: String,
) -> Result<(), Failure> {
    let mut extra = run.extra();
    extra.insert(DATA_POSITION.to_string(), position);
    let saved = match dist {
        Some(d) => d.save_checkpoint(pipeline, path, extra),
        None => pipeline.save_checkpoint(path, extra).map_err(Failure::from),
    };
    saved.map_err(|f| match f.checkpoint_error() {
        // A step that made a weight infinite (from finite gradients) replaces no good file.
        Some(CheckpointError::NonFinite {
            tensor,
            index,
            value,
            ..
        }) => Failure::runtime(format!(
            "--checkpoint {}: not written: weight `{tensor}` element {index} is {value} after \
             this step (its gradients were finite); lower --lr or clip gradients \
             (--clip-grad-norm 1.0)",
            path.display()
        )),
        _ => f,
    })
}

/// The value a checkpoint saved before `flag` was recorded ran with.
fn default_of(flag: &str) -> Option<&'static str> {
    DEFAULTS.iter().find(|(f, _)| *f == flag).map(|(_, v)| *v)
}

/// Identity entries added after checkpoints were first written, with their defaults.
const DEFAULTS: &[(&str, &str)] = &[("shuffle", "true"), ("lr-schedule", "constant")];

/// The identity of `--lr-schedule`: `constant` (any `--lr` may resume it, as before schedules
/// existed), else the schedule with its base rate.
fn lr_schedule(args: &TrainArgs) -> String {
    match crate::optimizer::schedule(args) {
        Ok(s) if s == pipetrain::LrSchedule::default() => "constant".to_string(),
        Ok(s) => format!("{s}, from lr {}", args.lr()),
        Err(_) => String::new(),
    }
}

/// Loads `path` (or `read`, its contents read already) into `pipeline` and returns the step to continue from and the saved data
/// position.
///
/// # Errors
/// Runtime: the file does not load. Usage: it does not fit the model, was saved by a run with
/// other data/model/optimizer flags, or is already at `steps` or beyond.
pub fn resume<L: Layer>(
    pipeline: &mut Pipeline<L>,
    path: &Path,
    read: Option<Checkpoint>,
    run: &RunIdentity,
    steps: u64,
) -> Result<(u64, Option<String>), Failure> {
    let checkpoint = match read {
        // Read elsewhere (a multi-process run: rank 0 read it and broadcast it).
        Some(checkpoint) => checkpoint,
        None => Checkpoint::read(path).map_err(|e| failure("--resume", e))?,
    };
    let stored = checkpoint.progress().extra.get("model").cloned();
    let progress = pipeline.restore(checkpoint).map_err(|e| match e {
        pipetrain::Error::Checkpoint(e) => {
            other_model("--resume", path, stored.as_deref(), run.model(), &e)
                .unwrap_or_else(|| failure("--resume", e))
        }
        other => Failure::runtime(format!("--resume: {}", explain(&other))),
    })?;
    for (flag, value) in &run.entries {
        let saved = progress.extra.get(flag).map(String::as_str);
        // Checkpoints older than a flag were saved with its default.
        let saved = saved.or_else(|| default_of(flag)).unwrap_or("?");
        if saved != value && flag == "lr-schedule" {
            return Err(Failure::usage(format!(
                "--resume {}: the run was saved with --lr-schedule {saved}, this one has \
                 --lr-schedule {value}: a schedule's rates follow --lr and --steps, so the steps \
                 already taken would have had other rates; resume with the saved run's --steps \
                 and --lr, or start a new run from its weights with --init {}",
                path.display(),
                path.display()
            )));
        }
        if saved != value {
            return Err(Failure::usage(format!(
                "--resume {}: the run was saved with --{flag} {saved}, this one has --{flag} \
                 {value}; resume with the same --{flag} (the batches depend on it)",
                path.display()
            )));
        }
    }
    if progress.step >= steps {
        return Err(Failure::usage(format!(
            "--resume {}: the checkpoint is at step {} already; --steps {steps} is the total, \
             give more to continue",
            path.display(),
            progress.step
        )));
    }
    let position = progress.extra.get(DATA_POSITION).cloned();
    println!(
        "resumed: {} at step {} of {steps}{}",
        path.display(),
        progress.step,
        position
            .as_deref()
            .map(|p| format!(" (next data: {p})"))
            .unwrap_or_default()
    );
    Ok((progress.step, position))
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
    let fits = matches!(
        error,
        CheckpointError::Keys { .. } | CheckpointError::Mismatch { .. }
    );
    let stored = stored.filter(|s| fits && *s != ours)?;
    Some(Failure::usage(format!(
        "{flag} {}: the file holds {stored}, but the flags build {ours}; give the flags of the \
         stored model (--model, its sizes such as --width, --hidden-layers, --d-model, \
         --classes, and the same data), or a file of this model ({})",
        path.display(),
        explain(error)
    )))
}

/// `error` of reading the file of `flag`: a readable file that does not belong to this command
/// line (weights that do not fit the model, another optimizer's state, plain weights given to
/// `--resume`) is a usage error; an unreadable or corrupt file a runtime one.
fn failure(flag: &str, error: CheckpointError) -> Failure {
    let message = format!("{flag}: {}", explain(&error));
    match error {
        CheckpointError::NotACheckpoint { .. }
        | CheckpointError::Keys { .. }
        | CheckpointError::Rename { .. }
        | CheckpointError::Mismatch { .. }
        | CheckpointError::Optimizer { .. } => Failure::usage(message),
        _ => Failure::runtime(message),
    }
}
