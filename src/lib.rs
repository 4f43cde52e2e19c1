//! # pipetrain
//!
//! Pipeline- and data-parallel training for burn (facade crate).

pub use pipetrain_engine as engine;
pub use pipetrain_partitioner as partitioner;
pub use pipetrain_schedules as schedules;
