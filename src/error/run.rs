//! What a training run (the `trainer` loop, the burn-train strategy) can fail on:
//! [`RunError`], with typed facts (its files, in `run_facts.rs`) and typed remedies; the
//! binary words both in flags.

use std::path::PathBuf;

use pipetrain_engine::EngineError;

use super::run_facts::{LastGood, PathProblem, RunFile, RunFileProblem};
use super::{Error, ErrorClass, engine_class};
use crate::remedy::{Builder, Remedied, Remedy, Setting, Style, Value};

/// A training run's failure ([`Error::Run`](super::Error::Run)).
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The directory for the pipeline's own state cannot be created.
    StateDir {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A training step failed.
    Step {
        /// The optimizer step, from 1.
        step: u64,
        /// What failed.
        source: Box<Error>,
    },
    /// A step's loss is NaN or infinite and the gradient guard did not skip it.
    NonFiniteLoss {
        /// The optimizer step, from 1.
        step: u64,
        /// The loss.
        loss: f64,
    },
    /// A file of the run (its checkpoint, metrics, trace, plot, or the checkpoint it resumes)
    /// could not be read or written.
    RunFile {
        /// Which file.
        file: RunFile,
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: RunFileProblem,
    },
    /// The checkpoint to resume was saved by a run with another value of a setting the
    /// batches depend on.
    ResumeMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// The identity entry (`seed`, `batch`, …: [`RunIdentity`](crate::trainer::RunIdentity)).
        setting: String,
        /// The saved run's value.
        saved: String,
        /// This run's value.
        ours: String,
    },
    /// The checkpoint to resume was saved under another learning-rate schedule.
    ResumeSchedule {
        /// The checkpoint.
        path: PathBuf,
        /// The saved run's schedule.
        saved: String,
        /// This run's.
        ours: String,
    },
    /// The checkpoint to resume is at the run's last step already.
    ResumeDone {
        /// The checkpoint.
        path: PathBuf,
        /// Its step.
        saved: u64,
        /// The run's total steps.
        steps: u64,
    },
    /// The checkpoint's next data position is not the one this data gives at its step.
    ResumeData {
        /// The checkpoint.
        path: PathBuf,
        /// The saved position.
        saved: String,
        /// This data's position at `step`.
        expected: String,
        /// The checkpoint's step.
        step: u64,
    },
    /// A step made a weight non-finite from finite gradients: the checkpoint was not written.
    CheckpointNonFinite {
        /// The checkpoint.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The element.
        index: usize,
        /// Its value, as text (`inf`, `NaN`).
        value: String,
    },
    /// A step failed after a last good step whose checkpoint could be kept: what became of it.
    AfterLastGood {
        /// The step's error.
        source: Box<Error>,
        /// What became of the checkpoint.
        saved: LastGood,
    },
    /// A training batch could not be read or shaped ([`Source`](crate::trainer::Source)).
    Batch {
        /// The batch's index in the run, from 0.
        index: u64,
        /// The spec of the run's [`Data`](crate::trainer::Data) it came from, if it did.
        data: Option<String>,
        /// Why.
        reason: String,
    },
    /// The run's data cannot be used ([`Data::open`](crate::trainer::Data::open)).
    #[cfg(feature = "trainer")]
    Data {
        /// The data's spec, as given.
        spec: String,
        /// What is wrong.
        problem: crate::trainer::DataProblem,
    },
    /// A checkpoint to resume or to take weights from holds another model, whose weights do
    /// not fit this one.
    OtherModel {
        /// Which file.
        file: RunFile,
        /// The checkpoint.
        path: PathBuf,
        /// The model it holds.
        stored: String,
        /// This run's model.
        ours: String,
        /// Why the weights do not fit.
        source: EngineError,
    },
    /// A path a run reads or writes cannot be used ([`trainer::paths`](crate::trainer::paths)).
    Path {
        /// The name its user knows it by.
        name: String,
        /// The path.
        path: PathBuf,
        /// What is wrong.
        problem: PathProblem,
    },
    /// An output of a run is another of its files.
    SameFile {
        /// The first file's name.
        name: String,
        /// Its path.
        path: PathBuf,
        /// The output's name.
        other: String,
        /// Its path.
        other_path: PathBuf,
    },
    /// A multi-process launch does not fit the run: the launcher's processes cannot hold its
    /// workers, they were given different settings, or no MPI launcher started them.
    Launch(String),
    /// Tensor-name rewriting rules (`REGEX=REPLACEMENT`) do not parse or collide.
    Renames(String),
    /// The signal handlers could not be installed, or the stop hook is malformed.
    Signals(String),
    /// Side outputs of a run that otherwise succeeded could not be written (`--metrics`,
    /// `--profile`, `--plot` on a full disk): the training and its checkpoint are done, but a
    /// file at an output's path is not this run's.
    OutputsLost {
        /// How many were lost.
        count: usize,
        /// The first one's warning.
        first: String,
    },
}

