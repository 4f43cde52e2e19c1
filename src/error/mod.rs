//! The facade's error type, by audience: [`Error::Build`] (a configuration the builder refuses
//! before any thread starts: the user's to fix), [`Error::Run`] (a training run that started and
//! failed), [`Error::Command`] (the subcommands' library side), and the errors of the crates
//! below. [`Error::class`] sorts them once for the library and for the binary's exit codes.
//!
//! Each error states its facts as typed fields and, where one is known, a [`Remedy`] (its
//! [`Remedied::remedy`], asked of the inner error for the crates' errors). `Display` renders the
//! remedy as builder calls ([`Builder`]); [`Error::render`] renders it in any front end's
//! [`Style`] (the `pipetrain` binary's is its flags).

mod build;
mod command;
mod run;
mod run_facts;

use std::fmt;

use pipetrain_engine::EngineError;
use pipetrain_partitioner::PartitionError;
use pipetrain_schedules::ScheduleError;
use pipetrain_tune::TuneError;

pub use build::BuildError;
pub use command::CommandError;
pub use run::RunError;
pub use run_facts::{LastGood, PathProblem, RunFile, RunFileProblem};

use crate::remedy::{Builder, Remedied, Remedy, Setting, Style};

/// Everything `pipetrain` can return.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A configuration refused before any thread started.
    Build(BuildError),
    /// A training run that started and failed.
    Run(RunError),
    /// A subcommand's library side (bench, tune, plan, export).
    Command(CommandError),
    /// The engine's error (the workers, transports, checkpoints, devices).
    Engine(EngineError),
    /// The partitioner's error (a balance that does not fit the model).
    Partition(PartitionError),
    /// The schedules' error (a schedule or plan that does not fit the pipeline).
    Schedule(ScheduleError),
    /// The configuration search's error.
    Tune(TuneError),
}

/// What kind of failure an [`Error`] is: the one sorting the library documents and the
/// `pipetrain` binary turns into its exit code (usage 2, runtime and diverged 1).
///
/// An interruption (SIGINT, SIGTERM) is not an error: the run loop ends with an outcome that
/// says so, and the binary exits 130 or 143 from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request does not fit: a setting, a split, a plan, a file that belongs to another run.
    /// Nothing was trained; changing the request fixes it.
    Usage,
    /// The run started and failed: unreadable or corrupt data or files, a failed worker, a full
    /// disk.
    Runtime,
    /// Training diverged: a loss or weight that is not finite.
    Diverged,
}

impl Error {
    /// The facts and the remedy in `style`'s words: `{facts}; {remedy}`. `Display` is this in
    /// [`Builder`] style.
    pub fn render(&self, style: &dyn Style) -> String {
        self.explain(style)
    }

    /// Whether this is a usage error, a runtime one, or a divergence. A failed step is what
    /// its cause is.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Build(_) | Error::Partition(_) | Error::Schedule(_) | Error::Tune(_) => {
                ErrorClass::Usage
            }
            Error::Run(e) => e.class(),
            Error::Command(e) => e.class(),
            Error::Engine(e) => engine_class(e),
        }
    }

    /// The facts of a run error that names its files and settings, in `style`'s words.
    fn run_facts(&self, style: &dyn Style) -> Option<String> {
        match self {
            Error::Run(e) => e.run_facts(style),
            _ => None,
        }
    }
}

/// The class of an engine error: a tie the model does not have, or a checkpoint that belongs
/// to another model or optimizer, is the request's; a non-finite gradient is a divergence;
/// the rest (a failed worker, an unreadable file) is the run's.
pub(crate) fn engine_class(e: &EngineError) -> ErrorClass {
    match e {
        EngineError::TieUnknown { .. }
        | EngineError::TieShape { .. }
        | EngineError::NotACheckpoint { .. }
        | EngineError::Keys { .. }
        | EngineError::Rename { .. }
        | EngineError::TensorMismatch { .. }
        | EngineError::OptimizerMismatch { .. }
        // A precision a layer cannot compute in (bf16 with BatchNorm): the flags' fault.
        | EngineError::PrecisionUnsupported { .. } => ErrorClass::Usage,
        EngineError::NonFinite { .. } => ErrorClass::Diverged,
        EngineError::StageFailed { source, .. } => match engine_class(source) {
            ErrorClass::Diverged => ErrorClass::Diverged,
            _ => ErrorClass::Runtime,
        },
        _ => ErrorClass::Runtime,
    }
}

