//! The runtime: owns the workers, their persistent threads, the plans and the fabric, and runs
//! steps. What it runs comes resolved and validated in a [`Prepared`](crate::Prepared); starting it
//! only spawns the threads and connects them.
//!
//! A step as data: the batch is cut into replicas × micro-batches ([`Batch::shard`](crate::Batch::shard)), each
//! worker's thread is lent its state with its share (stage 0 the inputs, the last stage the
//! targets), walks its lowered program (receive → compute → send; all-reduce and optimizer step
//! at the end) and hands the state back with its report. The loss is scaled here, once:
//! every micro-batch loss by its rows / the batch's rows and by 1/k (micro-batches may differ
//! by a row), so that the summed gradients are the mean gradient of the k accumulated batches, and the reported loss is the batch's true mean.
//!
//! First error wins (see [`crate::comm::abort`]): the step returns the first failure once every
//! worker has handed its state back; the runtime then refuses to go on
//! ([`EngineError::Poisoned`](crate::EngineError::Poisoned)) until a checkpoint is loaded.

mod config;
mod drift;
#[cfg(test)]
mod handoff_tests;
mod lifecycle;
mod part;
pub(crate) mod prepared;
pub(crate) mod reference;
mod step;
pub(crate) mod thread;
pub(crate) mod workers;

pub use config::{Backward, DataParallel, RuntimeConfig, Timing};
pub use lifecycle::Runtime;
