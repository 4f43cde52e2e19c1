//! Partitioning for pipetrain: which layers each pipeline stage runs, and which device each
//! worker runs on. No burn dependency: layers are known here only by their [`LayerCost`].
//!
//! - [`LayerCost`] / [`StageCost`]: the cost model (time = forward + backward; memory = params
//!   plus one micro-batch's activations per layer).
//! - [`Partition`]: contiguous, non-empty layer ranges, one per stage — given explicitly with
//!   [`Partition::from_balance`], split evenly with [`Partition::even`], or optimised with
//!   [`partition_by_time`] (exact min-max stage time, under an optional memory budget).
//! - [`CutBytes`]: what a stage holds beyond its layers, by where it is cut (its received
//!   inputs, the weight-gradient pass's copies), with [`held_at_once`] and [`with_headroom`]:
//!   the memory accounting `--memory-budget` and `pipetrain tune` share.
//! - [`Placement`]: every worker (replica × stage) mapped to a [`DeviceIndex`].
//!
//! Every bad input is a [`PartitionError`] that names the numbers and the remedy.
//!
//! ```
//! use pipetrain_partitioner::{partition_by_time, DeviceIndex, LayerCost, Placement};
//! use pipetrain_schedules::{ReplicaId, StageId, WorkerId};
//!
//! // Six layers; the fourth is as slow as the other five together.
//! let costs: Vec<LayerCost> = [1.0, 1.0, 1.0, 5.0, 1.0, 1.0]
//!     .iter()
//!     .map(|&forward| LayerCost::new(forward, 2.0 * forward))
//!     .collect();
//! let partition = partition_by_time(&costs, 3, None)?;
//! assert_eq!(partition.to_string(), "[0..3 | 3..4 | 4..6]");
//! assert_eq!(partition.stage_of_layer(3), StageId(1));
//!
//! // Two replicas of that 3-stage pipeline over 4 devices, round-robin by worker rank.
//! let placement = Placement::round_robin(2, partition.stages(), 4)?;
//! assert_eq!(placement.device(WorkerId::new(ReplicaId(1), StageId(1))), DeviceIndex(0));
//! # Ok::<(), pipetrain_partitioner::PartitionError>(())
//! ```

mod cost;
mod cut;
mod error;
mod fit;
mod optimal;
mod partition;
mod placement;

pub use cost::{LayerCost, StageCost};
pub use cut::{CutBytes, held_at_once, weight_copies, with_headroom};
pub use error::{PartitionError, Result};
pub use fit::fit_balance;
pub use optimal::{partition_by_time, partition_by_time_with};
pub use partition::{Iter, Partition};
pub use placement::{DeviceIndex, Placement};
