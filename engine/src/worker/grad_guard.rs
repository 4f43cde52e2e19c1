//! The gradient guard: what happens to a step's summed gradients between the all-reduce and the
//! optimizer step. Every stage computes the squared norm of each of its gradients; a non-finite
//! one stops the step (or skips it), and with a clip norm the gradients are scaled as
//! `torch.nn.utils.clip_grad_norm_` scales them on one device.
//!
//! The norm is global: each worker adds its gradients' squared norms, the replicas of a stage
//! add theirs where ZeRO-1 left each replica a share, and the stages of a replica add theirs
//! ([`Links::stages`](crate::Links::stages)), before any optimizer step runs. Replicas hold
//! all-reduced gradients, so every worker of the world reaches the same verdict.
//!
//! On a worker this runs inside the optimizer step ([`Worker::guard`]); the single-device
//! reference checks and clips the same way ([`clip_single`]).
//!
//! ## One read-back per step
//! A worker sums its gradients' squares on the device (one scalar: non-finite exactly when a
//! gradient is, or when the sum overflows) and reads it back in one transfer together with its
//! micro-batch losses (the last stage's), which the step's loss then uses: a steady-state step
//! waits for its device once here, at its end, and nowhere else for the guard or the loss. Only
//! a step found non-finite reads each gradient's norm (the slow path), to name the parameter.
//! Clipping multiplies each gradient on the device by the coefficient, as
//! `torch.nn.utils.clip_grad_norm_` does.
//!
//! ```text
//!   exchanged per replica:  [ Σ‖g‖² | bad(stage 0) | bad(stage 1) | … | bad(stage p−1) ]
//!   norm = √(Σ‖g‖²)   first bad stage = lowest s with bad(s) > 0
//! ```

use burn::prelude::*;

use crate::adapter::{self, Grads, Slots};
use crate::error::EngineError;
use crate::model::layer::Layer;
use crate::worker::{Failure, Worker};

/// What the optimizer step does with the step's gradients first.
///
/// ```
/// use pipetrain_engine::GradGuard;
/// let guard = GradGuard { clip_norm: Some(1.0), skip_nonfinite: false };
/// // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1
/// assert_eq!(guard.clip_coefficient(4.0), Some((1.0 / (4.0 + 1e-6)) as f32));
/// assert_eq!(guard.clip_coefficient(0.5), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GradGuard {
    /// Scale the gradients so that their global L2 norm is at most this, as
    /// `torch.nn.utils.clip_grad_norm_(params, clip_norm)` does; `None`: no clipping.
    pub clip_norm: Option<f64>,
    /// A step with a non-finite gradient is skipped (no parameter or optimizer state changes,
    /// as PyTorch's `GradScaler` skips) instead of failing with
    /// [`EngineError::NonFinite`](crate::EngineError::NonFinite).
    pub skip_nonfinite: bool,
}

impl GradGuard {
    /// The factor the gradients are multiplied by for a global norm `total_norm`: torch's
    /// `max_norm / (total_norm + 1e-6)` when that is below 1, else `None` (they stay as they
    /// are; torch multiplies by exactly 1).
    pub fn clip_coefficient(&self, total_norm: f32) -> Option<f32> {
        let max = self.clip_norm? as f32;
        let coefficient = max / (total_norm + 1e-6);
        (coefficient < 1.0).then_some(coefficient)
    }
}

/// The squared L2 norm of each tensor, read back in one transfer.
fn squared_norms(tensors: &[Tensor<1>]) -> Vec<f32> {
    if tensors.is_empty() {
        return Vec::new();
    }
    let sums: Vec<Tensor<1>> = tensors.iter().map(|t| t.clone().square().sum()).collect();
    Tensor::cat(sums, 0)
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32 gradients")
}

/// The sum of the squares of every element of `tensors`, as a one-element tensor on their
/// device (nothing is read back), or `None` without tensors.
fn squared_total(tensors: &[Tensor<1>]) -> Option<Tensor<1>> {
    if tensors.is_empty() {
        return None;
    }
    let sums: Vec<Tensor<1>> = tensors.iter().map(|t| t.clone().square().sum()).collect();
    Some(Tensor::cat(sums, 0).sum())
}

/// The one read-back of a step: the squared total (0 without gradients) and the losses, in
/// one transfer; the losses as f64 in their order.
fn read_back(total: Option<Tensor<1>>, losses: &[Tensor<1>]) -> (f32, Vec<f64>) {
    let mut parts: Vec<Tensor<1>> = losses
        .iter()
        .map(|l| l.clone().cast(burn::tensor::DType::F32))
        .collect();
    let has_total = total.is_some();
    parts.extend(total);
    if parts.is_empty() {
        return (0.0, Vec::new());
    }
    let values = Tensor::cat(parts, 0)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 values");
    let (losses, total) = values.split_at(losses.len());
    let total = match has_total {
        true => total[0],
        false => 0.0,
    };
    (total, losses.iter().map(|&l| f64::from(l)).collect())
}

/// The index of the gradient to blame for a non-finite total: the first non-finite one, else
/// (the squares overflowed only in their sum) the largest.
fn offending(squared: &[f32]) -> usize {
    squared
        .iter()
        .position(|x| !x.is_finite())
        .or_else(|| (0..squared.len()).max_by(|&a, &b| squared[a].total_cmp(&squared[b])))
        .unwrap_or(0)
}

