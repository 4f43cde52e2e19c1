//! The costs a plan is dry-run under ([`PlanCosts`]): one micro-batch's forward, backward (and
//! the weight gradient's part of it) and transfer on one stage.

use crate::CommandError;
use pipetrain_schedules::Costs;

use super::format::short;
use crate::error::{Error, Result};

/// Costs per micro-batch and stage (a worker's share of the model), in any time unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanCosts {
    /// One micro-batch's forward on one stage.
    pub forward: f64,
    /// One micro-batch's full backward on one stage (input and weight gradients).
    pub backward: f64,
    /// The part of `backward` the weight gradient takes when the backward is split; `None`:
    /// half.
    pub weight: Option<f64>,
    /// Time for an activation or a gradient to reach the neighbouring stage.
    pub transfer: f64,
}

impl Default for PlanCosts {
    /// Forward 1, backward 2 (weight gradient 1), transfers free.
    fn default() -> Self {
        Self {
            forward: 1.0,
            backward: 2.0,
            weight: None,
            transfer: 0.0,
        }
    }
}

impl PlanCosts {
    /// The weight gradient's cost: `weight`, else half the backward.
    pub fn weight(&self) -> f64 {
        self.weight.unwrap_or(self.backward / 2.0)
    }

    /// The simulator's costs for a plan of `stages` model stages on `ranks` ranks (a rank's
    /// chunks share its costs).
    ///
    /// # Errors
    /// [`CommandError::PlanCost`](crate::CommandError::PlanCost): a cost that is negative, not finite or out of
    /// [`MIN_COST`]..=[`MAX_COST`], costs more than [`MAX_COST_RATIO`] apart, or a weight
    /// gradient above the backward.
    pub fn costs(&self, stages: usize, ranks: usize) -> Result<Costs> {
        let weight = self.weight();
        let given = [
            ("forward", self.forward),
            ("backward", self.backward),
            ("weight", weight),
            ("transfer", self.transfer),
        ];
        for (cost, value) in given {
            if let Some(reason) = cost_problem(value) {
                return Err(Error::Command(CommandError::PlanCost {
                    cost,
                    value,
                    reason,
                }));
            }
        }
        ratio_problem(&given)?;
        if weight > self.backward {
            return Err(Error::Command(CommandError::PlanCost {
                cost: "weight",
                value: weight,
                reason: format!(
                    "the weight gradient is part of the backward: give at most the backward \
                     cost {}",
                    super::num(self.backward)
                ),
            }));
        }
        let chunks = (stages / ranks.max(1)).max(1) as f64;
        let mut costs = Costs::uniform(stages, self.forward / chunks, self.backward / chunks);
        costs.transfer = self.transfer;
        if self.backward > 0.0 {
            costs.weight_fraction = weight / self.backward;
        }
        Ok(costs)
    }
}

/// The largest cost: a plan's times are sums of thousands of costs, which must stay far from
/// the largest float (`1e308` once overflowed them to infinity).
pub const MAX_COST: f64 = 1e12;
/// The smallest cost above 0: in any unit, a duration below it is better given in a smaller
/// unit.
pub const MIN_COST: f64 = 1e-12;
/// The most one cost may be times another (above 0): a plan is simulated in one unit and drawn
/// in columns of the shortest action, so costs a million times apart already make a grid of
/// millions of columns per action (`1e-300` against `2` once asked for 1e300 columns).
pub const MAX_COST_RATIO: f64 = 1e6;

/// Why `value` cannot be a duration, if it cannot: not a finite number, negative, or outside
/// [`MIN_COST`]..=[`MAX_COST`] (0 is allowed: a free action).
pub fn cost_problem(value: f64) -> Option<String> {
    let shown = short(value);
    if !value.is_finite() {
        Some(format!(
            "{shown} is not a finite number; give a duration >= 0 such as 1.0"
        ))
    } else if value < 0.0 {
        Some(format!(
            "{shown} is negative; give a duration >= 0 (0 makes the action free)"
        ))
    } else if value > MAX_COST {
        Some(format!(
            "{shown} is above {}; give the costs in a larger unit",
            short(MAX_COST)
        ))
    } else if value > 0.0 && value < MIN_COST {
        Some(format!(
            "{shown} is below {} (and above 0); give the costs in a smaller unit, or 0 for a \
             free action",
            short(MIN_COST)
        ))
    } else {
        None
    }
}

/// [`CommandError::PlanCost`](crate::CommandError::PlanCost) when the largest of the costs above 0 in `given` is more than
/// [`MAX_COST_RATIO`] times the smallest. It names the one farther from the others' median
/// (in orders of magnitude): the odd one out, whichever end it is at.
fn ratio_problem(given: &[(&'static str, f64)]) -> Result<()> {
    let mut paid: Vec<(&'static str, f64)> = given.iter().copied().filter(|c| c.1 > 0.0).collect();
    paid.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (Some(&smallest), Some(&largest)) = (paid.first(), paid.last()) else {
        return Ok(());
    };
    if largest.1 <= smallest.1 * MAX_COST_RATIO {
        return Ok(());
    }
    let median = paid[paid.len() / 2].1;
    let low = (median / smallest.1).log10() > (largest.1 / median).log10();
    let (cost, value) = match low {
        true => smallest,
        false => largest,
    };
    Err(Error::Command(CommandError::PlanCost {
        cost,
        value,
        reason: format!(
            "the {} cost {} is more than {} times the {} cost {}: the costs of one plan must lie \
             within that factor of each other; give costs closer together",
            largest.0,
            short(largest.1),
            short(MAX_COST_RATIO),
            smallest.0,
            short(smallest.1),
        ),
    }))
}
