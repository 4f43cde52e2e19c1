//! Why a collective failed.

use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

use std::ops::Range;

/// Why a collective failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CollectiveError {
    /// Another worker failed and the step is ending.
    #[error("aborted: another worker failed")]
    Aborted,
    /// A member went away without an error of its own.
    #[error("member {peer} of the {size}-member group hung up")]
    Disconnected {
        /// The peer's rank in the group.
        peer: usize,
        /// Group size.
        size: usize,
    },
    /// Nothing came from a member within the communication timeout (multi-process runs).
    #[error(
        "member {peer} (MPI rank {rank}) of the {size}-member group sent nothing for {timeout:?} \
         (the communication timeout); it may be dead or stuck, or its steps that slow"
    )]
    Timeout {
        /// The peer's rank in the group.
        peer: usize,
        /// The peer's process.
        rank: usize,
        /// Group size.
        size: usize,
        /// The communication timeout.
        timeout: std::time::Duration,
    },
    /// Members disagree on the buffer: they hold different models or different gradients.
    #[error(
        "member {peer} sent {got} values for rank {rank}'s range, which holds {expected}; the \
         replicas of a stage must hold the same parameters"
    )]
    Mismatch {
        /// The sender's rank.
        peer: usize,
        /// This member's rank.
        rank: usize,
        /// Values expected.
        expected: usize,
        /// Values received.
        got: usize,
    },
    /// `bounds` does not split the buffer into one range per member.
    #[error("bounds {bounds:?} do not split {len} values into {size} consecutive ranges")]
    Bounds {
        /// The ranges given.
        bounds: Vec<Range<usize>>,
        /// Buffer length.
        len: usize,
        /// Group size.
        size: usize,
    },
}

impl Remedied for CollectiveError {
    /// A timeout: a larger communication timeout, if the peer is only slow.
    fn remedy(&self) -> Option<Remedy> {
        let slow = matches!(self, CollectiveError::Timeout { .. });
        slow.then(|| Remedy::set(Setting::CommTimeout, Value::Larger))
    }
}
