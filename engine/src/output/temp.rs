//! Temp files beside a destination, and the sweep of those a killed writer left.
//!
//! A temp file of destination `run.csv` is named `.run.csv.{pid}@{host}.{random}{suffix}`: the
//! writing process's id and host (dots in the host name become `-`), six random characters, and
//! a suffix ending in `.tmp` (`.tmp`, `.raw.tmp`, or `.tmp.png` when a library picks the format by
//! extension). It is created with `O_CREAT | O_EXCL` (never following a symbolic link) and
//! permissions 0666 less the umask, as `File::create` makes files.
//!
//! [`sweep`] removes the regular files of that form, for that destination, whose process is
//! gone from this host (`/proc/{pid}` missing). Files of other hosts (a shared file system under
//! MPI) and of live processes are left alone; without `/proc` nothing is swept.

use std::path::{Path, PathBuf};

use super::destination::directory;
use crate::error::EngineError;

/// A temp file beside a destination, created exclusively, removed when dropped: the raw stream
/// a writer reads back before it writes the destination (e.g. `--profile`'s raw trace).
pub struct TempFile(tempfile::NamedTempFile);

impl TempFile {
    /// A new temp file beside `path` whose name ends in `suffix` (which must contain `.tmp`,
    /// e.g. `.raw.tmp`).
    ///
    /// # Errors
    /// [`EngineError::Unwritable`] when no file can be created in `path`'s directory.
    pub fn beside(path: &Path, suffix: &str) -> Result<Self, EngineError> {
        beside(path, suffix).map(Self)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// The open file.
    pub fn as_file(&self) -> &std::fs::File {
        self.0.as_file()
    }
}

/// A new temp file beside `path` whose name ends in `suffix` (which must contain `.tmp`),
/// removed when dropped.
pub(super) fn beside(path: &Path, suffix: &str) -> Result<tempfile::NamedTempFile, EngineError> {
    debug_assert!(suffix.contains(".tmp"), "{suffix}");
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    builder
        .prefix(&prefix(path))
        .suffix(suffix)
        .tempfile_in(directory(path))
        .map_err(|source| EngineError::Unwritable {
            path: path.to_path_buf(),
            source,
        })
}

/// Removes the temp files beside `path` that a process of this host, now gone, left. Returns
/// the files removed. Best effort: a file that cannot be removed is left.
pub fn sweep(path: &Path) -> Vec<PathBuf> {
    if !Path::new("/proc/self").exists() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(directory(path)) else {
        return Vec::new();
    };
    let name = file_name(path);
    let host = host();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some((pid, owner_host)) = owner(&name, &file) else {
            continue;
        };
        let ours = owner_host == host && pid != std::process::id();
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if ours && regular && !Path::new("/proc").join(pid.to_string()).exists() {
            let stale = entry.path();
            if std::fs::remove_file(&stale).is_ok() {
                removed.push(stale);
            }
        }
    }
    removed
}

/// `.{file name}.{pid}@{host}.`: the name of every temp file of `path` by this process starts
/// so.
fn prefix(path: &Path) -> String {
    format!(".{}.{}@{}.", file_name(path), std::process::id(), host())
}

/// The owner `(pid, host)` of `file`, when it is a temp file of destination `name`.
fn owner(name: &str, file: &str) -> Option<(u32, String)> {
    let rest = file
        .strip_prefix('.')?
        .strip_prefix(name)?
        .strip_prefix('.')?;
    let (pid, rest) = rest.split_once('@')?;
    let (host, tail) = rest.split_once('.')?;
    let temp = tail.ends_with(".tmp") || tail.contains(".tmp.");
    (temp && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        .then(|| pid.parse().ok().map(|pid| (pid, host.to_string())))
        .flatten()
}

/// `path`'s file name, lossily as text.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// This host's name, as it appears in temp file names (no dots, no path separators).
fn host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .map(|c| match c {
            '.' | '/' | '@' | '\\' => '-',
            c => c,
        })
        .collect();
    match name.is_empty() {
        true => "host".to_string(),
        false => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temp_name_parses_back_to_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.v1.csv");
        let tmp = beside(&path, ".raw.tmp").unwrap();
        let file = tmp
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(
            owner("run.v1.csv", &file),
            Some((std::process::id(), host()))
        );
        assert_eq!(owner("run", &file), None, "another destination's");
        assert_eq!(owner("run.v1.csv", ".run.v1.csv.raw"), None);
        assert_eq!(owner("run.v1.csv", ".run.v1.csv.12@h.abc.txt"), None);
    }

    #[test]
    fn only_the_temp_files_of_gone_processes_of_this_host_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck");
        let host = host();
        // Pid 4194304 is above Linux's pid_max limit: never a live process.
        let dead = dir.path().join(format!(".ck.4194304@{host}.abcdef.tmp"));
        let other_host = dir.path().join(".ck.4194304@elsewhere.abcdef.tmp");
        let live = dir.path().join(format!(".ck.1@{host}.abcdef.tmp"));
        let other_file = dir.path().join(format!(".other.4194304@{host}.abcdef.tmp"));
        let link = dir.path().join(format!(".ck.4194304@{host}.linked.tmp"));
        for f in [&dead, &other_host, &live, &other_file] {
            std::fs::write(f, b"x").unwrap();
        }
        std::os::unix::fs::symlink(&other_file, &link).unwrap();
        let mine = beside(&path, ".tmp").unwrap();
        assert_eq!(sweep(&path), std::slice::from_ref(&dead));
        assert!(!dead.exists());
        for f in [
            &other_host,
            &live,
            &other_file,
            &link,
            &mine.path().to_path_buf(),
        ] {
            assert!(std::fs::symlink_metadata(f).is_ok(), "{}", f.display());
        }
    }
}
