//! The files a run names, checked before anything runs: an input file must exist; an output
//! must be a regular file or a new name in an existing, writable directory (probed the way it
//! is written, see [`crate::engine::output`]); and no two paths of one run may be the same
//! file. A typo is then an error at once, not a read error, nor a write error after the whole
//! training run, and no output ever overwrites another's file. Each path comes with the name
//! its user knows it by (a setting, a flag), which the errors repeat.

use crate::RunError;
use std::path::{Path, PathBuf};

use crate::trainer::footprint::{exceeds, gib};
use crate::{Error, PathProblem};

/// Memory to load a weights file or checkpoint, per byte of it: the file's bytes, and the
/// tensors made from them (converted to f32, at most twice an f16 file's size).
const LOAD_FACTOR: u128 = 3;

/// The error of `path`, named `name`.
fn refused(name: &str, path: &Path, problem: PathProblem) -> Error {
    Error::Run(RunError::Path {
        name: name.to_string(),
        path: path.to_path_buf(),
        problem,
    })
}

/// Each `(name, path)` given must name an existing regular file that this machine's memory can
/// load (weights files and checkpoints are read whole).
///
/// # Errors
/// [`RunError::Path`]: the first path that is not a file, or too large to load, with its name.
pub fn inputs_exist(files: &[(&str, &Option<PathBuf>)]) -> Result<(), Error> {
    for (name, path) in files {
        if let Some(path) = path.as_ref().filter(|p| p.is_file()) {
            let size = std::fs::metadata(path).map_or(0, |m| u128::from(m.len()));
            if let Some(why) = exceeds(size * LOAD_FACTOR) {
                let problem = PathProblem::TooLarge {
                    size: gib(size),
                    needed: gib(size * LOAD_FACTOR),
                    why,
                };
                return Err(refused(name, path, problem));
            }
        }
        if let Some(path) = path.as_ref().filter(|p| !p.is_file()) {
            let problem = if path.is_dir() {
                PathProblem::Directory
            } else if path.exists() {
                PathProblem::NotRegular
            } else {
                PathProblem::Missing
            };
            return Err(refused(name, path, problem));
        }
    }
    Ok(())
}

/// Each `(name, path)` given can be written at the end of the run: a regular file or a new
/// one, in an existing directory where a file can be created, synced and removed (tried now,
/// the way every output is written), so that a bad path does not lose the trained weights or
/// the run's plot after the whole run. Temp files that killed runs left beside the paths are
/// removed on the way.
///
/// # Errors
/// [`RunError::Path`]: the first path that cannot be written, with its name, what is wrong and a
/// remedy.
pub fn outputs_writable(files: &[(&str, &Option<PathBuf>)]) -> Result<(), Error> {
    for (name, path) in files {
        if let Some(path) = path {
            crate::engine::output::probe(path)
                .map_err(|e| refused(name, path, PathProblem::Output(e)))?;
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
                let dir = crate::engine::output::directory(path);
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

/// No output among the `(name, path)`s given is another's file, input or output, except the
/// pairs of names in `allowed` (e.g. resume and checkpoint, which continues a run in place).
/// Two inputs may be one file: reading it twice harms nothing.
///
/// # Errors
/// [`RunError::SameFile`], naming both.
pub fn distinct(
    inputs: &[(&str, Option<&Path>)],
    outputs: &[(&str, Option<&Path>)],
    allowed: &[(&str, &str)],
) -> Result<(), Error> {
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
                return Err(Error::Run(RunError::SameFile {
                    name: a.clone(),
                    path: path_a.clone(),
                    other: b.clone(),
                    other_path: path_b.clone(),
                }));
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
