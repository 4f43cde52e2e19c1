//! A worker: one (replica, stage) of the world. Its persistent state, the interpreter that walks
//! its stage's lowered program, and the two halves of what the program asks: computing
//! (forward, backward, re-materialization; skips sent straight between stages) and synchronising (ties, all-reduce, ZeRO, optimizer
//! step, buffers).

mod compute;
mod guard;
mod interpreter;
pub(crate) mod stash;
mod state;
mod sync;
pub(crate) mod tape;

pub(crate) use interpreter::{Failure, Feed, Finished, StepContext, Worker};
pub use state::WorkerState;
