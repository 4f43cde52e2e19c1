//! Atomic writes: a kill during a write leaves the previous file intact.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::{Result, io};

/// Writes `bytes` to `path` atomically: temp file in the same directory, fsync, rename over `path`, fsync the directory.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all(); // not every file system syncs directories
    }
    Ok(())
}
