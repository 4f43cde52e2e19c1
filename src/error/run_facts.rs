//! The facts a run error carries: which file ([`RunFile`]), what is wrong with it
//! ([`RunFileProblem`], [`PathProblem`]), and the last good checkpoint a failed step leaves
//! ([`LastGood`]).

use std::fmt;

use pipetrain_engine::EngineError;

use crate::remedy::{Builder, Remedied, Remedy, Setting, Style};

/// A file of a training run, as [`RunError::RunFile`](super::RunError::RunFile) names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunFile {
    /// The checkpoint the run writes.
    Checkpoint,
    /// The checkpoint the run resumes.
    Resume,
    /// The metrics file.
    Metrics,
    /// The chrome trace.
    Profile,
    /// The loss plot.
    Plot,
    /// The weights file a run starts from.
    Init,
}

impl RunFile {
    /// The setting that names the file.
    pub fn setting(self) -> Setting {
        match self {
            RunFile::Checkpoint => Setting::Checkpoint,
            RunFile::Resume => Setting::Resume,
            RunFile::Metrics => Setting::Metrics,
            RunFile::Profile => Setting::Profile,
            RunFile::Plot => Setting::Plot,
            RunFile::Init => Setting::InitFrom,
        }
    }
}

impl fmt::Display for RunFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunFile::Checkpoint => "checkpoint",
            RunFile::Resume => "resume",
            RunFile::Metrics => "metrics",
            RunFile::Profile => "profile",
            RunFile::Plot => "plot",
            RunFile::Init => "init",
        })
    }
}

/// Why a [`RunFile`] failed: a fact of [`RunError::RunFile`](super::RunError::RunFile).
#[derive(Debug)]
#[non_exhaustive]
pub enum RunFileProblem {
    /// The destination is refused or could not be written ([`engine::output`](crate::engine::output)).
    Output(EngineError),
    /// Reading or writing failed.
    Io(std::io::Error),
    /// A checkpoint could not be read or written.
    Checkpoint(EngineError),
    /// A metrics file's extension names no format.
    MetricsFormat,
    /// An earlier run's metrics file cannot be continued (another layout, or not a metrics
    /// file).
    MetricsEarlier(String),
    /// The file's contents are not what was expected.
    Invalid(String),
    /// A weights file fits PyTorch's layout and burn's alike: every matrix is square and no
    /// metadata says which.
    AmbiguousLayout {
        /// The first square matrix.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
    },
}

impl RunFileProblem {
    /// What would fix it, if anything is known.
    pub(super) fn remedy(&self) -> Option<Remedy> {
        match self {
            RunFileProblem::Checkpoint(e) => e.remedy(),
            RunFileProblem::MetricsFormat => {
                Some(Remedy::sentence("name the file *.csv or *.jsonl"))
            }
            RunFileProblem::MetricsEarlier(_) => {
                Some(Remedy::sentence("give another metrics file"))
            }
            RunFileProblem::AmbiguousLayout { .. } => Some(Remedy::sentence(
                "save it with `safetensors.torch.save_file` (it records format=pt) or burn's \
                 store (it records producer=burn), or add that metadata",
            )),
            _ => None,
        }
    }
}

impl fmt::Display for RunFileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunFileProblem::Output(e) => e.fmt(f),
            RunFileProblem::Io(e) => e.fmt(f),
            RunFileProblem::Checkpoint(e) => f.write_str(&e.facts()),
            RunFileProblem::MetricsFormat => f.write_str("unknown format"),
            RunFileProblem::MetricsEarlier(text) | RunFileProblem::Invalid(text) => {
                f.write_str(text)
            }
            RunFileProblem::AmbiguousLayout { tensor, shape } => write!(
                f,
                "tensor `{tensor}` {shape:?} and every other matrix is square, so the file fits \
                 PyTorch's [out, in] layout and burn's [in, out] alike"
            ),
        }
    }
}

impl From<EngineError> for RunFileProblem {
    /// A checkpoint's error (a destination's, from [`engine::output`](crate::engine::output), is
    /// [`RunFileProblem::Output`], given explicitly).
    fn from(e: EngineError) -> Self {
        RunFileProblem::Checkpoint(e)
    }
}

