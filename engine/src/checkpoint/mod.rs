//! Layout-independent checkpoints: one safetensors file with the full model's weights under
//! their full-model names, the optimizer state keyed by the same names, and the run's progress.
//!
//! - **Names.** Weights are named as burn's store names the whole layer sequence, enum variants
//!   skipped: `"{layer}.{field}…"`, e.g. `3.linear.weight` — the names of a PyTorch
//!   `nn.Sequential` state dict. Stage and replica boundaries appear nowhere, so a run saved at
//!   2 replicas × 2 stages resumes at 4 × 1 or 1 × 1.
//! - **Optimizer state** is stored as `__optimizer__/{name}/{key}` tensors, plus the per-parameter
//!   scalars (for example Adam's step count) in the metadata, all keyed by parameter name; on
//!   load each worker takes the entries of the parameters it holds. Replicas are merged (with
//!   ZeRO-1 each holds a disjoint share).
//! - **Atomic writes.** Through [`crate::output`], as every file pipetrain writes: a temp file
//!   of a unique name beside `path`, flushed and fsynced, then renamed over `path` (and the
//!   directory fsynced, errors reported): a kill during a write leaves the previous checkpoint
//!   intact. Only a regular file is ever replaced, a failed write removes its temp file, and
//!   [`probe`] checks a destination before a run.
//! - **Any float type in, F32 out.** F64, F16 and BF16 weights are converted to F32 on load;
//!   a NaN or infinite weight is refused, naming the tensor and element.
//! - **Errors name the tensor.** A missing tensor, a shape mismatch, an unexpected tensor or a
//!   corrupt file is an error that names the file and the tensor; nothing is loaded partly.

mod convert;
mod error;
mod format;
mod load;
mod part;
mod sane;
mod save;
mod state;

pub use crate::output::probe;
pub use format::{OPTIMIZER_PREFIX, Progress};
pub use load::{Checkpoint, check_renames, init_from, init_renamed, rename_all};
pub use part::{Copies, merge_parts, save_part, write_parts};
pub use save::{model_bytes, save, save_model};
pub use state::OptimizerState;
