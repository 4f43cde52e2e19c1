//! The library loop's errors as `pipetrain train` reports them: the files and settings they
//! name become the flags that set them (`checkpoint run.st` → `--checkpoint run.st`), and each
//! is sorted into a usage error (exit 2: the command line does not fit, e.g. a `--resume` of
//! another run) or a runtime one (exit 1).

use pipetrain::{CheckpointError, Error, LastGood, RunFile, RunFileError};

use crate::failure::{Failure, explain};
use crate::style::Flags;

/// `error` of the training loop as the command's failure.
pub fn of_run(error: Error) -> Failure {
    let message = cli_message(&error);
    let failure = match error {
        Error::Step { source, .. } => of_run(*source),
        Error::AfterLastGood { source, .. } => of_run(*source),
        Error::RunFile { file, reason, .. } => match (file, reason) {
            (_, RunFileError::Checkpoint(e)) => checkpoint_failure(e.to_string(), &e),
            (_, RunFileError::AmbiguousLayout { .. }) => Failure::usage(message.clone()),
            (_, RunFileError::Output(e)) if !output_io(&e) => Failure::usage(message.clone()),
            (_, RunFileError::MetricsFormat | RunFileError::MetricsEarlier(_)) => {
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
pub fn checkpoint_failure(message: String, error: &CheckpointError) -> Failure {
    match error {
        CheckpointError::NotACheckpoint { .. }
        | CheckpointError::Keys { .. }
        | CheckpointError::Rename { .. }
        | CheckpointError::Mismatch { .. }
        | CheckpointError::Optimizer { .. } => Failure::usage(message),
        _ => Failure::runtime(message),
    }
}

/// The message of `error` with the flags that name its files and settings.
pub fn cli_message(error: &Error) -> String {
    match error {
        Error::Step { step, source } => format!("step {step}: {}", cli_message(source)),
        Error::AfterLastGood { source, saved } => {
            format!("{}\n{}", cli_message(source), last_good(saved))
        }
        Error::RunFile {
            file,
            reason: RunFileError::Checkpoint(e),
            ..
        } => format!("--{file}: {}", explain(e)),
        Error::Renames(e) => format!("--rename: {e}"),
        Error::RunFile {
            file: RunFile::Metrics,
            path,
            reason: RunFileError::MetricsEarlier(why),
        } => format!(
            "--metrics {}: {why}; give another --metrics file",
            path.display()
        ),
        // The library's facts name the file as the flag does, without its dashes.
        Error::RunFile { .. }
        | Error::CheckpointNonFinite { .. }
        | Error::ResumeData { .. }
        | Error::Data { .. } => {
            format!("--{}", error.render(&Flags))
        }
        Error::ResumeMismatch {
            path,
            setting,
            saved,
            ours,
        } => format!(
            "--resume {}: the run was saved with --{setting} {saved}, this one has --{setting} \
             {ours}; resume with the same --{setting} (the batches depend on it)",
            path.display()
        ),
        Error::ResumeSchedule { path, saved, ours } => format!(
            "--resume {}: the run was saved with --lr-schedule {saved}, this one has \
             --lr-schedule {ours}: a schedule's rates follow --lr and --steps, so the steps \
             already taken would have had other rates; resume with the saved run's --steps and \
             --lr, or start a new run from its weights with --init {}",
            path.display(),
            path.display()
        ),
        Error::ResumeDone { path, saved, steps } => format!(
            "--resume {}: the checkpoint is at step {saved} already; --steps {steps} is the \
             total, give more to continue",
            path.display()
        ),
        Error::OtherModel {
            file,
            path,
            stored,
            ours,
            source,
        } => crate::checkpoints::other_model_message(
            &format!("--{file}"),
            path,
            stored,
            ours,
            source,
        ),
        other => explain(other),
    }
}

/// What became of `--checkpoint` when a step failed.
fn last_good(saved: &LastGood) -> String {
    let path = match saved {
        LastGood::Held { path, .. }
        | LastGood::NoStep { path }
        | LastGood::MultiProcess { path }
        | LastGood::Written { path, .. }
        | LastGood::Failed { path, .. } => path.display().to_string(),
    };
    saved.to_string().replacen(
        &format!("checkpoint {path}"),
        &format!("--checkpoint {path}"),
        1,
    )
}

/// Whether `e` failed while writing (a full disk: runtime) rather than refusing the path.
fn output_io(e: &pipetrain::engine::output::OutputError) -> bool {
    use pipetrain::engine::output::OutputError;
    matches!(
        e,
        OutputError::Io { .. } | OutputError::DirectorySync { .. }
    )
}
