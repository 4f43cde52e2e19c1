//! What `pipetrain plan` reports, as a library: a schedule's compute plan lowered (sends and
//! receives added), validated and dry-run under per-stage costs ([`PlanReport`]), as data and as
//! text. Nothing here touches a device or starts a thread.
//!
//! ```
//! use pipetrain::ScheduleKind;
//! use pipetrain::commands::plan::{PlanCosts, PlanReport, PlanSettings};
//!
//! let compute = ScheduleKind::GPipe.plan(2, 2)?;
//! let settings = PlanSettings { costs: PlanCosts::default(), ..Default::default() };
//! let report = PlanReport::build("gpipe".into(), &compute, &settings)?;
//! assert_eq!(report.makespan, 9.0);
//! assert!(report.text().contains("stage 1 | .  F0 F1 B0 B0 B1 B1 .  ."));
//! # Ok::<(), pipetrain::Error>(())
//! ```

mod compare;
mod costs;
mod format;
#[cfg(feature = "trainer")]
pub mod limits;
mod report;

pub use compare::{Comparison, ScheduleRow, compare};
pub use costs::{MAX_COST, MAX_COST_RATIO, MIN_COST, PlanCosts, cost_problem};
pub use format::{columns, compact, num, percent, short};
pub use report::{
    CostsReport, GradientWindow, GridSize, MAX_GRID_BYTES, Overlapped, PlanReport, PlanSettings,
    StageLine,
};
