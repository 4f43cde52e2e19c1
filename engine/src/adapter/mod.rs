//! The one place that touches burn's internals: autodiff, gradients, the module visitor and
//! mapper, optimizers and their state, the store. burn's API churns between minors; when it
//! does, these files are what change (`.ci/check-adapter` keeps those imports, and the calls of
//! burn's autodiff methods, here).
//!
//! - [`autodiff`]: a tensor as a leaf, detached, its gradient; backward; accumulation; the
//!   optimizer step (what those do to each kind of activation: `model/tracking.rs`);
//! - [`graph`]: devices, tensors and modules in and out of autodiff; the split `Linear` product;
//! - [`grads`]: a stage's gradients, parameters and buffers as rank-1 tensors for collectives,
//!   and a tied parameter's gradient read and replaced by id;
//! - `buffers` (tests): whether a tensor is the only handle of its buffer (CPU backend);
//! - [`gemm`]: the GEMM seam, every dense product through one burn backend extension (cuBLAS
//!   on CUDA; autocast's one rounding in bf16, with a custom backward);
//! - [`names`]: parameter ids and full-model names;
//! - [`values`]: parameter values, read and set by id;
//! - [`optimizer`]: burn's optimizers behind [`OptimizerConfig`](crate::OptimizerConfig)
//!   (its `init` and `From` impls live there);
//! - [`optim_state`]: optimizer state out of and into burn's optimizer, entry by entry;
//! - [`store`]: model weights to and from safetensors bytes;
//! - [`saved`]: what burn's autodiff keeps of a training forward, op by op, in bytes;
//! - `cuda` (feature `cuda`): the CUDA probe, cudarc's driver and NVRTC under `catch_unwind`.

mod autodiff;
#[cfg(test)]
mod buffers;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
mod gemm;
mod grads;
mod graph;
mod names;
mod optim_state;
mod optimizer;
pub mod saved;
mod store;
mod values;

pub(crate) use autodiff::{
    Accumulator, Gradients, Grads, LinearParams, backward_loss, detach, detached, float_leaf,
    grad_of, is_tracked, no_gradients, optimizer_state_bytes, scalar, step, sum_scalars,
};
#[cfg(test)]
pub(crate) use buffers::sole_holder;
pub(crate) use gemm::{batched_product, linear_rows, product_rows};
pub(crate) use grads::{Buffers, Slots, assign_owners, matrix_grad, owners_of, set_matrix_grad};
pub(crate) use graph::{
    autodiff_device, cast_copy_bytes, cast_parameters, grad_or_zeros, inference_copy, materialize,
    module_types, plain, plain_device, split_product, trainable, untracked_copy,
};
pub(crate) use names::{Named, ParamId, named_parameters};
pub(crate) use optim_state::{StateScalar, StateTensor, export_state, import_state};
pub(crate) use optimizer::{
    AdamConfig, AdamWConfig, ModuleOptimizer, SgdConfig, adam, adamw, init_adam, init_adamw,
    init_sgd, sgd, sgd_has_momentum,
};
pub(crate) use store::{apply_safetensors, rename_rules, save_safetensors};
pub use values::{Parameter, parameter};
pub(crate) use values::{float_values, own_buffers, set_values, shifted, value_of};
