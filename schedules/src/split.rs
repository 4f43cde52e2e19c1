//! Split backward: a plan's full backward `B` becomes an input-gradient pass `I` and a
//! weight-gradient pass `W`.
//!
//! `I` computes what the upstream stage waits for; `W` computes the parameter gradients, which
//! only the all-reduce and the optimizer step need. Splitting in place (`I(j)` then `W(j)` where
//! `B(j)` was) changes no data flow and no order: an engine may still defer or batch the `W`s
//! (pipetrain computes the weight gradients of a group of micro-batches in one pass), and
//! zero-bubble schedules move the `W`s into the bubbles.

use crate::action::{Action, ActionKind};
use crate::id::StageId;
use crate::plan::Plan;

impl Plan {
    /// This plan with each `B(j)` of the stages `split` selects replaced by `I(j)` followed by
    /// `W(j)`; other stages and actions are unchanged. Split before lowering: the lowering then
    /// sends each input gradient right after its `I`. An overlap whose backward is split runs
    /// in sequence: its forward, then the `I` and the `W` (an overlap pairs a forward with a
    /// full backward).
    ///
    /// ```
    /// use pipetrain_schedules::{ScheduleKind, StageId, validate, lower, Lowering};
    /// let plan = ScheduleKind::OneFOneB.plan(2, 2)?;
    /// let split = plan.split_backward(|_| true);
    /// assert_eq!(
    ///     split.program(StageId(1)).iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    ///     ["1F0", "1I0", "1W0", "1F1", "1I1", "1W1"],
    /// );
    /// validate(&lower(&split, Lowering::default()))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn split_backward(&self, split: impl Fn(StageId) -> bool) -> Plan {
        let programs = self
            .programs()
            .iter()
            .map(|program| {
                program
                    .iter()
                    .flat_map(|&a| match a.kind {
                        ActionKind::Backward if split(a.stage) => vec![
                            Action::new(a.stage, ActionKind::BackwardInput, a.mb()),
                            Action::new(a.stage, ActionKind::BackwardWeight, a.mb()),
                        ],
                        ActionKind::Overlap => match a.halves() {
                            Some((forward, backward)) if split(backward.stage) => vec![
                                forward,
                                Action::new(
                                    backward.stage,
                                    ActionKind::BackwardInput,
                                    backward.mb(),
                                ),
                                Action::new(
                                    backward.stage,
                                    ActionKind::BackwardWeight,
                                    backward.mb(),
                                ),
                            ],
                            _ => vec![a],
                        },
                        _ => vec![a],
                    })
                    .collect()
            })
            .collect();
        self.with_programs(programs)
    }
}

impl Plan {
    /// The inverse of [`split_backward`](Self::split_backward) on the stages `join` selects:
    /// each `I(j)` becomes a full `B(j)` and each `W(j)` is dropped, so the weight gradients are
    /// computed with the input gradient. For an engine that cannot split a stage's backward
    /// (pipetrain: a stage without dense layers) running a schedule that places `W`s.
    ///
    /// ```
    /// use pipetrain_schedules::{ScheduleKind, StageId};
    /// let zb = ScheduleKind::ZbH1.plan(2, 2)?;
    /// let joined = zb.join_backward(|s| s == StageId(1));
    /// assert_eq!(
    ///     joined.program(StageId(1)).iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    ///     ["1F0", "1B0", "1F1", "1B1"],
    /// );
    /// assert_eq!(joined.program(StageId(0)), zb.program(StageId(0)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn join_backward(&self, join: impl Fn(StageId) -> bool) -> Plan {
        let programs = self
            .programs()
            .iter()
            .map(|program| {
                program
                    .iter()
                    .filter(|a| !(a.kind == ActionKind::BackwardWeight && join(a.stage)))
                    .map(|&a| match a.kind {
                        ActionKind::BackwardInput if join(a.stage) => {
                            Action::backward(a.stage, a.mb())
                        }
                        _ => a,
                    })
                    .collect()
            })
            .collect();
        self.with_programs(programs)
    }

    /// One program per stage, identity placement: each stage's actions in the order its rank
    /// runs them. For an engine that runs each stage of a rank on its own worker and keeps the
    /// rank's order across them by other means; the same plan when every rank holds one stage
    /// and runs no overlap. An overlap's halves go to their stages' programs, forward first.
    ///
    /// ```
    /// use pipetrain_schedules::{ScheduleKind, StageId};
    /// let plan = ScheduleKind::Interleaved { virtual_stages: 2 }.plan(2, 2)?;
    /// let by_stage = plan.by_stage();
    /// assert_eq!((by_stage.ranks(), by_stage.stages()), (4, 4));
    /// assert_eq!(
    ///     by_stage.program(StageId(2)).iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    ///     ["2F0", "2F1", "2B0", "2B1"],
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn by_stage(&self) -> Plan {
        let programs = StageId::range(self.stages())
            .map(|stage| {
                let rank = self.rank_of(stage).expect("a stage of the plan");
                let program = &self.programs()[rank];
                program
                    .iter()
                    .flat_map(Action::in_sequence)
                    .filter(|a| a.stage == stage)
                    .collect()
            })
            .collect();
        Plan::new(self.stages(), self.micro_batches(), programs)
    }

    /// Whether any stage's program holds a weight-gradient pass (`W`): the plan places the
    /// split backward's second half itself.
    pub fn places_weights(&self) -> bool {
        self.actions().any(|a| a.kind == ActionKind::BackwardWeight)
    }
}
