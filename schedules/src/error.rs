//! The crate's error type.

use crate::remedy::{Remedied, Remedy, Setting, Value};
use crate::text_file::FileProblem;
use crate::validate::InvalidPlan;

/// Everything that can go wrong while building, parsing or checking a plan. `Display` states
/// the facts; [`Remedied::remedy`] says what would fix them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// A plan was requested with zero stages.
    #[error("stages = 0: a pipeline needs at least one stage (1 runs without pipelining)")]
    ZeroStages,
    /// A plan was requested with zero micro-batches.
    #[error(
        "micro_batches = 0: each step needs at least one micro-batch (1 runs the whole \
         mini-batch at once)"
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
    /// A plan file that could not be read ([`PlanFile::read`](crate::PlanFile::read)).
    #[error("{problem}")]
    ReadPlan {
        /// Why.
        problem: FileProblem,
    },
    /// Text that is not a plan.
    #[error("cannot parse plan, line {line}: {reason}")]
    ParsePlan {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Interleaved 1F1B, interleaved zero bubble or looped BFS with fewer than two chunks per
    /// rank.
    #[error(
        "{schedule} with {virtual_stages} virtual stage(s) per rank: it needs at least 2 (with \
         1, it is {})",
        one_chunk(schedule)
    )]
    VirtualStages {
        /// The schedule (`interleaved`, `interleaved-zb`, `looped-bfs`).
        schedule: &'static str,
        /// The chunks per rank given.
        virtual_stages: usize,
    },
    /// Model stages that do not split into ranks of `virtual_stages` chunks.
    #[error(
        "{stages} model stages do not split into ranks of {virtual_stages} chunks each: the \
         stages must be a multiple of {virtual_stages}"
    )]
    UnevenChunks {
        /// The model stages.
        stages: usize,
        /// Chunks per rank.
        virtual_stages: usize,
    },
    /// Interleaved 1F1B or interleaved zero bubble with a number of micro-batches that is not a
    /// multiple of the ranks.
    #[error(
        "interleaved needs the micro-batches in whole rounds of one per rank: {micro_batches} \
         micro-batches is not a multiple of {stages}"
    )]
    InterleavedMicroBatches {
        /// The micro-batches given.
        micro_batches: usize,
        /// The ranks.
        stages: usize,
    },
    /// DualPipeV with fewer micro-batches than its 2p stages.
    #[error(
        "dualpipev needs at least as many micro-batches as its {} stages (two per rank): \
         {micro_batches} micro-batches over {stages} ranks",
        2 * stages
    )]
    DualPipeVMicroBatches {
        /// The micro-batches given.
        micro_batches: usize,
        /// The ranks.
        stages: usize,
    },
    /// An unknown schedule name.
    #[error("unknown schedule `{name}`: expected one of {expected}")]
    UnknownSchedule {
        /// The name given.
        name: String,
        /// The accepted names.
        expected: &'static str,
    },
    /// A plan read from a file that breaks a rule, with where in the file.
    #[error(
        "plan file line {line}, column {column} (`{}`): {}\n{}",
        finding.action,
        finding.violation,
        finding.grid
    )]
    PlanFile {
        /// 1-based line of the failing action's stage.
        line: usize,
        /// 1-based column (CSV cell or word) of the failing action.
        column: usize,
        /// The validator's finding.
        finding: Box<InvalidPlan>,
    },
    /// A given plan whose shape differs from the pipeline's.
    #[error(
        "the plan has {plan_stages} stage(s) and {plan_micro_batches} micro-batch(es), the \
         pipeline {stages} and {micro_batches}: the pipeline needs the plan's shape"
    )]
    PlanShape {
        /// The plan's stages (rows).
        plan_stages: usize,
        /// The plan's micro-batches (one more than the largest named).
        plan_micro_batches: usize,
        /// The pipeline's stages.
        stages: usize,
        /// The pipeline's micro-batches.
        micro_batches: usize,
    },
    /// A plan given to run that already holds communication, which the pipeline adds itself.
    #[error(
        "the given plan is lowered (it holds `{action}`): give its compute actions only (F, B, \
         I, W, F+B); the pipeline adds the sends, receives, all-reduce and optimizer step"
    )]
    Lowered {
        /// The first action that is not compute.
        action: String,
    },
    /// A skip route that does not go from a stage to a later one of the plan.
    #[error(
        "skip route {route} does not fit a plan of {stages} stages: a skip goes from the \
         stashing stage to a later popping stage, both below {stages} (e.g. `0:{last}`)",
        last = stages.saturating_sub(1)
    )]
    SkipRoute {
        /// The route, `stash:pop`.
        route: String,
        /// The plan's stages.
        stages: usize,
    },
    /// A plan that breaks a rule (see [`crate::validate`]).
    #[error("{0}")]
    Invalid(Box<InvalidPlan>),
}

