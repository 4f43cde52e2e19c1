//! What a pipeline runs: a generated schedule or a plan given as data.

use std::fmt;
use std::sync::Arc;

use crate::error::{Result, ScheduleError};
use crate::kind::ScheduleKind;
use crate::plan::Plan;

/// A schedule to generate ([`ScheduleKind`]) or a compute plan given as data (for example read
/// with [`PlanFile`](crate::PlanFile)): what a pipeline runs each step.
///
/// ```
/// use pipetrain_schedules::remedy::{Plain, Remedied};
/// use pipetrain_schedules::{Plan, Schedule, ScheduleKind};
/// let generated: Schedule = ScheduleKind::GPipe.into();
/// assert_eq!(generated.plan(2, 2)?, ScheduleKind::GPipe.plan(2, 2)?);
///
/// let given = Schedule::from(ScheduleKind::OneFOneB.plan(2, 2)?);
/// assert_eq!(given.to_string(), "a given plan");
/// let wrong_shape = given.plan(2, 4).unwrap_err().explain(&Plain);
/// assert!(wrong_shape.contains("use stages = 2 and micro_batches = 2"), "{wrong_shape}");
/// # Ok::<(), pipetrain_schedules::ScheduleError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// A schedule generated for the pipeline's shape.
    Kind(ScheduleKind),
    /// A compute plan (forwards and backwards only) for one shape.
    Plan(Arc<Plan>),
}

impl Schedule {
    /// The compute plan for `stages` model stages and `micro_batches` micro-batches: for
    /// [`ScheduleKind::Interleaved`] with v chunks per rank, over `stages / v` ranks.
    ///
    /// # Errors
    /// What [`ScheduleKind::plan`] refuses; [`ScheduleError::UnevenChunks`] for model stages
    /// that do not split into whole ranks; for a given plan of another shape,
    /// [`ScheduleError::PlanShape`]; for a lowered one, [`ScheduleError::Lowered`].
    pub fn plan(&self, stages: usize, micro_batches: usize) -> Result<Plan> {
        if let Schedule::Plan(plan) = self {
            if let Some(a) = plan.actions().find(|a| !a.kind.is_compute()) {
                return Err(ScheduleError::Lowered {
                    action: a.to_string(),
                });
            }
        }
        match self {
            Schedule::Kind(kind) if stages % kind.virtual_stages() != 0 => {
                Err(ScheduleError::UnevenChunks {
                    stages,
                    virtual_stages: kind.virtual_stages(),
                })
            }
            Schedule::Kind(kind) => kind.plan(stages / kind.virtual_stages(), micro_batches),
            Schedule::Plan(plan)
                if (plan.stages(), plan.micro_batches()) == (stages, micro_batches) =>
            {
                Ok(Plan::clone(plan))
            }
            Schedule::Plan(plan) => Err(ScheduleError::PlanShape {
                plan_stages: plan.stages(),
                plan_micro_batches: plan.micro_batches(),
                stages,
                micro_batches,
            }),
        }
    }

    /// Model stages per rank: the interleaved schedule's v, a given plan's stages over its
    /// ranks, else 1.
    pub fn virtual_stages(&self) -> usize {
        match self {
            Schedule::Kind(kind) => kind.virtual_stages(),
            Schedule::Plan(plan) => (plan.stages() / plan.ranks().max(1)).max(1),
        }
    }

    /// Whether the plan places split backwards (`I` and `W`) itself (see
    /// [`ScheduleKind::splits_backward`], [`Plan::places_weights`]).
    pub fn splits_backward(&self) -> bool {
        match self {
            Schedule::Kind(kind) => kind.splits_backward(),
            Schedule::Plan(plan) => plan.places_weights(),
        }
    }
}

impl From<ScheduleKind> for Schedule {
    fn from(kind: ScheduleKind) -> Self {
        Schedule::Kind(kind)
    }
}

impl From<Plan> for Schedule {
    fn from(plan: Plan) -> Self {
        Schedule::Plan(Arc::new(plan))
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Kind(kind) => kind.fmt(f),
            Schedule::Plan(_) => f.write_str("a given plan"),
        }
    }
}