/// `grads` of `module` checked and clipped as one device would: `None` when one is not finite
/// (the single-device reference skips that step; the pipeline reports or skips it).
pub(crate) fn clip_single<M: burn::module::Module>(
    guard: &GradGuard,
    module: &M,
    grads: Grads,
) -> Option<Grads> {
    let (slots, tensors) = Slots::of_grads(module, &grads);
    let squared = squared_norms(&tensors);
    if squared.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let Some(coefficient) = guard.clip_coefficient(squared.iter().sum::<f32>().sqrt()) else {
        return Some(grads);
    };
    let scaled = tensors.into_iter().map(|t| Some(t.mul_scalar(coefficient)));
    Some(slots.grads(module, scaled.collect()))
}

/// The buffer a worker contributes to the exchange: its squared norm, and a flag at its stage
/// when one of its gradients is not finite.
fn contribution(stages: usize, stage: usize, squared: f32, bad: bool) -> Vec<f32> {
    let mut buffer = vec![0.0; 1 + stages];
    buffer[0] = if bad { 0.0 } else { squared };
    buffer[1 + stage] = f32::from(u8::from(bad));
    buffer
}

/// The global norm and the first stage with a non-finite gradient, from the summed buffer.
fn verdict(summed: &[f32]) -> (f32, Option<usize>) {
    let first_bad = summed[1..].iter().position(|&flag| flag > 0.0);
    (summed[0].sqrt(), first_bad)
}

impl<L: Layer> Worker<'_, L> {
    /// The gradients to apply, or `None` when this step applies nothing (skipped, or failed on
    /// another stage). Fails with [`EngineError::NonFinite`] on the lowest stage holding a non-finite
    /// gradient (unless the guard skips such steps). Records the global norm for the report.
    pub(crate) fn guard(&mut self, grads: Grads) -> Result<Option<Grads>, Failure> {
        let training = self.training();
        let layers = &self.state.layers;
        let (slots, tensors) = Slots::of_grads(layers, &grads);
        // The step's one read-back: the squared total and the losses, together.
        let (squared, losses) = read_back(squared_total(&tensors), &self.scratch.losses);
        self.scratch.read_backs += 1;
        if !self.scratch.losses.is_empty() {
            self.scratch.loss = Some(losses.iter().fold(0.0, |sum, loss| sum + loss));
        }
        let bad = !squared.is_finite();
        let stage = self.id().stage.index();
        let mut buffer = contribution(self.ctx.stages, stage, squared, bad);
        // ZeRO-1 left each replica the summed gradients of its own share only.
        if training.zero.shards_optimizer_state() && self.links.collective.size() > 1 {
            self.links.collective.all_reduce(&mut buffer)?;
        }
        self.links.stages.all_reduce(&mut buffer)?;
        let (norm, first_bad) = verdict(&buffer);
        self.scratch.grad_norm = Some(f64::from(norm));
        match first_bad {
            Some(_) if training.guard.skip_nonfinite => {
                self.scratch.skipped = true;
                return Ok(None);
            }
            Some(s) if s == stage && bad => {
                // The slow path, on a failing step only: each gradient's norm, to name one.
                let i = offending(&squared_norms(&tensors));
                let offset = training.layer_offsets.get(stage).copied().unwrap_or(0);
                let id = slots.id(i);
                let parameter = adapter::named_parameters(layers, offset)
                    .into_iter()
                    .find(|n| n.id == id)
                    .map_or_else(|| format!("{id}"), |n| n.name);
                return Err(Failure::Cause(EngineError::NonFinite { parameter }));
            }
            // The stage that reports it fails the step; nothing is applied here either.
            Some(_) => return Ok(None),
            None => {}
        }
        let Some(coefficient) = training.guard.clip_coefficient(norm) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_flagged_stage_is_first_and_the_norm_sums_the_stages() {
        let mut summed = contribution(3, 0, 9.0, false);
        for other in [
            contribution(3, 1, 16.0, false),
            contribution(3, 2, 1.0, true),
        ] {
            for (x, y) in summed.iter_mut().zip(other) {
                *x += y;
            }
        }
        assert_eq!(verdict(&summed), (5.0, Some(2)));
        assert_eq!(verdict(&contribution(2, 1, 4.0, false)), (2.0, None));
    }

    #[test]
    fn one_read_back_gives_the_squared_total_and_the_losses_in_order() {
        let device = Device::flex();
        let t = |v: &[f32]| Tensor::<1>::from_floats(v, &device);
        let grads = [t(&[3.0, 4.0]), t(&[1.0])];
        let (total, losses) = read_back(squared_total(&grads), &[t(&[0.5]), t(&[0.25])]);
        assert_eq!((total, losses), (26.0, vec![0.5, 0.25]));
        assert_eq!(read_back(None, &[]), (0.0, vec![]));
        let bad = [t(&[1.0]), t(&[f32::NAN])];
        assert!(read_back(squared_total(&bad), &[]).0.is_nan());
        // The parameter to blame: the first non-finite one, else the largest.
        assert_eq!(offending(&[1.0, f32::INFINITY, f32::NAN]), 1);
        assert_eq!(offending(&[1.0, 3.0e38, 2.0]), 1);
    }
}
