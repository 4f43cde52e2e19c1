//! # pipetrain-engine
//!
//! The runtime of pipetrain: a [`World`] of replicas × stages, one persistent thread per worker,
//! each interpreting its stage's lowered [`Plan`](pipetrain_schedules::Plan) on burn; a
//! [`Prepared`] resolves what they run before any thread starts, a [`Runtime`] owns them, and a
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
//!     warm_up: Default::default(),
//! };
//! // Everything resolved and validated first; then the threads start.
//! let mut runtime = Runtime::new(Prepared::new(workers, config)?, Box::new(ChannelFabric::default()))?;
//! let batch = Batch {
//!     inputs: Tensor::<2>::ones([4, 4], &device).into(),
//!     targets: Tensor::<2>::zeros([4, 2], &device).into(),
//! };
//! let report = runtime.step(&batch)?;
//! assert!(report.loss > 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod adapter;
pub mod checkpoint;
mod comm;
pub mod device;
mod error;
mod ids;
mod model;
mod optim;
pub mod output;
mod precision;
mod runtime;
mod skips;
mod worker;
mod world;

pub use adapter::saved;
pub use adapter::{Parameter, parameter};
pub use comm::abort::Abort;
pub use comm::collective::{ChannelCollective, Collective, even_bounds};
pub use comm::fabric::{ChannelFabric, Fabric, Links, TieLink};
pub use comm::transport::{ChannelTransport, Flow, Tag, Transport};
pub use device::handoff::Handoff;
pub use error::{EngineError, Result};
pub use model::activation::{Activation, FromActivation, chunk_rows};
pub use model::batch::{Batch, Shard};
pub use model::bundle::{Bundle, Part};
pub use model::layer::Layer;
pub use model::layout::Layout;
pub use model::loss::{CrossEntropy, Loss, Mse};
pub use model::mixed_precision::{
    cast_copy_bytes, cast_module, downcast_like, linear, matmul, upcast, upcast_module,
};
pub use model::modes::{inference_copy, materialize, plain_device, trainable};
pub use model::params::{Difference, difference, parameters, trainable_parameters};
pub use model::split::dense::{self, Dense, DenseActivation};
pub use model::split::linears::{self, Linears};
pub use optim::optimizer::{AdamOptions, OptimizerConfig, SgdOptions};
pub use optim::tie::{Tie, TiePlan, equalize};
pub use optim::zero::owned_parameter_bytes;
pub use precision::{GemmLibrary, MatmulPrecision, Precision};
pub use runtime::prepared::{Plans, Prepared};
pub use runtime::reference::SingleDevice;
pub use runtime::workers::Workers;
pub use runtime::{Backward, DataParallel, Runtime, RuntimeConfig, Timing};
pub use skips::{SkipRoutes, check_skips};
pub use worker::WorkerState;
pub use worker::grad_guard::GradGuard;
pub use worker::remat::Remat;
pub use worker::report::{ActionTimes, StepOutcome, WorkerReport};
pub use worker::warm_up::WarmUp;
pub use world::World;

#[cfg(feature = "mpi")]
pub use comm::mpi;
pub use device::pool;
pub use model::costs;
