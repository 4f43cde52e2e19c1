//! Reading a text file a user names, bounded: a plan file here, and the `pipetrain` binary's
//! `--config` file with the same rules.
//!
//! What is not a regular file is refused before it is opened (opening a FIFO blocks until
//! something writes to it, which may be never; a device such as `/dev/zero` never ends), and
//! again on the file opened (the path may name another one by then). At most `limit` bytes are
//! read: a larger file is refused, not truncated.

use std::fmt;
use std::io::Read;
use std::path::Path;

/// Why a text file could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileProblem {
    /// A device, FIFO, socket or directory.
    NotRegular,
    /// Larger than the limit the caller gave, in bytes.
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The system's error opening or reading it (missing, no permission, not UTF-8).
    Io(String),
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileProblem::NotRegular => {
                f.write_str("not a regular file (a device, FIFO or directory); give a text file")
            }
            FileProblem::TooLarge { limit } => write!(f, "over {} KiB", limit >> 10),
            FileProblem::Io(error) => f.write_str(error),
        }
    }
}

/// The text of `path`, if it is a regular file of at most `limit` bytes (see the module docs).
///
/// ```
/// use pipetrain_schedules::{FileProblem, read_bounded};
/// let dir = std::env::temp_dir().join(format!("pt-read-bounded-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let file = dir.join("flags.toml");
/// std::fs::write(&file, "stages = 2\n").unwrap();
/// assert_eq!(read_bounded(&file, 1 << 10).unwrap(), "stages = 2\n");
/// assert_eq!(read_bounded(&file, 4), Err(FileProblem::TooLarge { limit: 4 }));
/// assert_eq!(read_bounded(&dir, 1 << 10), Err(FileProblem::NotRegular));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
///
/// # Errors
/// [`FileProblem`]: not a regular file, over `limit` bytes, unreadable or not UTF-8.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, FileProblem> {
    let io = |e: std::io::Error| FileProblem::Io(e.to_string());
    // `metadata` follows symbolic links, as `open` does.
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(FileProblem::NotRegular);
    }
    let file = std::fs::File::open(path).map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(FileProblem::NotRegular);
    }
    let mut text = String::new();
    file.take(limit.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > limit {
        return Err(FileProblem::TooLarge { limit });
    }
    Ok(text)
}
