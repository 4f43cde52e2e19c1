//! Choosing the configuration: [`measure`] a model's costs on this machine (per layer, at every
//! micro-batch size in play, through the engine itself), [`search`] replicas × stages ×
//! micro-batches × schedule × re-materialization under a memory budget, and apply the winner
//! with [`PipelineBuilder::auto`](crate::PipelineBuilder::auto) or
//! [`PipelineBuilder::configure`](crate::PipelineBuilder::configure). `pipetrain tune` is the
//! same from the command line, with a cache and trial runs.

mod auto;
mod measure;

pub use auto::{choose, default_space};
pub use measure::{Calibration, drift, measure};
pub use pipetrain_tune::{
    Candidate, CostTable, Infeasible, Knobs, LayerTimes, Ranking, Reason, Recompute, RowsCosts,
    Space, TuneError, search,
};
