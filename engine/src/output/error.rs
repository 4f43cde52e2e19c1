//! [`OutputError`]: why a file could not be written.

use std::path::{Path, PathBuf};

/// Why an output file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The destination exists and is not a regular file: it is never replaced.
    #[error(
        "{} is {what}, not a regular file, and is never replaced: give the path of a file (a \
         new one, or one this command wrote before)",
        path.display()
    )]
    NotRegular {
        /// The destination.
        path: PathBuf,
        /// What it is, e.g. "a directory".
        what: &'static str,
    },
    /// The destination's directory does not exist.
    #[error("directory {} does not exist; create it or choose another path", dir.display())]
    NoDirectory {
        /// The destination.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// No file can be created beside the destination.
    #[error(
        "{}: cannot create a file in its directory ({source}); choose a writable directory",
        path.display()
    )]
    Unwritable {
        /// The destination.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Writing, syncing or renaming failed (a full disk, an I/O error).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file was renamed into place, but its directory could not be synced: a crash now may
    /// lose it.
    #[error(
        "fsync of directory {} failed after writing a file into it ({source}); it may not \
         survive a crash: check the file system",
        dir.display()
    )]
    DirectorySync {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// The I/O error on `path` as an [`OutputError::Io`].
pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}