impl Remedied for Error {
    /// The facts, then the remedy in `style`'s words; a failed step after a last good one
    /// says what became of the checkpoint last, after the step's remedy.
    fn explain(&self, style: &dyn Style) -> String {
        if let Error::Run(RunError::AfterLastGood { source, saved }) = self {
            return format!("{}\n{}", source.explain(style), saved.describe(style));
        }
        // Its facts name settings (the model, its classes), in the style's words too.
        #[cfg(feature = "trainer")]
        if let Error::Run(RunError::Data { spec, problem }) = self {
            let data = style.label(Setting::Data);
            return format!("{data} {spec}: {}", problem.explain(style));
        }
        let facts = self.run_facts(style).unwrap_or_else(|| self.facts());
        match self.remedy() {
            Some(remedy) => format!("{facts}; {}", remedy.render(style)),
            None => facts,
        }
    }

    fn remedy(&self) -> Option<Remedy> {
        match self {
            Error::Build(e) => e.remedy(),
            Error::Run(e) => e.remedy(),
            Error::Command(e) => e.remedy(),
            Error::Engine(e) => e.remedy(),
            Error::Partition(e) => e.remedy(),
            Error::Schedule(e) => e.remedy(),
            Error::Tune(e) => e.remedy(),
        }
    }

    fn facts(&self) -> String {
        match self {
            Error::Build(e) => e.facts(),
            Error::Run(e) => e.facts(),
            Error::Command(e) => e.facts(),
            Error::Engine(e) => e.to_string(),
            Error::Partition(e) => e.to_string(),
            Error::Schedule(e) => e.to_string(),
            Error::Tune(e) => e.to_string(),
        }
    }
}

impl fmt::Display for Error {
    /// The facts and the remedy as builder calls ([`Error::render`] with [`Builder`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Builder))
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Run(e) => e.source(),
            Error::Build(_) | Error::Command(_) => None,
            Error::Engine(e) => Some(e),
            Error::Partition(e) => e.source(),
            Error::Schedule(e) => e.source(),
            Error::Tune(e) => e.source(),
        }
    }
}

/// `From` for the errors that take one variant each.
macro_rules! from {
    ($($error:ty => $variant:ident),* $(,)?) => {$(
        impl From<$error> for Error {
            fn from(e: $error) -> Self {
                Error::$variant(e)
            }
        }
    )*};
}

from! {
    BuildError => Build,
    RunError => Run,
    CommandError => Command,
    EngineError => Engine,
    PartitionError => Partition,
    ScheduleError => Schedule,
    TuneError => Tune,
}

/// The facade's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `setting = value` breaks `rule`; `remedy` fixes it.
pub(crate) fn invalid<T>(
    setting: Setting,
    value: impl fmt::Display,
    rule: &'static str,
    remedy: Option<Remedy>,
) -> Result<T> {
    Err(Error::Build(BuildError::Setting {
        setting,
        value: value.to_string(),
        rule,
        remedy,
    }))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use pipetrain_engine::EngineError;

    use super::*;
    use crate::remedy::Setting;

    /// One sorting for the library and the binary: a refused setting and a checkpoint of
    /// another model are the request's, a non-finite loss a divergence (also inside a failed
    /// step), a worker that failed the run's.
    #[test]
    fn each_error_has_one_class() {
        let setting = Error::Build(BuildError::Setting {
            setting: Setting::Replicas,
            value: "0".into(),
            rule: "at least 1",
            remedy: None,
        });
        assert_eq!(setting.class(), ErrorClass::Usage);
        let diverged = Error::Run(RunError::NonFiniteLoss {
            step: 3,
            loss: f64::NAN,
        });
        assert_eq!(diverged.class(), ErrorClass::Diverged);
        let step = Error::Run(RunError::Step {
            step: 3,
            source: Box::new(diverged),
        });
        assert_eq!(step.class(), ErrorClass::Diverged);
        let other = Error::Run(RunError::RunFile {
            file: RunFile::Resume,
            path: PathBuf::from("run.st"),
            reason: RunFileProblem::Checkpoint(EngineError::NotACheckpoint {
                path: PathBuf::from("run.st"),
            }),
        });
        assert_eq!(other.class(), ErrorClass::Usage);
        assert_eq!(
            Error::Engine(EngineError::Poisoned).class(),
            ErrorClass::Runtime
        );
    }
}
