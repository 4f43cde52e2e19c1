//! The files the flags name, checked before anything runs: an input file must exist; an output
//! must be a regular file or a new name in an existing, writable directory (probed the way it
//! is written, see [`pipetrain::engine::output`]); and no two paths of one command may be the
//! same file. A typo is then a usage error at once, not a read error, nor a write error after
//! the whole training run, and no output ever overwrites another flag's file.

use std::path::{Path, PathBuf};

use crate::failure::Failure;

/// Memory to load a weights file or checkpoint, per byte of it: the file's bytes, and the
/// tensors made from them (converted to f32, at most twice an f16 file's size).
const LOAD_FACTOR: u128 = 3;

/// Each `(flag, path)` given must name an existing regular file that this machine's memory can
/// load (weights files and checkpoints are read whole).
///
/// # Errors
/// The first path that is not a file, or too large to load, with its flag.
pub fn inputs_exist(files: &[(&str, &Option<PathBuf>)]) -> Result<(), String> {
    for (flag, path) in files {
        if let Some(path) = path.as_ref().filter(|p| p.is_file()) {
            let size = std::fs::metadata(path).map_or(0, |m| u128::from(m.len()));
            if let Some(why) = crate::footprint::exceeds(size * LOAD_FACTOR) {
                return Err(format!(
                    "{flag} {}: a file of {} needs about {} to load, {why}; load it on a machine \
                     with more memory",
                    path.display(),
                    crate::footprint::gib(size),
                    crate::footprint::gib(size * LOAD_FACTOR)
                ));
            }
        }
        if let Some(path) = path.as_ref().filter(|p| !p.is_file()) {
            return Err(if path.is_dir() {
                format!(
                    "{flag} {}: is a directory; give the .safetensors file in it",
                    path.display()
                )
            } else if path.exists() {
                format!(
                    "{flag} {}: not a regular file (a device, FIFO or socket); give a file",
                    path.display()
                )
            } else {
                format!("{flag} {}: no such file", path.display())
            });
        }
    }
    Ok(())
}

/// Each `(flag, path)` given can be written at the end of the run: a regular file or a new
/// one, in an existing directory where a file can be created, synced and removed (tried now,
/// the way every output is written), so that a bad path does not lose the trained weights or
/// the run's plot after the whole run. Temp files that killed runs left beside the paths are
/// removed on the way.
///
/// # Errors
/// The first path that cannot be written, with its flag, what is wrong and a remedy.
pub fn outputs_writable(files: &[(&str, &Option<PathBuf>)]) -> Result<(), String> {
    for (flag, path) in files {
        if let Some(path) = path {
            pipetrain::engine::output::probe(path)
                .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// A file as the file system knows it: its device and inode when it exists (so hard links and
/// symbolic links to one file are one), and its canonical path (the directory resolved) either
/// way.
#[derive(Debug, PartialEq, Eq)]
struct FileId {
    inode: Option<(u64, u64)>,
    canonical: PathBuf,
}

impl FileId {
    /// `path`'s identity; `None` when its directory cannot be resolved (then it cannot be
    /// another flag's file, and the probe reports it).
    fn of(path: &Path) -> Option<Self> {
        let canonical = match std::fs::canonicalize(path) {
            Ok(c) => c,
            Err(_) => {
                let dir = pipetrain::engine::output::directory(path);
                std::fs::canonicalize(dir).ok()?.join(path.file_name()?)
            }
        };
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
        };
        #[cfg(not(unix))]
        let inode = None;
        Some(Self { inode, canonical })
    }

    fn same(&self, other: &Self) -> bool {
        self.canonical == other.canonical || (self.inode.is_some() && self.inode == other.inode)
    }
}

/// No output among the `(flag, path)`s given is another flag's file, input or output, except
/// the pairs of flags in `allowed` (e.g. `--resume ck --checkpoint ck`, which continues a run in
/// place). Two inputs may be one file: reading it twice harms nothing.
///
/// # Errors
/// A usage failure naming both flags and the file.
pub fn distinct(
    inputs: &[(&str, Option<&Path>)],
    outputs: &[(&str, Option<&Path>)],
    allowed: &[(&str, &str)],
) -> Result<(), Failure> {
    let ids = |files: &[(&str, Option<&Path>)]| -> Vec<(String, PathBuf, FileId)> {
        files
            .iter()
            .filter_map(|(flag, path)| {
                let path = (*path)?;
                FileId::of(path).map(|id| (flag.to_string(), path.to_path_buf(), id))
            })
            .collect()
    };
    let (inputs, outputs) = (ids(inputs), ids(outputs));
    for (i, (b, path_b, id_b)) in outputs.iter().enumerate() {
        for (a, path_a, id_a) in inputs.iter().chain(&outputs[..i]) {
            let ok = allowed
                .iter()
                .any(|&(x, y)| (x, y) == (a, b) || (y, x) == (a, b));
            if !ok && id_a.same(id_b) {
                return Err(Failure::usage(format!(
                    "{a} {} and {b} {} are the same file; {b} would overwrite it: give each its \
                     own path",
                    path_a.display(),
                    path_b.display()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_under_two_names_is_refused_naming_both_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        std::fs::write(&file, b"x").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let dotted = dir.path().join(".").join("a.json");
        let new = dir.path().join("new.csv");
        let new_again = dir.path().join("sub/../new.csv");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        for (x, y) in [(&file, &link), (&file, &dotted), (&new, &new_again)] {
            let (x, y) = (x.as_path(), y.as_path());
            let e = distinct(&[], &[("--profile", Some(x)), ("--metrics", Some(y))], &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains("--profile") && e.contains("--metrics"), "{e}");
        }
        let (file, link, new) = (file.as_path(), link.as_path(), new.as_path());
        distinct(
            &[],
            &[("--profile", Some(file)), ("--metrics", Some(new))],
            &[],
        )
        .unwrap();
        distinct(
            &[("--resume", Some(file))],
            &[("--checkpoint", Some(link))],
            &[("--checkpoint", "--resume")],
        )
        .unwrap();
        // Two inputs may be one file; an input and an output may not.
        distinct(
            &[("--init", Some(file)), ("--resume", Some(link))],
            &[],
            &[],
        )
        .unwrap();
        let e = distinct(&[("--init", Some(file))], &[("--plot", Some(link))], &[]);
        assert!(e.unwrap_err().to_string().contains("--plot"));
    }
}
