//! A worker: one (replica, stage) of the world. Its persistent state, and the interpreter that
//! walks its stage's lowered program.

mod interpreter;
mod state;

pub(crate) use interpreter::{Feed, Finished, StepContext, Tied, Worker};
pub use state::WorkerState;
