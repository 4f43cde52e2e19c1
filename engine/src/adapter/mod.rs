//! The one place that touches burn's autodiff and module internals. burn's API churns between
//! minors; when it does, these files are what change.
//!
//! - [`autodiff`]: leaves, seeded backward, input gradients, accumulation, the optimizer step;
//! - [`grads`]: a stage's gradients, parameters and buffers as rank-1 tensors for collectives.

mod autodiff;
mod grads;

pub(crate) use autodiff::{
    Accumulator, backward_loss, backward_seeded, input_grad, leaf, optimizer_state_bytes, scalar,
    step,
};
/// A stage's parameter gradients, by parameter (burn's container).
pub(crate) type Grads = burn::optim::GradientsParams;

pub(crate) use grads::{Buffers, Slots, assign_owners, owners_of, set_values, value_of};
