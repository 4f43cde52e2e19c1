//! The crate's error type.

use crate::validate::ValidationError;

/// Everything that can go wrong while building, parsing or checking a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// A plan was requested with zero stages.
    #[error("stages = 0: a pipeline needs at least one stage (use .stages(1) for no pipelining)")]
    ZeroStages,
    /// A plan was requested with zero micro-batches.
    #[error(
        "micro_batches = 0: each step needs at least one micro-batch (use .micro_batches(1) \
         to run the whole mini-batch at once)"
    )]
    ZeroMicroBatches,
    /// Text that is not an action.
    #[error("cannot parse action `{text}`: {reason}")]
    ParseAction {
        /// The text given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Text that is not a plan.
    #[error("cannot parse plan, line {line}: {reason}")]
    ParsePlan {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// An unknown schedule name.
    #[error("unknown schedule `{name}`: expected one of {expected}")]
    UnknownSchedule {
        /// The name given.
        name: String,
        /// The accepted names.
        expected: &'static str,
    },
    /// A plan that breaks a rule (see [`crate::validate`]).
    #[error(transparent)]
    Invalid(#[from] Box<ValidationError>),
}

/// The crate's result type.
pub type Result<T, E = ScheduleError> = std::result::Result<T, E>;
