//! Choosing the configuration: [`measure`] a model's costs on this machine (per layer, at every
//! micro-batch size in play, through the engine itself), [`search`] replicas × stages ×
//! micro-batches × schedule × re-materialization under a memory budget, and apply the winner
//! with [`PipelineBuilder::auto`](crate::PipelineBuilder::auto) or
//! [`PipelineBuilder::configure`](crate::PipelineBuilder::configure). [`tune`] is a whole
//! session as `pipetrain tune` runs it: the cost table cached per model and machine, the
//! ranking, [`trials`] of the top candidates (measured beside predicted), and the winner.

#[cfg(feature = "commands")]
pub mod applied;
mod auto;
#[cfg(feature = "commands")]
mod cache;
mod measure;
#[cfg(feature = "commands")]
mod session;
mod table;
mod trial;

pub use auto::{choose, default_space};
#[cfg(feature = "commands")]
pub use cache::cache_dir;
pub use measure::{Calibration, drift, measure};
pub use pipetrain_tune::{
    Candidate, CostTable, Infeasible, Knobs, LayerTimes, Ranking, Reason, Recompute, RowsCosts,
    Space, TuneError, search,
};
#[cfg(feature = "commands")]
pub use session::{TableSource, TuneProgress, TuneReport, TuneSettings, tune};
pub use table::{Busy, RankingTable};
pub use trial::{ROUNDS, Trial, trials};
