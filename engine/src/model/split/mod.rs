//! The split backward: `B` cut into `I` (input gradients, on the critical path) and `W`
//! (weight gradients, deferred to fill the bubbles).
//!
//! - [`dense`]: layers that are one `Linear` and an element-wise activation, run by hand;
//! - [`linears`]: the `Linear` calls inside other layers, their weights kept off the graph;
//! - [`deferred`]: what `I` leaves for `W`, grouped by micro-batches;
//! - [`worker`]: the dense forward and backward on a worker, the split calls' output gradients, and
//!   `W` itself.

pub(crate) mod deferred;
pub mod dense;
pub mod linears;