impl From<std::io::Error> for RunFileProblem {
    fn from(e: std::io::Error) -> Self {
        RunFileProblem::Io(e)
    }
}

/// What is wrong with a path: a fact of [`RunError::Path`](super::RunError::Path).
#[derive(Debug)]
#[non_exhaustive]
pub enum PathProblem {
    /// An input is too large for this machine's memory.
    TooLarge {
        /// Its size.
        size: String,
        /// The memory loading it needs.
        needed: String,
        /// How much is available, and why.
        why: String,
    },
    /// An input is a directory.
    Directory,
    /// An input is a device, FIFO or socket.
    NotRegular,
    /// An input does not exist.
    Missing,
    /// An output cannot be written there.
    Output(EngineError),
    /// An output whose size is known before it is written does not fit the free space of its
    /// file system.
    NoSpace {
        /// What it needs, at least.
        needed: String,
        /// What its file system has free.
        free: String,
    },
}

impl PathProblem {
    /// What would fix it, if anything is known.
    pub(super) fn remedy(&self) -> Option<Remedy> {
        Some(Remedy::sentence(match self {
            PathProblem::TooLarge { .. } => "load it on a machine with more memory",
            PathProblem::Directory => "give the .safetensors file in it",
            PathProblem::NotRegular => "give a file",
            PathProblem::NoSpace { .. } => {
                "free that much space there, or write it on another file system"
            }
            PathProblem::Missing | PathProblem::Output(_) => return None,
        }))
    }
}

impl fmt::Display for PathProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathProblem::TooLarge { size, needed, why } => {
                write!(f, "a file of {size} needs about {needed} to load, {why}")
            }
            PathProblem::Directory => f.write_str("is a directory"),
            PathProblem::NotRegular => f.write_str("not a regular file (a device, FIFO or socket)"),
            PathProblem::Missing => f.write_str("no such file"),
            PathProblem::Output(e) => e.fmt(f),
            PathProblem::NoSpace { needed, free } => write!(
                f,
                "it needs at least {needed} and its file system has {free} free, so it would \
                 fail only once the run ends"
            ),
        }
    }
}

/// What became of the checkpoint when a step failed before any stage applied it
/// ([`RunError::AfterLastGood`](super::RunError::AfterLastGood)).
#[derive(Clone, Debug, PartialEq)]
pub enum LastGood {
    /// The checkpoint already held the last good step.
    Held {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
    },
    /// No step completed: nothing was written.
    NoStep {
        /// The checkpoint.
        path: std::path::PathBuf,
    },
    /// A multi-process run does not write it.
    MultiProcess {
        /// The checkpoint.
        path: std::path::PathBuf,
    },
    /// It was written with the weights of the last good step.
    Written {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
    },
    /// Writing it failed too.
    Failed {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
        /// Why.
        error: String,
    },
}

impl LastGood {
    /// What became of the checkpoint, naming it in `style`'s words (`checkpoint run.st`,
    /// `--checkpoint run.st`).
    pub fn describe(&self, style: &dyn Style) -> String {
        let checkpoint = |path: &std::path::Path| {
            format!("{} {}", style.label(Setting::Checkpoint), path.display())
        };
        match self {
            LastGood::Held { path, step } => {
                format!("{} holds step {step}, the last good one", checkpoint(path))
            }
            LastGood::NoStep { path } => {
                format!("no step completed, so {} was not written", checkpoint(path))
            }
            LastGood::MultiProcess { path } => {
                format!("{} was not written (a multi-process run)", checkpoint(path))
            }
            LastGood::Written { path, step } => format!(
                "no stage applied it, so {} was written with the weights of step {step}, the \
                 last good one",
                checkpoint(path)
            ),
            LastGood::Failed { path, step, error } => {
                format!("{} of step {step} failed too: {error}", checkpoint(path))
            }
        }
    }
}

impl fmt::Display for LastGood {
    /// [`LastGood::describe`] in [`Builder`] words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&Builder))
    }
}
