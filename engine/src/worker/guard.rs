//! The gradient guard at the optimizer step (see [`crate::grad_guard`]): this stage's squared norms,
//! the exchange that makes them global, then fail, skip or clip.

use super::interpreter::{Failure, Worker};
use crate::adapter::{self, Grads, Slots};
use crate::error::Cause;
use crate::grad_guard::{contribution, squared_norms, verdict};
use crate::layer::Layer;

impl<L: Layer> Worker<'_, L> {
    /// The gradients to apply, or `None` when this step applies nothing (skipped, or failed on
    /// another stage). Fails with [`Cause::NonFinite`] on the lowest stage holding a non-finite
    /// gradient (unless the guard skips such steps). Records the global norm for the report.
    pub(super) fn guard(&mut self, grads: Grads) -> Result<Option<Grads>, Failure> {
        let layers = &self.state.layers;
        let (slots, tensors) = Slots::of_grads(layers, &grads);
        let squared = squared_norms(&tensors);
        let bad = squared.iter().position(|x| !x.is_finite());
        let stage = self.id().stage.index();
        let mut buffer = contribution(self.ctx.stages, stage, squared.iter().sum(), bad.is_some());
        // ZeRO-1 left each replica the summed gradients of its own share only.
        if self.ctx.zero && self.links.collective.size() > 1 {
            self.links.collective.all_reduce(&mut buffer)?;
        }
        self.links.stages.all_reduce(&mut buffer)?;
        let (norm, first_bad) = verdict(&buffer);
        self.grad_norm = Some(f64::from(norm));
        match (first_bad, bad) {
            (Some(_), _) if self.ctx.guard.skip_nonfinite => {
                self.skipped = true;
                return Ok(None);
            }
            (Some(s), Some(i)) if s == stage => {
                let offset = self.ctx.layer_offsets.get(stage).copied().unwrap_or(0);
                let id = slots.id(i);
                let parameter = adapter::named_parameters(layers, offset)
                    .into_iter()
                    .find(|n| n.id == id)
                    .map_or_else(|| format!("{id}"), |n| n.name);
                return Err(Failure::Cause(Cause::NonFinite { parameter }));
            }
            // The stage that reports it fails the step; nothing is applied here either.
            (Some(_), _) => return Ok(None),
            (None, _) => {}
        }
        let Some(coefficient) = self.ctx.guard.clip_coefficient(norm) else {
            return Ok(Some(grads));
        };
        drop(grads);
        let scaled = tensors
            .into_iter()
            .map(|t| Some(t.mul_scalar(coefficient)))
            .collect();
        Ok(Some(slots.grads(layers, scaled)))
    }
}
