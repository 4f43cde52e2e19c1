//! # pipetrain-engine
//!
//! The runtime of pipetrain: a [`World`] of replicas × stages, one persistent thread per worker,
//! each interpreting its stage's lowered [`Plan`](pipetrain_schedules::Plan) on burn; a
//! [`Setup`] resolves what they run before any thread starts, a [`Runtime`] owns them, and a
//! [`Fabric`] connects them. Activations cross stages as plain tensors ([`Activation`]); each stage re-enters autodiff at its input leaf and backpropagates seeded
//! with the gradient its downstream neighbour sends back. Gradients accumulate over the
//! micro-batches of a step; one optimizer step per stage ends it.
//!
//! ```
//! use std::sync::Arc;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::prelude::*;
//! use pipetrain_engine::*;
//! use pipetrain_partitioner::Partition;
//! use pipetrain_schedules::ScheduleKind;
//!
//! #[derive(Module, Debug)]
//! struct Dense { linear: Linear }
//! impl Layer for Dense {
//!     fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
//!         Ok(self.linear.forward(x.float::<2>()?).into())
//!     }
//! }
//!
//! let device = Device::flex();
//! let model = vec![
//!     Dense { linear: LinearConfig::new(4, 8).init(&device) },
//!     Dense { linear: LinearConfig::new(8, 2).init(&device) },
//! ];
//! // One replica of two stages: one layer each.
//! let split = Partition::from_balance(&[1, 1], model.len())?;
//! let workers = Workers::build(World::new(1, 2)?, split, &model, &[device.clone()], &OptimizerConfig::sgd(), 1)?;
//! let config = RuntimeConfig {
//!     schedule: ScheduleKind::OneFOneB.into(),
//!     micro_batches: 2,
//!     learning_rate: 0.1,
//!     remat: Remat::Never,
//!     loss: Arc::new(Mse),
//!     data_parallel: DataParallel::default(),
//!     ties: Vec::new(),
//!     backward: Backward::default(),
//!     guard: Default::default(),
//!     timing: Default::default(),
//!     handoff: Default::default(),
//!     precision: Default::default(),
//! };
//! // Everything resolved and validated first; then the threads start.
//! let mut runtime = Runtime::new(Setup::new(workers, config)?, Box::new(ChannelFabric::default()))?;
//! let batch = Batch {
//!     inputs: Tensor::<2>::ones([4, 4], &device).into(),
//!     targets: Tensor::<2>::zeros([4, 2], &device).into(),
//! };
//! let report = runtime.step(&batch)?;
//! assert!(report.loss > 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod abort;
mod activation;
mod adapter;
mod batch;
mod bundle;
pub mod checkpoint;
mod collective;
pub mod device;
mod error;
mod fabric;
mod grad_guard;
mod handoff;
mod layer;
mod loss;
mod mixed_precision;
#[cfg(feature = "mpi")]
pub mod mpi;
mod optimizer;
mod optimizer_options;
pub mod output;
mod params;
pub mod pool;
mod precision;
pub mod profile;
mod reference;
mod remat;
mod report;
mod runtime;
mod setup;
mod skips;
mod split;
mod thread;
mod tie;
mod transport;
mod turns;
mod worker;
mod workers;
mod world;
mod zero;

pub use abort::Abort;
pub use activation::{Activation, FromActivation, chunk_rows};
pub use batch::{Batch, Shard};
pub use bundle::{Bundle, Part};
pub use collective::{ChannelCollective, Collective, even_bounds};
pub use error::{EngineError, Result};
pub use fabric::{ChannelFabric, Fabric, Links, TieLink};
pub use grad_guard::GradGuard;
pub use handoff::Handoff;
pub use layer::Layer;
pub use loss::{CrossEntropy, Loss, Mse};
pub use mixed_precision::{Precision, downcast_like, linear, upcast, upcast_module};
pub use optimizer::{AdamOptions, OptimizerConfig, SgdOptions};
pub use params::{Difference, difference, parameters, trainable_parameters};
pub use precision::MatmulPrecision;
pub use reference::SingleDevice;
pub use remat::Remat;
pub use report::{ActionTimes, StepOutcome, WorkerReport};
pub use runtime::{Backward, DataParallel, Runtime, RuntimeConfig, Timing};
pub use setup::{Plans, Setup};
pub use skips::{SkipRoutes, check_skips};
pub use split::dense::{self, Dense, DenseActivation};
pub use split::linears::{self, Linears};
pub use tie::{Tie, TiePlan, equalize};
pub use transport::{ChannelTransport, Flow, Tag, Transport};
pub use worker::WorkerState;
pub use workers::Workers;
pub use world::World;
