//! The run loop (feature `trainer`): [`Trainer`] steps a [`Pipeline`](crate::Pipeline) over a
//! [`Source`] of batches (a pipetrain-data loader through [`Epochs`], or any function of the
//! batch index) with checkpoints (periodic, on a signal, and for the last good step when a step
//! goes non-finite; written atomically), a metrics file ([`Metrics`]), a graceful stop on
//! SIGINT/SIGTERM ([`Stop`]), resume from a checkpoint (step, optimizer state and data
//! position, checked against the run's [`RunIdentity`]), the per-step verification against a
//! single-device copy ([`Reference`], [`verify`]), and held-out evaluation ([`eval`]). It
//! prints nothing: what happens goes to a callback as [`Event`]s. The `pipetrain` binary is
//! this loop under flags. A run with a checkpoint and a resume is `examples/train_loop.rs`.

pub mod agreement;
mod checkpoints;
mod data;
pub mod disk;
mod distributed;
mod drift;
pub mod eval;
mod event;
pub mod fingerprint;
pub mod footprint;
pub mod hf;
mod identity;
mod kernel_cache;
mod metrics;
mod model;
mod open;
mod outcome;
pub mod paths;
mod processes;
mod reference;
mod relay;
mod replicas;
mod run;
mod settings;
mod source;
mod stop;
pub mod summary;
pub mod threads;
mod totals;
pub mod verify;
mod weights;

pub use checkpoints::{Resumed, fits, resume, save};
pub use data::{Data, Shapes};
pub use distributed::{Distributed, Launch, Shared};
pub use drift::{DRIFT_VARIABLE, Drift};
pub use event::{Event, StepRecord, Warning};
pub use identity::{DATA, DATA_POSITION, DATA_SPEC, RunIdentity};
pub use kernel_cache::{kernel_cache_line, kernel_cache_line_of};
pub use metrics::{Format, Metrics, Row};
pub use model::ReferenceModel;
pub use open::{DataProblem, DataSettings, Task};
pub use outcome::{LostOutputs, Outcome};
pub use processes::Processes;
pub use reference::{After, Mode, Reference, Worst};
pub use relay::LineRelay;
pub use run::{Trainer, weights_intact};
pub use settings::TrainerSettings;
pub use source::{Epochs, Source};
pub use stop::{HOLD_VARIABLE, Signal, Stop};
pub use totals::StepTotals;
pub use weights::init_weights;
