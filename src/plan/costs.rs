//! The costs a plan is dry-run under ([`PlanCosts`]): one micro-batch's forward, backward (and
//! the weight gradient's part of it) and transfer on one stage.

use pipetrain_schedules::Costs;

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
    /// [`Error::PlanCost`]: a cost that is negative or not finite, or a weight gradient above
    /// the backward.
    pub fn costs(&self, stages: usize, ranks: usize) -> Result<Costs> {
        let weight = self.weight();
        for (cost, value) in [
            ("forward", self.forward),
            ("backward", self.backward),
            ("weight", weight),
            ("transfer", self.transfer),
        ] {
            if let Some(reason) = cost_problem(value) {
                return Err(Error::PlanCost {
                    cost,
                    value,
                    reason,
                });
            }
        }
        if weight > self.backward {
            return Err(Error::PlanCost {
                cost: "weight",
                value: weight,
                reason: format!(
                    "the weight gradient is part of the backward: give at most the backward \
                     cost {}",
                    super::num(self.backward)
                ),
            });
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

/// Why `value` cannot be a duration, if it cannot.
pub fn cost_problem(value: f64) -> Option<String> {
    if !value.is_finite() {
        Some(format!(
            "{value} is not a finite number; give a duration >= 0 such as 1.0"
        ))
    } else if value < 0.0 {
        Some(format!(
            "{value} is negative; give a duration >= 0 (0 makes the action free)"
        ))
    } else {
        None
    }
}
