//! Chrome traces of a run (feature `trainer`): one track per worker, one slice per action, flow
//! arrows from each send to its receive ([`Profile`]), written from the engine's `tracing`
//! spans.

mod flows;
mod recorder;
mod trace;

pub use recorder::Profile;
pub use trace::{Counts, Slice, Tracks, post_process_into};
