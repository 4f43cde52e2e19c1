//! [`Failure`]: the error that ends a command, with the [`Exit`] code that reports it.
//!
//! `?` turns any other error into a runtime failure (exit 1): reading, training and writing
//! fail that way. The checks of the command line say [`Failure::usage`] (exit 2) themselves,
//! and [`Failure::of_build`] sorts the library's errors by their class.
//!
//! A failure prints its error's facts and remedy in the command line's words ([`explain`]:
//! the remedy as flags, [`Flags`]).

use std::fmt;

use pipetrain::remedy::Remedied;

use crate::exit::Exit;
use crate::style::Flags;

/// Any error, as the commands return it.
pub type BoxError = Box<dyn std::error::Error>;

/// An error that ends a command: [`Exit::Usage`] or [`Exit::Runtime`], and what to print.
///
/// Not a `std::error::Error` itself, so that any error converts into it with `?`.
#[derive(Debug)]
pub struct Failure {
    exit: Exit,
    error: BoxError,
    /// Printed already (a multi-process run prints its error before MPI ends).
    printed: bool,
}

impl Failure {
    /// The command line is wrong: nothing was trained (exit 2).
    pub fn usage(error: impl Into<BoxError>) -> Self {
        Self {
            exit: Exit::Usage,
            error: error.into(),
            printed: false,
        }
    }

    /// The run started and failed (exit 1).
    pub fn runtime(error: impl Into<BoxError>) -> Self {
        Self {
            exit: Exit::Runtime,
            error: error.into(),
            printed: false,
        }
    }

    /// An error of the library, sorted once, by [`pipetrain::Error::class`]: usage (exit 2:
    /// a refused configuration, split, plan, tie or memory budget, a file of another run) or
    /// runtime (exit 1: the run started and failed, or diverged).
    pub fn of_build(error: pipetrain::Error) -> Self {
        match error.class() {
            pipetrain::ErrorClass::Usage => Self::usage(error),
            pipetrain::ErrorClass::Runtime | pipetrain::ErrorClass::Diverged => {
                Self::runtime(error)
            }
        }
    }

    /// The same failure (same exit code) with `message` instead.
    pub fn with_message(self, message: String) -> Self {
        Self {
            exit: self.exit,
            error: message.into(),
            printed: self.printed,
        }
    }

    /// The same failure, printed already: the caller prints nothing more.
    pub fn printed(self) -> Self {
        Self {
            printed: true,
            ..self
        }
    }

    /// Whether it was printed already.
    pub fn is_printed(&self) -> bool {
        self.printed
    }

    /// The exit code that reports this failure.
    pub fn exit(&self) -> Exit {
        self.exit
    }
}

impl<E: Into<BoxError>> From<E> for Failure {
    fn from(error: E) -> Self {
        Self::runtime(error)
    }
}

impl fmt::Display for Failure {
    /// The error's facts and its remedy as flags.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&explain(&*self.error))
    }
}

/// `error`'s facts and, for the errors of pipetrain's crates, its remedy as flags; any other
/// error's `Display`.
pub fn explain(error: &(dyn std::error::Error + 'static)) -> String {
    if let Some(e) = error.downcast_ref::<pipetrain::Error>() {
        return e.render(&Flags);
    }
    let remedied: Option<&dyn Remedied> = None
        .or_else(|| as_remedied::<pipetrain::engine::EngineError>(error))
        .or_else(|| as_remedied::<pipetrain::schedules::ScheduleError>(error))
        .or_else(|| as_remedied::<pipetrain::commands::tune::TuneError>(error));
    match remedied {
        Some(e) => e.explain(&Flags),
        None => error.to_string(),
    }
}

/// `error` as a `T`, which knows its remedy.
fn as_remedied<'a, T: Remedied + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a dyn Remedied> {
    error.downcast_ref::<T>().map(|e| e as &dyn Remedied)
}
