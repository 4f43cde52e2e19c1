//! The files a run names, checked before anything runs: an input file must exist; an output
//! must be a regular file or a new name in an existing, writable directory (probed the way it
//! is written, see [`crate::engine::output`]); and no two paths of one run may be the same
//! file. A typo is then an error at once, not a read error, nor a write error after the whole
//! training run, and no output ever overwrites another's file. Each path comes with the name
//! its user knows it by (a setting, a flag), which the errors repeat.
//!
//! One rule for every subcommand (issue 47): a file that will be written is an output,
//! whichever subcommand writes it, and [`Files`] checks every output against every file the
//! command reads (a data set's files included) and every other output (each rank's name of a
//! per-rank output included). `train`, `tune --apply`, `export` and `bench --out` list theirs
//! in one [`Files`].

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
/// load (weights files and checkpoints are read whole). `--init` may also name a Hugging Face
/// checkpoint directory ([`hf::is_checkpoint_dir`](crate::trainer::hf::is_checkpoint_dir)),
/// whose files its reader checks.
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
        let hf_init = |p: &Path| *name == "--init" && crate::trainer::hf::is_checkpoint_dir(p);
        if let Some(path) = path.as_ref().filter(|p| !p.is_file() && !hf_init(p)) {
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

/// The files one command reads and writes, by the names their user knows them by: checked
/// by [`Files::check`] so that no output is another's file, input or output.
#[derive(Debug, Default)]
pub struct Files {
    inputs: Vec<(String, PathBuf)>,
    outputs: Vec<(String, PathBuf)>,
    allowed: Vec<(String, String)>,
}

impl Files {
    /// No files yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `path`, if given, is read, named `name`.
    pub fn input(mut self, name: &str, path: Option<&Path>) -> Self {
        if let Some(path) = path {
            self.inputs.push((name.to_string(), path.to_path_buf()));
        }
        self
    }

    /// Every file the data set `spec` reads ([`pipetrain_data::DataSpec::files`]: the
    /// `tensors:` or `text:` file, MNIST's and CIFAR-10's training files), named `name`. A
    /// spec that does not parse reads nothing (the data's own check refuses it).
    pub fn data(mut self, name: &str, spec: &str) -> Self {
        if let Ok(spec) = spec.parse::<pipetrain_data::DataSpec>() {
            for file in spec.files() {
                self.inputs.push((name.to_string(), file));
            }
        }
        self
    }

    /// `path`, if given, is written, named `name`.
    pub fn output(mut self, name: &str, path: Option<&Path>) -> Self {
        if let Some(path) = path {
            self.outputs.push((name.to_string(), path.to_path_buf()));
        }
        self
    }

    /// `path`, if given, is written once per process of a run of `processes`, each under its
    /// rank's name ([`rank_path`]: `trace.json` → `trace.rank1.json`), named `name`; a run of
    /// one process writes `path` itself.
    pub fn per_rank(mut self, name: &str, path: Option<&Path>, processes: usize) -> Self {
        if let Some(path) = path {
            match processes {
                0 | 1 => self.outputs.push((name.to_string(), path.to_path_buf())),
                n => self.outputs.extend(
                    (0..n).map(|rank| (format!("{name} (rank {rank})"), rank_path(path, rank))),
                ),
            }
        }
        self
    }

    /// The files named `a` and `b` may be one (e.g. `--resume` and `--checkpoint`: a run
    /// continued in place reads its checkpoint before it replaces it, atomically).
    pub fn allow(mut self, a: &str, b: &str) -> Self {
        self.allowed.push((a.to_string(), b.to_string()));
        self
    }

    /// No output is another's file, input or output ([`distinct`]).
    ///
    /// # Errors
    /// [`RunError::SameFile`], naming both.
    pub fn check(&self) -> Result<(), Error> {
        let allowed: Vec<(&str, &str)> = self
            .allowed
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        distinct(&borrowed(&self.inputs), &borrowed(&self.outputs), &allowed)
    }
}

/// `(name, path)`s as [`distinct`] takes them.
fn borrowed(files: &[(String, PathBuf)]) -> Vec<(&str, Option<&Path>)> {
    files
        .iter()
        .map(|(n, p)| (n.as_str(), Some(p.as_path())))
        .collect()
}

/// `path` with `rank` before its extension: `trace.json` → `trace.rank3.json`, the name
/// process `rank` of a multi-process run writes a per-rank output under.
pub fn rank_path(path: &Path, rank: usize) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, path.extension()) {
        (Some(stem), Some(ext)) => format!("{stem}.rank{rank}.{}", ext.to_string_lossy()),
        (Some(stem), None) => format!("{stem}.rank{rank}"),
        _ => format!("rank{rank}"),
    };
    path.with_file_name(name)
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

    #[test]
    fn every_rank_name_of_a_per_rank_output_is_checked_against_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("dd.rank1.st");
        std::fs::write(&data, b"x").unwrap();
        let spec = format!("tensors:{}", data.display());
        let profile = dir.path().join("dd.st");
        let files = |processes| {
            Files::new()
                .data("--data", &spec)
                .per_rank("--profile", Some(&profile), processes)
                .check()
        };
        files(1).unwrap();
        let e = files(2).unwrap_err().to_string();
        assert!(
            e.contains("--profile (rank 1)") && e.contains("--data"),
            "{e}"
        );
        assert_eq!(
            rank_path(Path::new("a/t.json"), 3),
            Path::new("a/t.rank3.json")
        );
    }
}
