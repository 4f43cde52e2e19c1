//! A model in and out of training, for code outside the engine: the facade's evaluation, memory
//! probe, verification and burn-train `Learner` strategy reach burn's autodiff through these
//! functions only (`.ci/check-adapter` scans `src/` and `models/src` too).

use burn::module::Module;
use burn::prelude::*;

use crate::adapter;

/// A copy of `module` without autodiff and in inference mode (dropout off, batch norm on its
/// running statistics): for a forward that needs no backward.
///
/// ```
/// use burn::nn::{Dropout, DropoutConfig};
/// let dropout: Dropout = DropoutConfig::new(0.5).init();
/// let copy = pipetrain_engine::inference_copy(&dropout);
/// assert_eq!(copy.prob, 0.5);
/// ```
pub fn inference_copy<M: Module>(module: &M) -> M {
    adapter::inference_copy(module)
}

/// `device` without autodiff: where plain tensors live (a worker's device as a setup reports it).
pub fn plain_device(device: &Device) -> Device {
    adapter::plain_device(device)
}

/// `module` on `device`'s autodiff twin, in training mode: as a stage's layers train, which is
/// what tells trained parameters from buffers.
pub fn trainable<M: Module>(module: M, device: &Device) -> M {
    adapter::trainable(module, &adapter::autodiff_device(device))
}

/// Reads every parameter of `module`, which draws its lazily initialised values now, in the
/// module's order: what a seeded initialisation needs before anything else draws from the
/// generator.
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::prelude::*;
/// let device = Device::flex();
/// device.seed(7);
/// let layer = LinearConfig::new(3, 2).init(&device);
/// pipetrain_engine::materialize(&layer);
/// ```
pub fn materialize<M: Module>(module: &M) {
    adapter::materialize(module)
}
