//! Atomic writes: a kill during a write leaves the previous file intact, and nothing but a
//! regular file is ever replaced.
//!
//! ```text
//! path's directory:  .run.safetensors.Xa3k9q.tmp   unique per writer (two runs never share it),
//!                    │ write all, fsync              removed if any step fails
//!                    ▼ rename
//!                    run.safetensors                then fsync the directory (errors reported)
//! ```
//!
//! [`probe`] runs the same steps but the rename at the start of a run, so a destination that
//! cannot be written fails before any training, not after it.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{CheckpointError, Result, io};

/// Fault injection for the kill-during-write test: with `PIPETRAIN_FAULT_ABORT_BEFORE_RENAME=N`
/// set, the process aborts inside its N-th atomic write, after the temp file is written and
/// synced and before the rename.
const FAULT_VAR: &str = "PIPETRAIN_FAULT_ABORT_BEFORE_RENAME";

/// Atomic writes so far in this process (for [`FAULT_VAR`]).
static WRITES: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically: a temp file of a unique name in the same directory,
/// fsync, rename over `path`, fsync the directory.
///
/// # Errors
/// `path` exists and is not a regular file (a directory, a device, a symbolic link: never
/// replaced); the temp file cannot be created, written or synced (it is removed); the rename or
/// the directory's fsync fails.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    regular_or_absent(path)?;
    let mut tmp = temp_file(path)?;
    tmp.write_all(bytes).map_err(io(tmp.path()))?;
    tmp.as_file().sync_all().map_err(io(tmp.path()))?;
    let n = WRITES.fetch_add(1, Ordering::Relaxed) + 1;
    if std::env::var(FAULT_VAR).is_ok_and(|v| v.trim() == n.to_string()) {
        eprintln!(
            "{FAULT_VAR}={n}: aborting before renaming {}",
            tmp.path().display()
        );
        std::process::abort();
    }
    // On failure `persist` hands the temp file back; dropping it removes it.
    tmp.persist(path).map_err(|e| CheckpointError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    sync_dir(directory(path))
}

/// Checks at the start of a run that a checkpoint (an atomic write) can be written to `path`:
/// it is a regular file or absent, and a temp file can be created, written, synced and removed
/// beside it.
///
/// # Errors
/// `path` exists and is not a regular file, or the temp file cannot be created, written, synced
/// or removed; the error names the path and what the file system said.
pub fn probe(path: &Path) -> Result<()> {
    regular_or_absent(path)?;
    let mut tmp = temp_file(path)?;
    tmp.write_all(b"probe").map_err(io(tmp.path()))?;
    tmp.as_file().sync_all().map_err(io(tmp.path()))?;
    let tmp_path = tmp.path().to_path_buf();
    tmp.close().map_err(io(&tmp_path))
}

/// `path`'s directory (`.` for a bare file name).
fn directory(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// A new temp file beside `path`, named `.{file name}.{random}.tmp`, removed when dropped.
fn temp_file(path: &Path) -> Result<tempfile::NamedTempFile> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut builder = tempfile::Builder::new();
    // Created as `File::create` creates files (0666 less the umask), not tempfile's 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    builder
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(directory(path))
        .map_err(|source| CheckpointError::Unwritable {
            path: path.to_path_buf(),
            source,
        })
}

/// `path` is absent or a regular file (not a directory, device, FIFO or symbolic link).
fn regular_or_absent(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
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
    Err(CheckpointError::NotRegular {
        path: path.to_path_buf(),
        what,
    })
}

/// fsyncs `dir` so the rename is durable. A file system that cannot sync directories says so
/// with `EINVAL` (or "unsupported"): that alone is not an error.
fn sync_dir(dir: &Path) -> Result<()> {
    let result = File::open(dir).and_then(|d| d.sync_all());
    match result {
        Err(e) if !matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) => {
            Err(CheckpointError::DirectorySync {
                dir: dir.to_path_buf(),
                source: e,
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_write_replaces_the_file_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck.safetensors");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_ne!(
                mode & 0o044,
                0,
                "readable by others as File::create makes it: {mode:o}"
            );
        }
        probe(&path).unwrap();
        assert_eq!(entries(dir.path()), ["ck.safetensors"]);
    }

    #[test]
    fn a_directory_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck");
        std::fs::create_dir(&path).unwrap();
        let err = write_atomically(&path, b"x").unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        assert!(path.is_dir());
        assert!(probe(&path).is_err());
        assert_eq!(entries(dir.path()), ["ck"]);
    }

    #[test]
    fn a_failed_rename_removes_the_temp_file() {
        // The rename fails: the target turns into a non-empty directory between the check and
        // the rename (simulated by creating it under the name after the check would pass).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck");
        let mut tmp = temp_file(&path).unwrap();
        tmp.write_all(b"x").unwrap();
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"y").unwrap();
        let err = tmp.persist(&path).unwrap_err();
        drop(err); // hands the temp file back and removes it
        assert_eq!(entries(dir.path()), ["ck"]);
    }

    #[test]
    fn two_writers_get_two_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck");
        let (a, b) = (temp_file(&path).unwrap(), temp_file(&path).unwrap());
        assert_ne!(a.path(), b.path());
        assert!(
            a.path()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".ck.")
        );
    }
}
