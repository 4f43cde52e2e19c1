//! Atomic writes: the destination holds the old file or the whole new one, and nothing but a
//! regular file is ever replaced (see the module docs of [`super`]).
//!
//! [`AtomicFile`] streams into its temp file and [`AtomicFile::commit`]s it; [`write_atomically`]
//! does both for bytes in memory; [`probe`] runs every step but the rename at the start of a run.

use std::fs::File;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::destination::{directory, regular_or_absent};
use super::temp;
use crate::error::{EngineError, io};

/// Fault injection for the kill-during-write test: with `PIPETRAIN_FAULT_ABORT_BEFORE_RENAME=N`
/// set, the process aborts inside its N-th atomic write, after the temp file is written and
/// synced and before the rename.
const FAULT_VAR: &str = "PIPETRAIN_FAULT_ABORT_BEFORE_RENAME";

/// Atomic writes so far in this process (for [`FAULT_VAR`]).
static WRITES: AtomicU64 = AtomicU64::new(0);

/// Fault injection for the fsync-error tests: with `PIPETRAIN_FAULT_FSYNC=N` set, the process's
/// N-th fsync (of a file or a directory, counted from 1 in the order they run, the start's
/// probes included) fails with an I/O error, as a failing disk reports one.
const FSYNC_FAULT_VAR: &str = "PIPETRAIN_FAULT_FSYNC";

/// fsyncs so far in this process (for [`FSYNC_FAULT_VAR`]).
static SYNCS: AtomicU64 = AtomicU64::new(0);

/// `file.sync_all()`, or the failure [`FSYNC_FAULT_VAR`] injects.
fn sync(file: &File) -> std::io::Result<()> {
    let n = SYNCS.fetch_add(1, Ordering::Relaxed) + 1;
    if std::env::var(FSYNC_FAULT_VAR).is_ok_and(|v| v.trim() == n.to_string()) {
        return Err(std::io::Error::other(format!(
            "Input/output error (injected by {FSYNC_FAULT_VAR}={n})"
        )));
    }
    file.sync_all()
}

/// A file being written atomically: the bytes go to an exclusive temp file beside the
/// destination, which [`commit`](Self::commit) syncs and renames over it. Dropped without a
/// commit (an error, a panic), the temp file is removed and the destination left as it was.
pub struct AtomicFile {
    path: PathBuf,
    out: BufWriter<Temp>,
}

/// The temp file, written through its `File`: tempfile's own writer adds "at path <the temp
/// file>" to an error, and a failed write is the destination's to report (a full disk under
/// `--checkpoint run.st` named `.run.st.123@host.XXXXXX.tmp`).
struct Temp(tempfile::NamedTempFile);

impl Write for Temp {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.as_file_mut().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.as_file_mut().flush()
    }
}

impl AtomicFile {
    /// Starts writing `path`: checks that it is a regular file or absent, sweeps the temp files
    /// of gone writers of `path`, and creates this writer's temp file.
    ///
    /// # Errors
    /// `path` is not a regular file or its directory is missing; no temp file can be created.
    pub fn create(path: &Path) -> Result<Self, EngineError> {
        Self::with_suffix(path, ".tmp")
    }

    /// [`create`](Self::create) with a temp file whose name ends in `.tmp.{extension}`, for a
    /// library that picks the format by the extension of the path it writes
    /// ([`temp_path`](Self::temp_path)).
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn with_extension(path: &Path, extension: &str) -> Result<Self, EngineError> {
        Self::with_suffix(path, &format!(".tmp.{extension}"))
    }

    fn with_suffix(path: &Path, suffix: &str) -> Result<Self, EngineError> {
        regular_or_absent(path)?;
        temp::sweep(path);
        let tmp = temp::beside(path, suffix)?;
        Ok(Self {
            path: path.to_path_buf(),
            out: BufWriter::new(Temp(tmp)),
        })
    }

    /// The destination.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temp file's path (exclusive to this writer), for a library that writes by path.
    pub fn temp_path(&self) -> &Path {
        self.out.get_ref().0.path()
    }

