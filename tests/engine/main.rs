//! The library end to end on the CPU: equivalence with single-device training, data
//! parallelism, the schedules, stage handoffs and split backwards, skips and tied weights,
//! checkpoints, memory accounting, inference, and the run loop (`trainer`, feature `trainer`).
//!
//! One test binary for the area (docs/design.md, "Test layout"). Its modules share burn's
//! random generator: every draw goes through `common::seeded` or `common::seeded_draw`, so a
//! seeded init is the same whichever tests run beside it. `trainer` sends SIGINT to this process:
//! only its own test installs handlers (`Stop::install`), which restart interrupted system calls.

#[path = "../common/mod.rs"]
mod common;

mod bundles;
mod checkpoint;
mod ci_variable;
mod data_parallel;
mod devices;
mod equivalence;
mod grad_guard;
mod handoff;
mod inference;
mod interleaved;
mod matmul_precision;
mod memory_budget;
mod messages;
mod mixed_precision;
mod setup;
mod skip_routing;
mod split_backward;
mod split_linears;
mod tied;
mod timing;
#[cfg(feature = "trainer")]
mod trainer;
mod tune;
mod unet;
mod uneven;
mod varying_shapes;
mod verify_per_step;
mod warm_up;
mod zero;
