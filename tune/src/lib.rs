//! Choosing a pipeline's configuration: replicas × stages × micro-batches × schedule ×
//! re-materialization, for a model whose costs were measured ([`CostTable`]) and a memory budget.
//! No burn dependency: the facade measures the table (`pipetrain tune`,
//! `PipelineBuilder::auto`), this crate searches it.
//!
//! For each point of the [`Space`], [`search`] splits the layers with the partitioner under the
//! budget, counts each worker's bytes, simulates the schedule's plan with the measured per-layer
//! forward, input- and weight-gradient times at that micro-batch size (plus transfers, the
//! all-reduce, the optimizer step, the hand-over between a worker's chunks and the slowdown of
//! workers sharing a machine), and ranks the feasible points by predicted samples/s. The others
//! are kept with their [`Reason`] ("over budget on stage 1 by N bytes").
//!
//! ```
//! use pipetrain_schedules::{ScheduleKind, Zero};
//! use pipetrain_tune::{CostTable, LayerTimes, Recompute, RowsCosts, Space, search};
//!
//! // Four equal layers; a row costs the same at any micro-batch size; 1 MB of weights each.
//! let space = Space {
//!     batch: 64,
//!     workers: 2,
//!     memory_budget: None,
//!     schedules: vec![ScheduleKind::GPipe, ScheduleKind::OneFOneB],
//!     remats: vec![Recompute::Never],
//!     zeros: vec![Zero::Off],
//!     max_micro_batches: 8,
//! };
//! let rows = space.rows_in_play(4);
//! let layer = |r: usize| LayerTimes {
//!     forward: r as f64,
//!     backward: 2.0 * r as f64,
//!     input: r as f64,
//!     weight: r as f64,
//!     activation_bytes: 4 * r as u64,
//!     output_bytes: 4 * r as u64,
//!     deferred_bytes: 0,
//! };
//! let table = CostTable {
//!     param_bytes: vec![1 << 20; 4],
//!     rows: rows.iter().map(|&r| RowsCosts { rows: r, layers: vec![layer(r); 4] }).collect(),
//!     all_reduce_per_byte: 1e-3,
//!     ..CostTable::default()
//! };
//! let ranking = search(&table, &space)?;
//! let best = ranking.best().unwrap();
//! // All-reduce is dear here: two stages at the most micro-batches beat two replicas.
//! assert_eq!((best.knobs.replicas, best.knobs.stages, best.knobs.micro_batches), (1, 2, 8));
//! assert_eq!(best.partition.to_string(), "[0..2 | 2..4]");
//! # Ok::<(), pipetrain_tune::TuneError>(())
//! ```

mod candidate;
mod error;
mod evaluate;
mod search;
mod space;
mod table;

pub use candidate::{Candidate, Infeasible, Knobs, Ranking, Reason};
pub use error::{Result, TuneError};
pub use evaluate::{backward, chunk_held, evaluate};
pub use search::{knobs, search};
pub use space::{Recompute, Space};
pub use table::{CostTable, LayerTimes, MAX_SECONDS, MAX_SLOWDOWN, MIN_SECONDS, RowsCosts};
