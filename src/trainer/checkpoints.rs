//! The run's checkpoints: saved with the run's identity and data position, resumed only by a
//! run that would take the same batches.

use crate::RunError;
use std::path::Path;

use crate::trainer::identity::{DATA, DATA_POSITION, DATA_SPEC, LR_SCHEDULE};
use crate::trainer::{Processes, RunIdentity};
use crate::{Checkpoint, EngineError, Error, Layer, Pipeline, RunFile, RunFileProblem};

/// Saves `pipeline` (this process's share of it under `processes`) to `path`, with the run's
/// `identity` and `position`, the next training batch's.
///
/// # Errors
/// [`RunError::CheckpointNonFinite`](crate::RunError::CheckpointNonFinite): a weight is not finite (the file is left as it was); another
/// error when the checkpoint cannot be assembled or written.
pub fn save<L: Layer>(
    pipeline: &Pipeline<L>,
    processes: Option<&dyn Processes<L>>,
    path: &Path,
    identity: &RunIdentity,
    position: String,
) -> Result<(), Error> {
    let mut extra = identity.entries().clone();
    extra.insert(DATA_POSITION.to_string(), position);
    let saved = match processes {
        Some(p) => p.save_checkpoint(pipeline, path, extra),
        None => pipeline.save_checkpoint(path, extra),
    };
    saved.map_err(|e| match e {
        // A step that made a weight infinite (from finite gradients) replaces no good file.
        Error::Engine(EngineError::NonFiniteWeight {
            tensor,
            index,
            value,
            ..
        }) => Error::Run(RunError::CheckpointNonFinite {
            path: path.to_path_buf(),
            tensor,
            index,
            value,
        }),
        // A failed write or fsync (a full or failing disk) names the checkpoint's setting.
        Error::Engine(e @ (EngineError::Io { .. } | EngineError::DirectorySync { .. })) => {
            Error::Run(RunError::RunFile {
                file: RunFile::Checkpoint,
                path: path.to_path_buf(),
                reason: RunFileProblem::Checkpoint(e),
            })
        }
        other => other,
    })
}

/// What [`resume`] restored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// The step to continue from (the optimizer steps the checkpoint holds).
    pub step: u64,
    /// The next training batch's position, as the checkpoint saved it.
    pub position: Option<String>,
}

/// Loads `path` (or `read`, its contents read already) into `pipeline`, after checking that it
/// was saved by a run of this `identity` and holds fewer than `steps` steps.
///
/// # Errors
/// [`RunError::RunFile`](crate::RunError::RunFile) ([`RunFile::Resume`]): the file does not load or fit the model;
/// [`RunError::OtherModel`](crate::RunError::OtherModel): it holds another model; [`RunError::ResumeMismatch`](crate::RunError::ResumeMismatch),
/// [`RunError::ResumeSchedule`](crate::RunError::ResumeSchedule): another run's identity; [`RunError::ResumeDone`](crate::RunError::ResumeDone): it is at `steps`
/// already.
pub fn resume<L: Layer>(
    pipeline: &mut Pipeline<L>,
    path: &Path,
    read: Option<Checkpoint>,
    identity: &RunIdentity,
    steps: u64,
) -> Result<Resumed, Error> {
    let failed = |reason: RunFileProblem| {
        Error::Run(RunError::RunFile {
            file: RunFile::Resume,
            path: path.to_path_buf(),
            reason,
        })
    };
    let checkpoint = match read {
        // Read elsewhere (a multi-process run: rank 0 read it and sent it).
        Some(checkpoint) => checkpoint,
        None => Checkpoint::read(path).map_err(|e| failed(e.into()))?,
    };
    let stored = checkpoint.progress().extra.get("model").cloned();
    let progress = pipeline.restore(checkpoint).map_err(|e| match e {
        Error::Engine(e) if e.is_file() => {
            match stored.filter(|s| fits(&e) && s != identity.model()) {
                Some(stored) => Error::Run(RunError::OtherModel {
                    file: RunFile::Resume,
                    path: path.to_path_buf(),
                    stored,
                    ours: identity.model().to_string(),
                    source: e,
                }),
                None => failed(e.into()),
            }
        }
        other => failed(RunFileProblem::Invalid(other.to_string())),
    })?;
    for (name, ours) in identity.entries() {
        if name == DATA_SPEC {
            continue;
        }
        let saved = progress.extra.get(name).map(String::as_str);
        // Checkpoints older than an entry were saved with its default.
        let saved = saved
            .or_else(|| RunIdentity::default_of(name))
            .unwrap_or("?");
        // Checkpoints older than the data's fingerprint stored its spec as given.
        let ours = match identity.get(DATA_SPEC) {
            Some(spec) if name == DATA && !crate::trainer::fingerprint::is_fingerprint(saved) => {
                spec
            }
            _ => ours.as_str(),
        };
        if saved != ours && name == LR_SCHEDULE {
            return Err(Error::Run(RunError::ResumeSchedule {
                path: path.to_path_buf(),
                saved: saved.to_string(),
                ours: ours.to_string(),
            }));
        }
        if saved != ours {
            return Err(Error::Run(RunError::ResumeMismatch {
                path: path.to_path_buf(),
                setting: name.clone(),
                saved: saved.to_string(),
                ours: ours.to_string(),
            }));
        }
    }
    if progress.step >= steps {
        return Err(Error::Run(RunError::ResumeDone {
            path: path.to_path_buf(),
            saved: progress.step,
            steps,
        }));
    }
    Ok(Resumed {
        step: progress.step,
        position: progress.extra.get(DATA_POSITION).cloned(),
    })
}

/// Whether `error` says that weights do not fit a model (rather than that the file is bad).
pub fn fits(error: &EngineError) -> bool {
    matches!(
        error,
        EngineError::Keys { .. } | EngineError::TensorMismatch { .. }
    )
}
