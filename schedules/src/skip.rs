//! Skip routes: which stage pairs exchange skips, and the pass that adds their transfers.
//!
//! A layer may stash a tensor that a later layer pops (a U-Net's long skips). When the two
//! layers sit on different stages, the skip travels **straight** from the stashing stage to the
//! popping one, on its own flow, and its gradient straight back — the stages between never
//! carry it (torchgpipe's `@skippable` routing). [`route_skips`] adds, per route `s:t` and
//! micro-batch k, to a compute plan:
//!
//! ```text
//! stage s (stashes)          stage t (pops)
//!   F k ─ sSKk>t ──────────►  tRKk<s ─ F k        the skips, before t's forward
//!   sRKBk<t ─ B k  ◄───────── B k ─ tSKBk>s       their gradients, before s's backward
//! ```
//!
//! A skip's gradient is ready when t's backward of k is done, and s needs it for its own
//! backward of k, which every schedule runs after t's (it waits for the gradient chain
//! t → t−1 → … → s): the receive never waits on something s itself must do first, and
//! [`validate`](crate::validate)'s dry run proves it for each plan.

use std::fmt;
use std::str::FromStr;

use crate::action::{Action, ActionKind};
use crate::error::{Result, ScheduleError};
use crate::id::StageId;
use crate::plan::Plan;

/// A pair of stages that exchange skips: `stash` sends the skips it stashed to `pop`, which
/// sends their gradients back. Text form `stash:pop`.
///
/// ```
/// use pipetrain_schedules::{SkipRoute, StageId};
/// let route: SkipRoute = "1:3".parse().unwrap();
/// assert_eq!(route, SkipRoute { stash: StageId(1), pop: StageId(3) });
/// assert_eq!(route.to_string(), "1:3");
/// assert!("3:1".parse::<SkipRoute>().is_err(), "a skip goes to a later stage");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct SkipRoute {
    /// The stage whose layer stashes the skips.
    pub stash: StageId,
    /// The later stage whose layer pops them.
    pub pop: StageId,
}

impl fmt::Display for SkipRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.stash.0, self.pop.0)
    }
}

impl FromStr for SkipRoute {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let bad = || format!("`{text}` is no skip route: expected `STASH:POP`, e.g. `1:3`");
        let (stash, pop) = text.split_once(':').ok_or_else(bad)?;
        let stage = |t: &str| t.trim().parse::<u32>().map(StageId).map_err(|_| bad());
        let route = SkipRoute {
            stash: stage(stash)?,
            pop: stage(pop)?,
        };
        if route.stash >= route.pop {
            // The example must be a route that parses: the two stages in order, or the next
            // stage when they are one.
            let (stash, pop) = match route.stash == route.pop {
                true => (route.stash.0, route.stash.0.saturating_add(1)),
                false => (route.pop.0, route.stash.0),
            };
            return Err(format!(
                "skip route `{text}`: a skip goes from the stashing stage to a later popping \
                 stage (e.g. `{stash}:{pop}`)"
            ));
        }
        Ok(route)
    }
}

/// `plan` (compute only, or an inference plan) with the skip transfers of `routes` added around
/// each forward and backward — per route `s:t` and micro-batch k: `sSKk>t` after s's forward,
/// `tRKk<s` before t's, `tSKBk>s` after t's backward (or `I`), `sRKBk<t` before s's; lower it
/// afterwards.
///
/// ```
/// use pipetrain_schedules::{lower, route_skips, validate, Lowering, ScheduleKind, SkipRoute};
/// let compute = ScheduleKind::GPipe.plan(3, 1).unwrap();
/// let routes = ["0:2".parse::<SkipRoute>().unwrap()];
/// let plan = lower(&route_skips(&compute, &routes).unwrap(), Lowering::default());
/// validate(&plan).unwrap();
/// assert_eq!(
///     plan.to_string(),
///     "0: 0F0 0SF0 0SK0>2 0RKB0<2 0RB0 0B0 0AR 0OPT\n\
///      1: 1RF0 1F0 1SF0 1RB0 1B0 1SB0 1AR 1OPT\n\
///      2: 2RK0<0 2RF0 2F0 2B0 2SB0 2SKB0>0 2AR 2OPT\n"
/// );
/// assert_eq!(plan.skip_routes(), routes);
/// ```
///
/// # Errors
/// [`ScheduleError::SkipRoute`] for a route that does not go from a stage to a later one.
pub fn route_skips(plan: &Plan, routes: &[SkipRoute]) -> Result<Plan> {
    let mut routes = routes.to_vec();
    routes.sort();
    routes.dedup();
    if let Some(bad) = routes
        .iter()
        .find(|r| r.stash >= r.pop || r.pop.index() >= plan.stages())
    {
        return Err(ScheduleError::SkipRoute {
            route: bad.to_string(),
            stages: plan.stages(),
        });
    }
    if routes.is_empty() {
        return Ok(plan.clone());
    }
    let from = |stage| routes.iter().filter(move |r| r.pop == stage);
    let to = |stage| routes.iter().filter(move |r| r.stash == stage);
    use ActionKind::{Backward, BackwardInput, Forward};
    let skip = |half: Action, kind, peer| Action::skip(half.stage, kind, half.mb(), peer);
    // Before a compute action: the skips its forward pops, the skip gradients its backward
    // needs; after it: the skips its forward stashes, the skip gradients its backward makes.
    let receives = |half: Action| -> Vec<Action> {
        match half.kind {
            Forward => from(half.stage)
                .map(|r| skip(half, ActionKind::RecvSkip, r.stash))
                .collect(),
            Backward | BackwardInput => to(half.stage)
                .map(|r| skip(half, ActionKind::RecvSkipGradient, r.pop))
                .collect(),
            _ => Vec::new(),
        }
    };
    let sends = |half: Action| -> Vec<Action> {
        match half.kind {
            Forward => to(half.stage)
                .map(|r| skip(half, ActionKind::SendSkip, r.pop))
                .collect(),
            Backward | BackwardInput => from(half.stage)
                .map(|r| skip(half, ActionKind::SendSkipGradient, r.stash))
                .collect(),
            _ => Vec::new(),
        }
    };
    let programs = plan
        .programs()
        .iter()
        .map(|program| {
            let mut out = Vec::with_capacity(program.len());
            for &action in program {
                // An overlap's halves: the receives of both before it, the sends of both after.
                out.extend(action.in_sequence().flat_map(receives));
                out.push(action);
                out.extend(action.in_sequence().flat_map(sends));
            }
            out
        })
        .collect();
    Ok(plan.with_programs(programs))
}

impl Plan {
    /// The stage pairs this plan sends skips between, from its `SK` actions, in order.
    pub fn skip_routes(&self) -> Vec<SkipRoute> {
        let mut routes: Vec<SkipRoute> = self
            .actions()
            .filter(|a| a.kind == ActionKind::SendSkip)
            .filter_map(|a| {
                Some(SkipRoute {
                    stash: a.stage,
                    pop: a.peer?,
                })
            })
            .collect();
        routes.sort();
        routes.dedup();
        routes
    }
}
