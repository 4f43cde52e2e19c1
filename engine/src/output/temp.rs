//! Temp files beside a destination, and the sweep of those a killed writer left.
//!
//! A temp file of destination `run.csv` is named `.run.csv.{pid}@{host}.{random}{suffix}`: the
//! writing process's id and host (dots in the host name become `-`), exactly [`RANDOM`] random
//! letters and digits, and one of pipetrain's suffixes (`.tmp`, `.raw.tmp`, or `.tmp.{ext}` when
//! a library picks the format by extension). It is created with `O_CREAT | O_EXCL` (never
//! following a symbolic link) and permissions 0666 less the umask, as `File::create` makes
//! files.
//!
//! [`sweep`] removes only the files it can tell are its own: regular files of exactly that form,
//! for that destination, owned by this process's user, whose process is gone from this host
//! (`/proc/{pid}` missing). A user's file that merely looks alike (`.run.csv.3999999@host.my-notes.tmp`,
//! issue 38), another user's, another host's (a shared file system under MPI) and a live
//! process's are left alone; without `/proc` nothing is swept.

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
    /// [`EngineError::Unwritable`] when no file can be created in `path`'s directory,
    /// [`EngineError::NameTooLong`] when the temp file's name is too long for it.
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
    builder.rand_bytes(RANDOM);
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    builder
        .prefix(&prefix(path))
        .suffix(suffix)
        .tempfile_in(directory(path))
        .map_err(|source| {
            let name = file_name(path).len();
            let temp = prefix(path).len() + RANDOM + suffix.len();
            match source.kind() {
                std::io::ErrorKind::InvalidFilename => EngineError::NameTooLong {
                    path: path.to_path_buf(),
                    name,
                    temp,
                    over: temp.saturating_sub(255),
                },
                _ => EngineError::Unwritable {
                    path: path.to_path_buf(),
                    source,
                },
            }
        })
}

/// Removes the temp files beside `path` that a process of this host, now gone, left. Returns
/// the files removed. Best effort: a file that cannot be removed is left.
pub fn sweep(path: &Path) -> Vec<PathBuf> {
    // `/proc/self` belongs to this process's (effective) user.
    let Some(user) = std::fs::metadata("/proc/self")
        .ok()
        .and_then(|m| user_of(&m))
    else {
        return Vec::new();
    };
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
        // `DirEntry::metadata` does not follow a symbolic link.
        let meta = entry.metadata().ok();
        let regular = meta.as_ref().is_some_and(|m| m.is_file());
        let owned = meta.as_ref().and_then(user_of) == Some(user);
        if ours && regular && owned && !Path::new("/proc").join(pid.to_string()).exists() {
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

/// The random letters and digits of a temp file's name.
pub const RANDOM: usize = 6;

/// The user who owns a file, where the platform says.
fn user_of(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    return Some(std::os::unix::fs::MetadataExt::uid(meta));
    #[cfg(not(unix))]
    return None;
}

/// The owner `(pid, host)` of `file`, when it is a temp file of destination `name` in exactly
/// the form [`beside`] names them.
fn owner(name: &str, file: &str) -> Option<(u32, String)> {
    let rest = file
        .strip_prefix('.')?
        .strip_prefix(name)?
        .strip_prefix('.')?;
    let (pid, rest) = rest.split_once('@')?;
    let (host, tail) = rest.split_once('.')?;
    let (random, suffix) = (tail.get(..RANDOM)?, tail.get(RANDOM..)?);
    let alphanumeric = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric());
    let ext = suffix.strip_prefix(".tmp.");
    let ours = matches!(suffix, ".tmp" | ".raw.tmp")
        || ext.is_some_and(|ext| !ext.is_empty() && alphanumeric(ext));
    (ours && alphanumeric(random) && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
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
        // Issue 38: only the exact form is ours.
        assert_eq!(
            owner("ck", ".ck.3999999@h.abcdef.tmp"),
            Some((3999999, "h".into()))
        );
        assert_eq!(
            owner("ck", ".ck.3999999@h.abcDE9.tmp.png"),
            Some((3999999, "h".into()))
        );
        for theirs in [
            ".ck.3999999@h.my-notes.tmp",
            ".ck.3999999@h.abcdefg.tmp",
            ".ck.3999999@h.abcde.tmp",
            ".ck.3999999@h.abcdef.old.tmp",
            ".ck.3999999@h.abcdef.tmp.",
            ".ck.3999999@h.abc-ef.tmp",
        ] {
            assert_eq!(owner("ck", theirs), None, "{theirs}");
        }
    }

    #[test]
    fn a_name_that_leaves_no_room_for_the_temp_files_is_named_as_the_cause() {
        // Issue 38: a 240-character name was told "choose a writable directory".
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join(format!("{}.st", "a".repeat(240)));
        let err = beside(&long, ".tmp").expect_err("a temp name above 255 bytes");
        let EngineError::NameTooLong {
            name, temp, over, ..
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!((*name, *over), (243, temp - 255), "{err}");
        assert!(
            err.to_string().contains("choose a name shorter by"),
            "{err}"
        );
        let fits = dir.path().join(format!("{}.st", "a".repeat(240 - over)));
        assert!(beside(&fits, ".tmp").is_ok(), "the remedy followed");
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
        let notes = dir.path().join(format!(".ck.4194304@{host}.my-notes.tmp"));
        let others = dir.path().join(format!(".ck.4194304@{host}.ghijkl.tmp"));
        for f in [&dead, &other_host, &live, &other_file, &notes, &others] {
            std::fs::write(f, b"x").unwrap();
        }
        // Another user's (where this test may give it away: as root).
        let given_away = std::os::unix::fs::chown(&others, Some(4_000_001), None).is_ok();
        std::os::unix::fs::symlink(&other_file, &link).unwrap();
        let mine = beside(&path, ".tmp").unwrap();
        assert_eq!(sweep(&path), std::slice::from_ref(&dead));
        assert!(!dead.exists());
        for f in [
            &other_host,
            &live,
            &other_file,
            &link,
            &notes,
            &mine.path().to_path_buf(),
        ] {
            assert!(std::fs::symlink_metadata(f).is_ok(), "{}", f.display());
        }
        assert_eq!(others.exists(), given_away, "another user's file is kept");
    }
}
