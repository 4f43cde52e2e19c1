//! [`CheckpointError`]: why a checkpoint could not be written or read.

use std::path::{Path, PathBuf};

use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file system refused.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be written: see [`OutputError`](crate::output::OutputError).
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    /// Not a readable safetensors file, or not one pipetrain wrote.
    #[error("{}: not a readable checkpoint or safetensors weights file: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A safetensors file without pipetrain's metadata: plain weights (e.g. a PyTorch state
    /// dict), usable with [`init_from`](super::init_from) but not to resume.
    #[error(
        "{}: a weights file, not a pipetrain checkpoint (no optimizer state or step)",
        path.display()
    )]
    NotACheckpoint {
        /// The file.
        path: PathBuf,
    },
    /// Keys that do not match, listed the way PyTorch's `load_state_dict(strict=True)` lists
    /// them: parameters of the model the file lacks, and tensors of the file no parameter takes.
    #[error(
        "{}: error(s) in loading the state dict: {}",
        path.display(),
        keys_text(missing, unexpected)
    )]
    Keys {
        /// The file.
        path: PathBuf,
        /// The model's parameters the file lacks (full-model names).
        missing: Vec<String>,
        /// The file's tensors that match no parameter (after renaming).
        unexpected: Vec<String>,
    },
    /// Rename rules that do not apply: a pattern that is not a regular expression, or two
    /// tensors renamed onto one name.
    #[error("{}: rename rules: {reason}", path.display())]
    Rename {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensors or the pattern.
        reason: String,
    },
    /// A tensor's shape or type does not fit the model.
    #[error("{}: tensor `{tensor}` does not fit the model: {reason}", path.display())]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// How it differs.
        reason: String,
    },
    /// A weight that is NaN or infinite: training from it would make every step NaN.
    #[error(
        "{}: tensor `{tensor}` element {index} is {value}; every weight must be finite: use \
         the file of a run from before it diverged",
        path.display()
    )]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// The element's flat index.
        index: usize,
        /// The value (and the type it was converted from).
        value: String,
    },
    /// The optimizer state was saved for another optimizer.
    #[error(
        "{}: the optimizer state is for `{saved}`, but this run uses `{current}`",
        path.display()
    )]
    Optimizer {
        /// The file.
        path: PathBuf,
        /// The saved optimizer.
        saved: String,
        /// This run's.
        current: String,
    },
}

/// A checkpoint operation's result.
impl Remedied for CheckpointError {
    fn remedy(&self) -> Option<Remedy> {
        let init_from = || Remedy::set(Setting::InitFrom, Value::Any);
        match self {
            CheckpointError::NotACheckpoint { .. } => Some(init_from()),
            CheckpointError::Keys { .. } => Some(Remedy::set(Setting::Rename, Value::Any)),
            CheckpointError::Optimizer { .. } => Some(Remedy::one_of([
                Remedy::sentence("resume with the same optimizer"),
                init_from(),
            ])),
            _ => None,
        }
    }
}

pub(super) type Result<T> = std::result::Result<T, CheckpointError>;

/// The I/O error on `path` as a [`CheckpointError`].
pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `path` is not a readable checkpoint, for `reason`.
pub(super) fn corrupt(path: &Path, reason: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// `Missing key(s): "a", "b". Unexpected key(s): "c"` (at most 8 of each named).
fn keys_text(missing: &[String], unexpected: &[String]) -> String {
    let list = |keys: &[String]| {
        let mut text: Vec<String> = keys.iter().take(8).map(|k| format!("\"{k}\"")).collect();
        if keys.len() > 8 {
            text.push(format!("and {} more", keys.len() - 8));
        }
        text.join(", ")
    };
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing key(s) in the file: {}", list(missing)));
    }
    if !unexpected.is_empty() {
        parts.push(format!(
            "unexpected key(s) in the file: {}",
            list(unexpected)
        ));
    }
    parts.join("; ")
}
