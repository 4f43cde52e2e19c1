//! The library loop's errors as `pipetrain train` reports them: rendered in the flags' words
//! (`error.render(&Flags)`: the files and settings they name become the flags that set them,
//! `--checkpoint run.st`), and each sorted into a usage error (exit 2: the command line does
//! not fit, e.g. a `--resume` of another run) or a runtime one (exit 1).

use pipetrain::remedy::Style;
use pipetrain::{EngineError, Error, RunFileProblem};

use crate::failure::{Failure, explain};
use crate::style::Flags;

/// `error` of the training loop as the command's failure.
pub fn of_run(error: Error) -> Failure {
    let message = cli_message(&error);
    let failure = match error {
        Error::Step { source, .. } => of_run(*source),
        Error::AfterLastGood { source, .. } => of_run(*source),
        Error::RunFile { file, reason, .. } => match (file, reason) {
            (_, RunFileProblem::Checkpoint(e)) => checkpoint_failure(e.to_string(), &e),
            (_, RunFileProblem::AmbiguousLayout { .. }) => Failure::usage(message.clone()),
            (_, RunFileProblem::Output(e)) if !output_io(&e) => Failure::usage(message.clone()),
            (_, RunFileProblem::MetricsFormat | RunFileProblem::MetricsEarlier(_)) => {
                Failure::usage(message.clone())
            }
            _ => Failure::runtime(message.clone()),
        },
        Error::ResumeMismatch { .. }
        | Error::ResumeSchedule { .. }
        | Error::ResumeDone { .. }
        | Error::ResumeData { .. }
        | Error::OtherModel { .. }
        | Error::Renames(_)
        | Error::Launch(_)
        | Error::Signals(_) => Failure::usage(message.clone()),
        Error::NonFiniteLoss { .. } | Error::CheckpointNonFinite { .. } | Error::Batch { .. } => {
            Failure::runtime(message.clone())
        }
        other => Failure::of_build(other),
    };
    failure.with_message(message)
}

/// A checkpoint error of a file the command line names: a readable file that does not belong
/// to it (weights that do not fit the model, another optimizer's state, plain weights given to
/// `--resume`) is a usage error; an unreadable or corrupt file a runtime one.
pub fn checkpoint_failure(message: String, error: &EngineError) -> Failure {
    match error {
        EngineError::NotACheckpoint { .. }
        | EngineError::Keys { .. }
        | EngineError::Rename { .. }
        | EngineError::TensorMismatch { .. }
        | EngineError::OptimizerMismatch { .. } => Failure::usage(message),
        _ => Failure::runtime(message),
    }
}

/// The message of `error` with the flags that name its files and settings: the library's
/// facts and remedy in [`Flags`] words, but for the flags that size a model, which only the
/// command line knows.
pub fn cli_message(error: &Error) -> String {
    match error {
        Error::OtherModel {
            file,
            path,
            stored,
            ours,
            source,
        } => crate::checkpoints::other_model_message(
            &Flags.label(file.setting()),
            path,
            stored,
            ours,
            source,
        ),
        other => explain(other),
    }
}

/// Whether `e` failed while writing (a full disk: runtime) rather than refusing the path.
fn output_io(e: &pipetrain::engine::EngineError) -> bool {
    use pipetrain::engine::EngineError;
    matches!(
        e,
        EngineError::Io { .. } | EngineError::DirectorySync { .. }
    )
}
