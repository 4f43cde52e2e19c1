//! What may be written over: a regular file, or a missing name in an existing directory.

use std::io::ErrorKind;
use std::path::Path;

use crate::error::{EngineError, io};

/// `path`'s directory (`.` for a bare file name).
pub fn directory(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `path` is absent in an existing directory, or a regular file (not a directory, device, FIFO,
/// socket or symbolic link: `symlink_metadata`, so a link is seen, not followed).
///
/// # Errors
/// [`EngineError::NotRegular`] naming what is there, [`EngineError::NoDirectory`], or the
/// error of `lstat` itself.
pub fn regular_or_absent(path: &Path) -> Result<(), EngineError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let dir = directory(path);
            return match dir.is_dir() {
                true => Ok(()),
                false => Err(EngineError::NoDirectory {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                }),
            };
        }
        Err(e) => return Err(io(path)(e)),
    };
    let kind = meta.file_type();
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "a device, FIFO or socket"
    };
    Err(EngineError::NotRegular {
        path: path.to_path_buf(),
        what,
    })
}
