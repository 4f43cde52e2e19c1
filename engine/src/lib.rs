//! # pipetrain-engine
//!
//! The runtime of pipetrain: one worker per (replica, stage) interprets its stage's lowered
//! [`Plan`](pipetrain_schedules::Plan) on burn. Activations cross stages as plain tensors
//! ([`Activation`]); each stage re-enters autodiff at its input leaf and backpropagates seeded
//! with the gradient its downstream neighbour sends back. Gradients accumulate over the
//! micro-batches of a step; one optimizer step per stage ends it.
//!
//! ```
//! use burn::nn::{Linear, LinearConfig};
//! use burn::prelude::*;
//! use pipetrain_engine::*;
//! use pipetrain_schedules::*;
//!
//! #[derive(Module, Debug)]
//! struct Dense { linear: Linear }
//! impl Layer for Dense {
//!     fn forward(&self, x: Activation) -> Result<Activation, ActivationError> {
//!         Ok(self.linear.forward(x.float::<2>()?).into())
//!     }
//! }
//!
//! let device = Device::flex();
//! let layer = |i, o| Dense { linear: LinearConfig::new(i, o).init(&device) };
//! let optimizer = OptimizerConfig::sgd();
//! let mut workers = vec![
//!     WorkerState::new(WorkerId::new(ReplicaId(0), StageId(0)), vec![layer(4, 8)], &device, &optimizer, 1),
//!     WorkerState::new(WorkerId::new(ReplicaId(0), StageId(1)), vec![layer(8, 2)], &device, &optimizer, 1),
//! ];
//! let plan = lower(&ScheduleKind::OneFOneB.plan(2, 2)?, Lowering::default());
//! validate(&plan)?;
//! let x: Activation = Tensor::<2>::ones([4, 4], &device).into();
//! let y: Activation = Tensor::<2>::zeros([4, 2], &device).into();
//! let shard = Shard { inputs: x.split(2)?, targets: y.split(2)? };
//! let config = StepConfig { plan: &plan, learning_rate: 0.1, remat: Remat::Never, loss: &Mse };
//! let outcome = run_step(&mut workers, vec![shard], &config)?;
//! assert!(outcome.loss > 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod abort;
mod activation;
mod adapter;
mod batch;
pub mod checkpoint;
mod collective;
mod error;
mod layer;
mod loss;
mod optimizer;
mod params;
pub mod pool;
pub mod profile;
mod reference;
mod remat;
mod report;
mod runtime;
mod stash;
mod tie;
mod transport;
mod worker;

pub use abort::Abort;
pub use activation::{Activation, ActivationError, FromActivation};
pub use batch::Batch;
pub use collective::{ChannelCollective, Collective, CollectiveError, even_bounds};
pub use error::{Cause, EngineError, Result};
pub use layer::Layer;
pub use loss::{CrossEntropy, Loss, Mse};
pub use optimizer::OptimizerConfig;
pub use params::{Difference, difference, parameters, trainable_parameters};
pub use reference::SingleDevice;
pub use remat::{ParseRematError, Remat};
pub use report::{StepOutcome, WorkerReport};
pub use runtime::{DataParallel, Shard, StepConfig, run_inference, run_step, run_step_with};
pub use tie::{Tie, TieError, TiePlan, equalize};
pub use transport::{ChannelTransport, Flow, Tag, Transport, TransportError};
pub use worker::WorkerState;
