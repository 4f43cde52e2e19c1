//! The library loop's errors as `pipetrain train` reports them: rendered in the flags' words
//! (`error.render(&Flags)`: the files and settings they name become the flags that set them,
//! `--checkpoint run.st`), and sorted by the library's [`Error::class`] into a usage error
//! (exit 2: the command line does not fit, e.g. a `--resume` of another run) or a runtime one
//! (exit 1).

use pipetrain::Error;
use pipetrain::RunError;
use pipetrain::remedy::Style;

use crate::failure::{Failure, explain};
use crate::style::Flags;

/// `error` of the training loop as the command's failure: its exit from the library's
/// [`Error::class`], its message in the flags' words.
pub fn of_run(error: Error) -> Failure {
    let message = cli_message(&error);
    Failure::of_build(error).with_message(message)
}

/// The message of `error` with the flags that name its files and settings: the library's
/// facts and remedy in [`Flags`] words, but for the flags that size a model, which only the
/// command line knows.
pub fn cli_message(error: &Error) -> String {
    match error {
        Error::Run(RunError::OtherModel {
            file,
            path,
            stored,
            ours,
            source,
        }) => crate::checkpoints::other_model_message(
            &Flags.label(file.setting()),
            path,
            stored,
            ours,
            source,
        ),
        other => explain(other),
    }
}
