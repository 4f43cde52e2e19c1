//! The checkpoint module's error helpers: its errors are [`EngineError`]'s checkpoint and file
//! variants.

use std::path::Path;

use crate::error::EngineError;

pub(super) use crate::error::io;

/// A checkpoint operation's result.
pub(super) type Result<T> = std::result::Result<T, EngineError>;

/// `path` is not a readable checkpoint, for `reason`.
pub(super) fn corrupt(path: &Path, reason: impl std::fmt::Display) -> EngineError {
    EngineError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}