impl RunError {
    /// The facts in the library's words.
    pub(super) fn facts(&self) -> String {
        if let Some(facts) = self.run_facts(&Builder) {
            return facts;
        }
        match self {
            RunError::StateDir { path, source } => format!(
                "cannot create the pipeline state directory {}: {source}",
                path.display()
            ),
            RunError::NonFiniteLoss { step, loss } => format!("step {step}: the loss is {loss}"),
            RunError::Path {
                name,
                path,
                problem,
            } => format!("{name} {}: {problem}", path.display()),
            RunError::SameFile {
                name,
                path,
                other,
                other_path,
            } => format!(
                "{name} {} and {other} {} are the same file; {other} would overwrite it",
                path.display(),
                other_path.display()
            ),
            RunError::Launch(text) => text.clone(),
            RunError::Signals(text) => format!("signals: {text}"),
            RunError::OutputsLost { count, first } => format!(
                "{count} output(s) not written, the first: {first}; the training is done (and \
                 its --checkpoint written, if given), but a file at an output's path is not \
                 this run's"
            ),
            _ => unreachable!("every run error has facts"),
        }
    }

    /// The facts of an error that names its files and settings, in `style`'s words
    /// (`checkpoint run.st`, `--checkpoint run.st`).
    pub(super) fn run_facts(&self, style: &dyn Style) -> Option<String> {
        let file = |setting, path: &std::path::Path| {
            format!("{} {}", style.label(setting), path.display())
        };
        let resume = |path| file(Setting::Resume, path);
        Some(match self {
            RunError::Step { step, source } => format!(
                "step {step}: {}",
                source.run_facts(style).unwrap_or_else(|| source.facts())
            ),
            // A checkpoint's error names its path itself.
            RunError::RunFile {
                file: which,
                reason: reason @ RunFileProblem::Checkpoint(_),
                ..
            } => format!("{}: {reason}", style.label(which.setting())),
            RunError::RunFile {
                file: which,
                path,
                reason,
            } => format!("{}: {reason}", file(which.setting(), path)),
            RunError::ResumeMismatch {
                path,
                setting,
                saved,
                ours,
            } => {
                let setting = style.entry(setting);
                format!(
                    "{}: the run was saved with {setting} {saved}, this one has {setting} \
                     {ours} (the batches depend on it)",
                    resume(path)
                )
            }
            RunError::ResumeSchedule { path, saved, ours } => {
                let schedule =
                    |s: &String| style.set(Setting::LrSchedule, &Value::Mode(s.clone().into()));
                format!(
                    "{}: the run was saved with {}, this one has {}: a schedule's rates follow \
                     {} and {}, so the steps already taken would have had other rates",
                    resume(path),
                    schedule(saved),
                    schedule(ours),
                    style.label(Setting::LearningRate),
                    style.label(Setting::Steps)
                )
            }
            RunError::ResumeDone { path, saved, steps } => format!(
                "{}: the checkpoint is at step {saved} already; {} is the total",
                resume(path),
                style.set(Setting::Steps, &Value::Count(*steps as usize))
            ),
            RunError::ResumeData {
                path,
                saved,
                expected,
                step,
            } => format!(
                "{}: the checkpoint's next data is {saved}, this data gives {expected} at step \
                 {step}; the dataset changed",
                resume(path)
            ),
            RunError::CheckpointNonFinite {
                path,
                tensor,
                index,
                value,
            } => format!(
                "{}: not written: weight `{tensor}` element {index} is {value} after this step \
                 (its gradients were finite)",
                file(Setting::Checkpoint, path)
            ),
            RunError::AfterLastGood { source, saved } => format!(
                "{}\n{}",
                source.run_facts(style).unwrap_or_else(|| source.facts()),
                saved.describe(style)
            ),
            RunError::OtherModel {
                file: which,
                path,
                stored,
                ours,
                source,
            } => format!(
                "{}: the file holds {stored}, but this run builds {ours} ({source})",
                file(which.setting(), path)
            ),
            #[cfg(feature = "trainer")]
            RunError::Data { spec, problem } => {
                format!("{} {spec}: {problem}", style.label(Setting::Data))
            }
            RunError::Renames(text) => format!("{}: {text}", style.label(Setting::Rename)),
            RunError::Batch {
                data: Some(spec),
                reason,
                ..
            } => format!("{} {spec}: {reason}", style.label(Setting::Data)),
            RunError::Batch { reason, .. } => reason.clone(),
            _ => return None,
        })
    }

