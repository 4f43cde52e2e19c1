//! # pipetrain-schedules
//!
//! The schedule IR of pipetrain and the shared vocabulary of its crates. No burn dependency:
//! everything here runs, and is tested, without a device.
//!
//! A schedule is **data**: a [`Plan`] holds one ordered program of [`Action`]s per stage. A
//! schedule generator ([`ScheduleKind::plan`]) emits compute only (forwards and backwards);
//! [`lower`] adds the sends, receives, all-reduce and optimizer step; [`validate`] proves the
//! plan complete and deadlock-free before any thread starts; [`simulate`] dry-runs it for the
//! makespan, bubble and peak stash; [`render`] draws it.
//!
//! ```
//! use pipetrain_schedules::{lower, render, simulate, validate, Costs, Lowering, ScheduleKind};
//!
//! let compute = ScheduleKind::OneFOneB.plan(3, 4)?;
//! let plan = lower(&compute, Lowering::default());
//! validate(&plan)?;
//! let sim = simulate(&plan, &Costs::uniform(3, 1.0, 2.0))?;
//! assert!((sim.bubble_fraction - 2.0 / 6.0).abs() < 1e-12); // (p−1)/(m+p−1)
//! assert_eq!(sim.stages[0].peak_stash, 3);                   // ≤ p − s
//! println!("{}", render::timeline(&sim));
//! # Ok::<(), pipetrain_schedules::ScheduleError>(())
//! ```

mod action;
mod building_block;
mod dataflow;
mod dual_pipe_v;
mod error;
mod gpipe;
mod id;
mod inference;
mod interleaved;
mod interleaved_zb;
mod kind;
mod list_scheduler;
mod looped_bfs;
mod lower;
mod one_f_one_b;
mod overlap;
mod plan;
mod plan_file;
pub mod remedy;
pub mod render;
mod schedule;
mod simulate;
mod skip;
mod split;
mod text_file;
mod v_half;
mod v_min;
mod validate;
mod violation;
mod zb_2p;
mod zb_h1;
mod zb_v;
mod zero;

pub use action::{Action, ActionKind};
pub use dataflow::Slot;
pub use error::{Result, ScheduleError};
pub use id::{MicroBatchId, ReplicaId, StageId, WorkerId};
pub use inference::{inference, inference_at};
pub use kind::ScheduleKind;
pub use lower::{Lowering, lower};
pub use plan::Plan;
pub use plan_file::PlanFile;
pub use remedy::{Remedied, Remedy};
pub use schedule::Schedule;
pub use simulate::{Costs, Simulation, StageSimulation, peak_stash, simulate};
pub use skip::{SkipRoute, route_skips};
pub use text_file::{FileProblem, read_bounded};
pub use validate::{InvalidPlan, Violation, validate, validate_inference};
pub use zero::Zero;
