//! The rules a plan can break, as [`crate::validate`] reports them.

use std::fmt;

use crate::action::Action;
use crate::id::StageId;

/// A rule a plan breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The plan has no stages or no micro-batches.
    Empty,
    /// An action in the program of one stage names another stage.
    WrongStage {
        /// The stage the action names.
        named: StageId,
    },
    /// A micro-batch outside `0..m`.
    MicroBatchOutOfRange {
        /// The plan's number of micro-batches.
        micro_batches: usize,
    },
    /// The same action twice.
    Duplicate,
    /// An action that needs an earlier one on the same stage that has not happened.
    Before {
        /// What must come first.
        needs: Action,
    },
    /// A transfer across the pipeline's ends (receive on stage 0, send beyond the last stage).
    NoNeighbour,
    /// A skip transfer whose peer is not a stage of the plan on the side the skip flows from or
    /// to.
    SkipPeer,
    /// A receive after the action that consumes what it receives.
    TooLate {
        /// The consumer that ran first.
        consumer: Action,
    },
    /// Both a full backward and a split backward for one micro-batch.
    MixedBackward,
    /// A backward, all-reduce or optimizer step in an inference plan.
    TrainingOnly,
    /// A micro-batch that is never forwarded or never fully backwarded on a stage.
    Missing {
        /// The action that is missing.
        missing: Action,
    },
    /// A send whose receive, or a receive whose send, the neighbour never runs.
    Unmatched {
        /// The counterpart that does not exist.
        counterpart: Action,
    },
    /// A computation that reads a stage's parameters (any but `W`) after its ZeRO-3 reshard
    /// (`sRS`): they are no longer whole there.
    Resharded,
    /// Both an all-reduce (`sAR`) and a ZeRO-2/3 reduce (`sRG`) of the same stage's gradients.
    TwoReductions,
    /// The plan deadlocks when receives block.
    Deadlock {
        /// The action the blocked step waits for.
        waits_for: Action,
        /// Where the stage that should produce it is stuck.
        producer_step: Option<(usize, Action)>,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Empty => write!(f, "a plan needs at least one stage and one micro-batch"),
            Violation::WrongStage { named } => {
                write!(
                    f,
                    "the action names {named}, which this program's rank does not hold"
                )
            }
            Violation::MicroBatchOutOfRange { micro_batches } => write!(
                f,
                "micro-batch out of range: the plan has {micro_batches} (ids 0..{micro_batches})"
            ),
            Violation::Duplicate => write!(f, "the action appears twice"),
            Violation::Before { needs } => {
                write!(
                    f,
                    "runs before `{needs}` ({}), which must come first",
                    describe(needs)
                )
            }
            Violation::NoNeighbour => write!(f, "transfer past the end of the pipeline"),
            Violation::SkipPeer => write!(
                f,
                "a skip goes from a stage to a later one of the plan: `SK` and `RKB` name a \
                 later peer, `RK` and `SKB` an earlier one"
            ),
            Violation::TooLate { consumer } => write!(
                f,
                "runs after `{consumer}` ({}), which needs what it receives",
                describe(consumer)
            ),
            Violation::MixedBackward => write!(
                f,
                "both a full backward (B) and a split backward (I/W) for the same micro-batch"
            ),
            Violation::TrainingOnly => write!(f, "an inference plan only forwards"),
            Violation::Missing { missing } => {
                write!(f, "`{missing}` ({}) is missing", describe(missing))
            }
            Violation::Unmatched { counterpart } => write!(
                f,
                "no matching `{counterpart}` ({}) on {}",
                describe(counterpart),
                counterpart.stage
            ),
            Violation::Resharded => write!(
                f,
                "computes after the stage's reshard (RS), which dropped the parameters its \
                 replica does not own: move the reshard after the stage's last computation that reads them (a W may follow it)"
            ),
            Violation::TwoReductions => write!(
                f,
                "the stage's gradients are summed twice: an all-reduce (AR) and a ZeRO-2/3 reduce \
                 (RG); keep one"
            ),
            Violation::Deadlock {
                waits_for,
                producer_step,
            } => {
                write!(
                    f,
                    "deadlock: waits for `{waits_for}` ({}), ",
                    describe(waits_for)
                )?;
                match producer_step {
                    Some((step, a)) => write!(
                        f,
                        "but {} is itself blocked at step {step} (`{a}`)",
                        waits_for.stage
                    ),
                    None => write!(f, "which {} never runs", waits_for.stage),
                }
            }
        }
    }
}

fn describe(a: &Action) -> String {
    match a.micro_batch {
        Some(mb) => format!("{} of {mb} on {}", a.kind, a.stage),
        None => format!("{} on {}", a.kind, a.stage),
    }
}