    /// Flushes and fsyncs the temp file, renames it over the destination (checked again: it
    /// must still be a regular file or absent) and fsyncs the directory.
    ///
    /// # Errors
    /// Writing, syncing or renaming failed (the temp file is removed and the destination left
    /// as it was), or the directory's fsync failed (the file is in place).
    pub fn commit(self) -> Result<(), EngineError> {
        let Self { path, out } = self;
        // On failure the temp file is dropped with the error, which removes it; the error
        // names the destination, whose name the user gave.
        let Temp(tmp) = out.into_inner().map_err(|e| io(&path)(e.into_error()))?;
        sync(tmp.as_file()).map_err(io(&path))?;
        regular_or_absent(&path)?;
        let n = WRITES.fetch_add(1, Ordering::Relaxed) + 1;
        if std::env::var(FAULT_VAR).is_ok_and(|v| v.trim() == n.to_string()) {
            eprintln!(
                "{FAULT_VAR}={n}: aborting before renaming {}",
                tmp.path().display()
            );
            std::process::abort();
        }
        // On failure `persist` hands the temp file back; dropping it removes it.
        tmp.persist(&path).map_err(|e| EngineError::Io {
            path: path.clone(),
            source: e.error,
        })?;
        sync_dir(directory(&path))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Writes `bytes` to `path` atomically (an [`AtomicFile`] written and committed).
///
/// # Errors
/// `path` exists and is not a regular file (a directory, a device, a FIFO, a symbolic link:
/// never replaced); the temp file cannot be created, written or synced (it is removed); the
/// rename or the directory's fsync fails.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), EngineError> {
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes).map_err(io(path))?;
    file.commit()
}

/// Checks at the start of a run that `path` can be written atomically: it is a regular file or
/// absent in an existing directory, and a temp file can be created, written, synced and removed
/// beside it. Stale temp files of `path` are swept on the way.
///
/// # Errors
/// `path` exists and is not a regular file, or the temp file cannot be created, written, synced
/// or removed; the error names the path and what the file system said.
pub fn probe(path: &Path) -> Result<(), EngineError> {
    regular_or_absent(path)?;
    temp::sweep(path);
    // Its errors name `path`, as a write's do (see [`Temp`]).
    let mut tmp = temp::beside(path, ".tmp")?;
    tmp.as_file_mut().write_all(b"probe").map_err(io(path))?;
    sync(tmp.as_file()).map_err(io(path))?;
    tmp.close().map_err(io(path))
}

/// fsyncs `dir` so the rename is durable. A file system that cannot sync directories says so
/// with `EINVAL` (or "unsupported"): that alone is not an error.
fn sync_dir(dir: &Path) -> Result<(), EngineError> {
    let result = File::open(dir).and_then(|d| sync(&d));
    match result {
        Err(e) if !matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) => {
            Err(EngineError::DirectorySync {
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
        let mut tmp = temp::beside(&path, ".tmp").unwrap();
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
        let (a, b) = (
            AtomicFile::create(&path).unwrap(),
            AtomicFile::create(&path).unwrap(),
        );
        let (a, b) = (a.temp_path(), b.temp_path());
        assert_ne!(a, b);
        assert!(a.file_name().unwrap().to_string_lossy().starts_with(".ck."));
    }

    #[test]
    fn a_symbolic_link_or_fifo_is_never_replaced_nor_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = write_atomically(&link, b"x").unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
        assert!(probe(&link).is_err());
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let err = AtomicFile::create(&fifo).err().unwrap().to_string();
            assert!(err.contains("is a device, FIFO or socket"), "{err}");
            assert!(probe(&fifo).is_err());
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }

    #[test]
    fn an_uncommitted_file_leaves_the_destination_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.csv");
        std::fs::write(&path, b"old").unwrap();
        let mut file = AtomicFile::create(&path).unwrap();
        file.write_all(b"new rows").unwrap();
        file.flush().unwrap();
        assert_eq!(entries(dir.path()).len(), 2, "the temp file beside it");
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(entries(dir.path()), ["m.csv"]);
        let mut file = AtomicFile::with_extension(&path, "png").unwrap();
        assert!(file.temp_path().to_string_lossy().ends_with(".tmp.png"));
        file.write_all(b"new").unwrap();
        file.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/ck");
        let err = probe(&path).unwrap_err().to_string();
        assert!(
            err.contains("does not exist") && err.contains("no/such"),
            "{err}"
        );
    }
}
