//! [`Failure`]: the error that ends a command, with the [`Exit`] code that reports it.
//!
//! `?` turns any other error into a runtime failure (exit 1): reading, training and writing
//! fail that way. The checks of the command line say [`Failure::usage`] (exit 2) themselves,
//! and [`Failure::of_build`] sorts the pipeline builder's errors.

use std::fmt;

use crate::exit::Exit;

/// Any error, as the commands return it.
pub type BoxError = Box<dyn std::error::Error>;

/// An error that ends a command: [`Exit::Usage`] or [`Exit::Runtime`], and what to print.
///
/// Not a `std::error::Error` itself, so that any error converts into it with `?`.
#[derive(Debug)]
pub struct Failure {
    exit: Exit,
    error: BoxError,
}

impl Failure {
    /// The command line is wrong: nothing was trained (exit 2).
    pub fn usage(error: impl Into<BoxError>) -> Self {
        Self {
            exit: Exit::Usage,
            error: error.into(),
        }
    }

    /// The run started and failed (exit 1).
    pub fn runtime(error: impl Into<BoxError>) -> Self {
        Self {
            exit: Exit::Runtime,
            error: error.into(),
        }
    }

    /// An error of `Pipeline::builder().build()`: a refused configuration (bad settings, stage
    /// split, plan, tie or memory budget; found before any thread starts, or on the first step,
    /// which makes a measured split) is a usage error, anything else (an engine error while
    /// measuring the layers or training) a runtime one.
    pub fn of_build(error: pipetrain::Error) -> Self {
        use pipetrain::Error;
        match error {
            Error::Config(_)
            | Error::Partition(_)
            | Error::Schedule(_)
            | Error::Tie(_)
            | Error::Tune(_)
            | Error::MemoryBudget { .. } => Self::usage(error),
            other => Self::runtime(other),
        }
    }

    /// The same failure (same exit code) with `message` instead.
    pub fn with_message(self, message: String) -> Self {
        Self {
            exit: self.exit,
            error: message.into(),
        }
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
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}
