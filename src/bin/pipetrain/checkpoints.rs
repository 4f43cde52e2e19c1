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
use crate::failure::Failure;
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
            ("held-out", args.held_out.to_string()),
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

    /// What goes into the checkpoint.
    pub fn extra(&self) -> BTreeMap<String, String> {
        self.entries.clone()
    }
}

/// The checkpoint key of the next training batch's position (informative: it follows from the
/// step and the identity flags, which are checked).
pub const DATA_POSITION: &str = "data-position";

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
    let loaded = match read {
        // Read elsewhere (a multi-process run: rank 0 read it and broadcast it).
        Some(checkpoint) => pipeline.restore(checkpoint),
        None => pipeline.load_checkpoint(path),
    };
    let progress = loaded.map_err(|e| match e {
        pipetrain::Error::Checkpoint(e) => failure("--resume", e),
        other => Failure::runtime(format!("--resume: {other}")),
    })?;
    for (flag, value) in &run.entries {
        let saved = progress.extra.get(flag).map(String::as_str).unwrap_or("?");
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
/// safetensors file read as a PyTorch state dict.
///
/// # Errors
/// The file is unreadable (runtime) or does not fit the model (usage; the error names the
/// tensor).
pub fn init<L: Layer>(path: &Path, layers: Vec<L>) -> Result<Vec<L>, Failure> {
    let loaded = match Checkpoint::read(path) {
        Ok(checkpoint) => checkpoint.load_model(layers),
        Err(CheckpointError::NotACheckpoint { .. }) => {
            pipetrain::engine::checkpoint::init_from(path, layers, true)
        }
        Err(e) => Err(e),
    };
    loaded.map_err(|e| failure("--init", e))
}

/// `error` of reading the file of `flag`: a readable file that does not belong to this command
/// line (weights that do not fit the model, another optimizer's state, plain weights given to
/// `--resume`) is a usage error; an unreadable or corrupt file a runtime one.
fn failure(flag: &str, error: CheckpointError) -> Failure {
    let message = format!("{flag}: {error}");
    match error {
        CheckpointError::NotACheckpoint { .. }
        | CheckpointError::Missing { .. }
        | CheckpointError::Mismatch { .. }
        | CheckpointError::Unexpected { .. }
        | CheckpointError::Optimizer { .. } => Failure::usage(message),
        _ => Failure::runtime(message),
    }
}
