//! What may be written over: a regular file, or a missing name in an existing directory.

use std::io::ErrorKind;
use std::path::Path;

use super::error::{OutputError, io};

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
/// [`OutputError::NotRegular`] naming what is there, [`OutputError::NoDirectory`], or the
/// error of `lstat` itself.
pub fn regular_or_absent(path: &Path) -> Result<(), OutputError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let dir = directory(path);
            return match dir.is_dir() {
                true => Ok(()),
                false => Err(OutputError::NoDirectory {
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
    Err(OutputError::NotRegular {
        path: path.to_path_buf(),
        what,
    })
}