    /// What fixes it.
    pub(super) fn remedy(&self) -> Option<Remedy> {
        match self {
            RunError::StateDir { .. } => Some(Remedy::sentence("give a writable directory")),
            RunError::Step { source, .. } => source.remedy(),
            RunError::NonFiniteLoss { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::LearningRate, Value::Smaller),
                Remedy::set(Setting::ClipGradNorm, Value::Number(1.0)),
                Remedy::set(Setting::SkipNonFinite, Value::On),
            ])),
            RunError::CheckpointNonFinite { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::LearningRate, Value::Smaller),
                Remedy::set(Setting::ClipGradNorm, Value::Number(1.0)),
            ])),
            RunError::ResumeMismatch { setting, .. } => {
                Some(Remedy::sentence(format!("resume with the same {setting}")))
            }
            RunError::ResumeSchedule { .. } => Some(Remedy::one_of([
                Remedy::sentence("resume with the saved run's steps and learning rate"),
                Remedy::set(Setting::InitFrom, Value::Any),
            ])),
            RunError::ResumeDone { .. } => Some(Remedy::sentence("give more steps to continue")),
            RunError::OtherModel { .. } => Some(Remedy::sentence(
                "give the settings of the stored model, or a file of this model",
            )),
            RunError::SameFile { .. } => Some(Remedy::sentence("give each its own path")),
            RunError::RunFile { reason, .. } => reason.remedy(),
            RunError::Path { problem, .. } => problem.remedy(),
            #[cfg(feature = "trainer")]
            RunError::Data { problem, .. } => problem.remedy(),
            RunError::AfterLastGood { .. }
            | RunError::ResumeData { .. }
            | RunError::Batch { .. }
            | RunError::Launch(_)
            | RunError::Renames(_)
            | RunError::Signals(_)
            | RunError::OutputsLost { .. } => None,
        }
    }

    /// Usage, runtime or diverged ([`Error::class`](super::Error::class)): a failed step is
    /// what its cause is; a run file that belongs to another run, or an output path refused
    /// before anything was written, is the request's; a file that fails while written is the
    /// run's.
    pub(super) fn class(&self) -> ErrorClass {
        match self {
            RunError::Step { source, .. } | RunError::AfterLastGood { source, .. } => {
                source.class()
            }
            RunError::RunFile { reason, .. } => match reason {
                RunFileProblem::Checkpoint(e) => match engine_class(e) {
                    ErrorClass::Usage => ErrorClass::Usage,
                    _ => ErrorClass::Runtime,
                },
                RunFileProblem::AmbiguousLayout { .. }
                | RunFileProblem::MetricsFormat
                | RunFileProblem::MetricsEarlier(_) => ErrorClass::Usage,
                // Refused before writing (usage), or failed while writing (a full disk).
                RunFileProblem::Output(e) => match e {
                    EngineError::Io { .. } | EngineError::DirectorySync { .. } => {
                        ErrorClass::Runtime
                    }
                    _ => ErrorClass::Usage,
                },
                _ => ErrorClass::Runtime,
            },
            RunError::ResumeMismatch { .. }
            | RunError::ResumeSchedule { .. }
            | RunError::ResumeDone { .. }
            | RunError::ResumeData { .. }
            | RunError::OtherModel { .. }
            | RunError::Renames(_)
            | RunError::Launch(_)
            | RunError::Signals(_) => ErrorClass::Usage,
            RunError::NonFiniteLoss { .. } | RunError::CheckpointNonFinite { .. } => {
                ErrorClass::Diverged
            }
            _ => ErrorClass::Runtime,
        }
    }

    /// The error that caused this one.
    pub(super) fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::StateDir { source, .. } => Some(source),
            RunError::Step { source, .. } | RunError::AfterLastGood { source, .. } => {
                Some(&**source)
            }
            RunError::OtherModel { source, .. } => Some(source),
            _ => None,
        }
    }
}
