//! The inference plan: forwards only, micro-batches streamed through the stages in order.

use crate::action::Action;
use crate::error::{Result, ScheduleError};
use crate::id::{MicroBatchId, StageId};
use crate::lower::{Lowering, lower};
use crate::plan::Plan;
use crate::zero::Zero;

/// A lowered plan that forwards `micro_batches` micro-batches through `stages` stages: stage s
/// runs `F0 F1 …` with a receive before and a send after each where it has neighbours, so stage
/// s forwards micro-batch i while stage s+1 forwards i−1. No backward, all-reduce or optimizer
/// step: check it with [`validate_inference`](crate::validate_inference).
///
/// ```
/// let plan = pipetrain_schedules::inference(2, 3).unwrap();
/// assert_eq!(plan.to_string(), "0: 0F0 0SF0 0F1 0SF1 0F2 0SF2\n1: 1RF0 1F0 1RF1 1F1 1RF2 1F2\n");
/// ```
///
/// # Errors
/// [`ScheduleError::ZeroStages`] or [`ScheduleError::ZeroMicroBatches`].
pub fn inference(stages: usize, micro_batches: usize) -> Result<Plan> {
    inference_at(stages, micro_batches, Zero::Off)
}

/// [`inference`] under ZeRO level `zero`: at level 3 each stage's forwards are bracketed by its
/// unshard and reshard (`sUS … sRS`); lower levels change nothing.
///
/// ```
/// use pipetrain_schedules::{inference_at, Zero};
/// let plan = inference_at(2, 1, Zero::Parameters).unwrap();
/// assert_eq!(plan.to_string(), "0: 0US 0F0 0SF0 0RS\n1: 1US 1RF0 1F0 1RS\n");
/// ```
///
/// # Errors
/// As [`inference`].
pub fn inference_at(stages: usize, micro_batches: usize, zero: Zero) -> Result<Plan> {
    if stages == 0 {
        return Err(ScheduleError::ZeroStages);
    }
    if micro_batches == 0 {
        return Err(ScheduleError::ZeroMicroBatches);
    }
    let programs = StageId::range(stages)
        .map(|stage| {
            MicroBatchId::range(micro_batches)
                .map(|mb| Action::forward(stage, mb))
                .collect()
        })
        .collect();
    let plan = Plan::new(stages, micro_batches, programs);
    Ok(lower(&plan, Lowering::inference(zero)))
}
