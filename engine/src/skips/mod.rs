//! Skip connections: a layer stashes a named value, a later layer pops it. This module is the
//! engine's whole side of them (the plan's side is `pipetrain_schedules::route_skips`):
//!
//! - [`check`]: the model's stashes and pops pair up, checked before anything runs;
//! - [`routes`]: which skips cross which stages under a partition, and one stage's share;
//! - [`stage`]: on a worker, the stashing stage takes its skips out of its output and sends
//!   them straight to the popping stage, which adds them to its input; gradients go back the
//!   same way.

mod check;
mod routes;
mod stage;

pub use check::check_skips;
pub use routes::SkipRoutes;
pub(crate) use stage::StageSkips;
