//! Collectives across the replicas of one stage: the seam a multi-process (MPI) or GPU (NCCL)
//! implementation plugs into.
//!
//! A group is the R workers that hold the same stage in R replicas (or, for a tied parameter, the
//! two stages that hold it). Two flat primitives carry everything — `reduce_scatter` and
//! `all_gather` over `f32` buffers, with `all_reduce` their composition — and the tensor methods
//! the engine calls (`reduce_tensors`, `broadcast_tensors`, `all_reduce_tensors`) have defaults
//! built on them, which is all a multi-process implementation must provide. The in-process
//! [`ChannelCollective`] overrides the tensor methods to pass tensor handles instead of copies.
//! Every sum is taken in **rank order** (`c₀ + c₁ + … + c_{R−1}`) by exactly one member, which
//! then hands the result to the others: a run repeats bit for bit however the threads are timed,
//! and every member ends with identical bits.
//!
//! ```
//! use std::sync::Arc;
//! use pipetrain_engine::{Abort, ChannelCollective, Collective};
//!
//! let abort = Arc::new(Abort::new());
//! let members = ChannelCollective::group(3, &abort);
//! let sums: Vec<Vec<f32>> = std::thread::scope(|s| {
//!     let handles: Vec<_> = members
//!         .into_iter()
//!         .map(|mut c| s.spawn(move || {
//!             let mut data = vec![c.rank() as f32 + 1.0; 5];
//!             c.all_reduce(&mut data).unwrap();
//!             data
//!         }))
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).collect()
//! });
//! assert!(sums.iter().all(|d| d == &vec![6.0; 5]));
//! ```

mod channel;
mod exchange;
mod group;
mod packing;

pub use channel::ChannelCollective;
#[cfg(feature = "mpi")]
pub(crate) use exchange::{Exchange, all_gather, reduce_scatter};
pub use group::Collective;
#[cfg(feature = "mpi")]
pub(crate) use group::Spread;
pub use packing::even_bounds;
#[cfg(feature = "mpi")]
pub(crate) use packing::values;