/// The crate's result type.
pub type Result<T, E = ScheduleError> = std::result::Result<T, E>;

impl Remedied for ScheduleError {
    fn remedy(&self) -> Option<Remedy> {
        let count = |setting, n| Remedy::set(setting, Value::Count(n));
        match self {
            ScheduleError::ZeroStages => Some(count(Setting::Stages, 1)),
            ScheduleError::ReadPlan {
                problem: FileProblem::TooLarge { .. },
            } => Some(Remedy::sentence("use a smaller plan")),
            ScheduleError::ZeroMicroBatches => Some(count(Setting::MicroBatches, 1)),
            // Not also `1f1b`: the facts say that 1 chunk is 1f1b, and on the command line
            // `--schedule 1f1b` beside the `--virtual-stages` given is refused, with the remedy
            // `--schedule interleaved`, which led back here.
            ScheduleError::VirtualStages { .. } => Some(count(Setting::VirtualStages, 2)),
            ScheduleError::UnevenChunks {
                stages,
                virtual_stages,
            } => Some(count(
                Setting::Stages,
                stages.div_ceil(*virtual_stages) * virtual_stages,
            )),
            ScheduleError::InterleavedMicroBatches {
                micro_batches,
                stages,
            } => Some(whole_rounds(*micro_batches, *stages)),
            ScheduleError::DualPipeVMicroBatches { stages, .. } => {
                Some(count(Setting::MicroBatches, 2 * stages))
            }
            ScheduleError::PlanShape {
                plan_stages,
                plan_micro_batches,
                stages,
                micro_batches,
            } => Some(Remedy::one_of([
                Remedy::all_of([
                    count(Setting::Stages, *plan_stages),
                    count(Setting::MicroBatches, *plan_micro_batches),
                ]),
                Remedy::sentence(format!(
                    "write a plan for {stages} stage(s) and {micro_batches} micro-batch(es)"
                )),
            ])),
            _ => None,
        }
    }
}

/// What a schedule of several chunks per rank is with one.
fn one_chunk(schedule: &str) -> &'static str {
    match schedule {
        "looped-bfs" => "gpipe",
        "interleaved-zb" => "zb-h1",
        _ => "1f1b",
    }
}

/// The micro-batch counts next to `micro_batches` that are whole rounds of `stages`: the one
/// below (when it is not 0) and the one above.
fn whole_rounds(micro_batches: usize, stages: usize) -> Remedy {
    let below = micro_batches / stages.max(1) * stages;
    let above = below + stages;
    let count = |n| Remedy::set(Setting::MicroBatches, Value::Count(n));
    match below {
        0 => count(above),
        _ => Remedy::one_of([count(below), count(above)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remedy::Plain;

    #[test]
    fn interleaved_remedies_are_whole_rounds_and_never_zero() {
        let e = |micro_batches| {
            ScheduleError::InterleavedMicroBatches {
                micro_batches,
                stages: 4,
            }
            .explain(&Plain)
        };
        assert!(e(1).ends_with("; use micro_batches = 4"), "{}", e(1));
        assert!(
            e(6).ends_with("; use micro_batches = 4 or micro_batches = 8"),
            "{}",
            e(6)
        );
    }
}
