//! `--checkpoint`, `--resume` and `--init`: the run's identity that the library's loop stores
//! in every checkpoint (by flag name), and the weights `--init` loads.
//!
//! A run's batches are a function of (data, seed, batch size, accumulation, optimizer step):
//! the checkpoint stores those, and `--resume` refuses a run whose values differ, naming the
//! flag. The stage/replica layout is free to change.

use pipetrain::RunError;
use std::path::Path;

use clap::ValueEnum;
use pipetrain::trainer::fingerprint::fingerprint;
use pipetrain::trainer::{DATA, DATA_SPEC, RunIdentity};
use pipetrain::{EngineError, Error, Layer, RunFile};

use crate::args::TrainArgs;
use crate::failure::Failure;
use crate::model::ReferenceModel;
use crate::run_failure::of_run;

/// This run's identity, by flag name.
pub fn identity(args: &TrainArgs, model: &ReferenceModel) -> RunIdentity {
    let identity = match model {
        // The whole config.json: `export --format hf` writes it back, a resume must match it.
        ReferenceModel::Llama { config, .. } => RunIdentity::new().with(
            pipetrain::trainer::hf::CONFIG_KEY,
            pipetrain::trainer::hf::config_json(config),
        ),
        _ => RunIdentity::new(),
    };
    identity
        .with("model", model.describe())
        // The data by its contents, not by how its path is spelled.
        .with(DATA, fingerprint(&args.data))
        .with(DATA_SPEC, &args.data)
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

/// `layers` with the weights of `path` (the library's
/// [`init_weights`](pipetrain::trainer::init_weights)), after the `--rename` rules.
///
/// # Errors
/// The file is unreadable (runtime) or does not fit the model (usage; the error names the
/// tensor).
pub fn init<L: Layer>(
    path: &Path,
    layers: Vec<L>,
    args: &TrainArgs,
    model: &ReferenceModel,
) -> Result<Vec<L>, Failure> {
    weights_of(RunFile::Init, path, layers, args, model)
}

/// [`init`] for the flag `file` that named `path` (`eval --resume` loads a checkpoint's weights
/// the way `--init` does): its errors name that flag.
///
/// # Errors
/// As [`init`]'s.
pub fn weights_of<L: Layer>(
    file: RunFile,
    path: &Path,
    layers: Vec<L>,
    args: &TrainArgs,
    model: &ReferenceModel,
) -> Result<Vec<L>, Failure> {
    pipetrain::trainer::init_weights(path, layers, &args.rename, model).map_err(|e| {
        of_run(match e {
            Error::Run(RunError::OtherModel {
                path,
                stored,
                ours,
                source,
                ..
            }) => Error::Run(RunError::OtherModel {
                file,
                path,
                stored,
                ours,
                source,
            }),
            Error::Run(RunError::RunFile { path, reason, .. }) => {
                Error::Run(RunError::RunFile { file, path, reason })
            }
            other => other,
        })
    })
}

/// The message of a file of `flag` that holds `stored`, whose weights do not fit the model the
/// flags build, `ours`.
pub fn other_model_message(
    flag: &str,
    path: &Path,
    stored: &str,
    ours: &str,
    error: &EngineError,
) -> String {
    format!(
        "{flag} {}: the file holds {stored}, but the flags build {ours}; give the flags of the \
         stored model (--model, its sizes such as --width, --hidden-layers, --d-model, \
         --classes, and the same data), or a file of this model ({error})",
        path.display()
    )
}
