//! A worker: one (replica, stage) of the world. Its persistent state; the step's job and
//! shared context; the scratch one program builds up; the interpreter that walks the stage's
//! lowered program; and the two halves of what the program asks: computing (forward, backward)
//! and synchronising (ties, all-reduce, ZeRO, optimizer step, buffers). The concepts that span
//! plan and worker keep their worker side in their own module: skips in [`crate::skips`],
//! re-materialization in [`crate::worker::remat`], the split backward in [`crate::model::split`], the gradient
//! guard in [`crate::worker::grad_guard`].

mod compute;
pub(crate) mod grad_guard;
mod interpreter;
mod job;
pub(crate) mod remat;
pub(crate) mod report;
mod scratch;
mod split;
mod stash;
mod state;
mod sync;
mod tape;
pub(crate) mod timing;
pub(crate) mod turns;
pub(crate) mod warm_up;

pub(crate) use interpreter::{Failure, Worker};
pub(crate) use job::{Feed, Finished, Job, StepContext, Training};
pub(crate) use stash::Stashed;
pub use state::WorkerState;
pub(crate) use tape::{Saved, Tape};
