//! Skips on a worker: the stashing stage takes its skips out of the output it sends downstream
//! and queues them, one message per popping stage; the popping stage adds the skips it
//! received to its input before its forward (and keeps them in the stash with the input, so a
//! re-materialized forward has them again). Backward runs the other way: the popping stage
//! splits its input gradient, sending the skips' parts straight back; the stashing stage adds
//! them to the gradient from downstream before its own backward.
//!
//! A stage without skips never comes here: the worker asks [`StageSkips::stashes`] and
//! [`StageSkips::pops`] first.

use std::collections::HashMap;

use burn::prelude::*;
use pipetrain_schedules::{MicroBatchId, SkipRoute, StageId};

use super::routes::SkipRoutes;
use crate::activation::{Activation, ActivationError};
use crate::bundle::Bundle;
use crate::error::Cause;
use crate::transport::{Flow, Tag};

/// Messages by tag: a worker's received or outgoing ones.
type Messages = HashMap<Tag, Activation>;

/// One route of a stage, with the names of the skips it carries.
struct Route {
    route: SkipRoute,
    names: Vec<String>,
}

/// One stage's share of the skip routes.
pub(crate) struct StageSkips {
    /// Routes whose skips this stage stashes (and sends), in order.
    stashed: Vec<Route>,
    /// Routes whose skips this stage pops (and receives), in order.
    popped: Vec<Route>,
}

impl StageSkips {
    /// `stage`'s routes of `routes`.
    pub fn new(routes: &SkipRoutes, stage: StageId) -> Self {
        let named = |route: SkipRoute| Route {
            route,
            names: routes.names(route).into_iter().map(String::from).collect(),
        };
        Self {
            stashed: routes.stashed_on(stage).into_iter().map(named).collect(),
            popped: routes.popped_on(stage).into_iter().map(named).collect(),
        }
    }

    /// Whether this stage stashes skips (sends them, receives their gradients).
    pub fn stashes(&self) -> bool {
        !self.stashed.is_empty()
    }

    /// Whether this stage pops skips (receives them, sends their gradients back).
    pub fn pops(&self) -> bool {
        !self.popped.is_empty()
    }

    /// The stage's `input` of `mb` with the skips received for it added (a bundle's parts), on
    /// `device`.
    pub fn join_input(
        &self,
        mb: MicroBatchId,
        input: Activation,
        received: &mut Messages,
        device: &Device,
    ) -> Result<Activation, Cause> {
        join(
            &self.popped,
            (mb, Flow::Skip),
            input,
            received,
            device,
            "this stage's input",
        )
    }

    /// The gradient of this stage's output for `mb`: `grad` from downstream with the skips'
    /// gradients received from the stages that popped them added, on `device`.
    pub fn join_grad(
        &self,
        mb: MicroBatchId,
        grad: Activation,
        received: &mut Messages,
        device: &Device,
    ) -> Result<Activation, Cause> {
        let what = "the gradient from downstream";
        join(
            &self.stashed,
            (mb, Flow::SkipGradient),
            grad,
            received,
            device,
            what,
        )
    }

    /// Whether this stage's messages on `flow` carry skips: its output ([`Flow::Activation`])
    /// when it stashes, its input gradient ([`Flow::Gradient`]) when it pops.
    pub fn splits(&self, flow: Flow) -> bool {
        match flow {
            Flow::Activation => self.stashes(),
            Flow::Gradient => self.pops(),
            _ => false,
        }
    }

    /// Takes the skips out of `value` of `mb` and queues them in `outgoing`; returns the rest.
    /// For this stage's (plain) output ([`Flow::Activation`]): the stashed skips, for the stages
    /// that pop them. For its input gradient ([`Flow::Gradient`]): the popped skips' parts, for
    /// the stages that stashed them (only differentiable skips have one).
    pub fn split(
        &self,
        flow: Flow,
        mb: MicroBatchId,
        value: Activation,
        outgoing: &mut Messages,
    ) -> Result<Activation, Cause> {
        match flow {
            Flow::Activation => split(&self.stashed, mb, value, outgoing, Flow::Skip, true),
            _ => split(&self.popped, mb, value, outgoing, Flow::SkipGradient, false),
        }
    }
}

/// A message for `route` did not fit: an error naming the route and the skips.
fn failure(route: &Route, what: &str, error: ActivationError) -> Cause {
    Cause::Unsupported(format!(
        "skips {:?} from {} to {}: {what}: {error}",
        route.names, route.route.stash, route.route.pop
    ))
}

/// `value` (`what`) with the bundles received for `mb` on each of `routes`' `flow` added.
fn join(
    routes: &[Route],
    (mb, flow): (MicroBatchId, fn(SkipRoute) -> Flow),
    value: Activation,
    received: &mut Messages,
    device: &Device,
    what: &str,
) -> Result<Activation, Cause> {
    let Some(first) = routes.first() else {
        return Ok(value);
    };
    let mut bundle = value
        .bundle()
        .map_err(|e| failure(first, &format!("{what} is no bundle"), e))?;
    for route in routes {
        let tag = Tag {
            flow: flow(route.route),
            micro_batch: mb,
        };
        let parts = received
            .remove(&tag)
            .expect("validated: received before the compute that needs it")
            .to_device(device)
            .bundle()
            .map_err(|e| failure(route, "received no bundle", e))?;
        bundle = bundle.with_parts(parts);
    }
    Ok(bundle.into())
}

/// Takes each route's skips out of `value` and queues them on `flow`; returns the rest. A skip
/// missing from `value` is an error when `required`.
fn split(
    routes: &[Route],
    mb: MicroBatchId,
    value: Activation,
    outgoing: &mut Messages,
    flow: fn(SkipRoute) -> Flow,
    required: bool,
) -> Result<Activation, Cause> {
    let Some(first) = routes.first() else {
        return Ok(value);
    };
    let mut bundle = value
        .bundle()
        .map_err(|e| failure(first, "this stage's result is no bundle", e))?;
    for route in routes {
        let mut parts = Bundle::new();
        for name in &route.names {
            match bundle.take_part(name) {
                Ok(part) => parts = parts.with_part(part),
                Err(e) if required => {
                    return Err(failure(route, "the stashing layer left it out", e));
                }
                Err(_) => {}
            }
        }
        let tag = Tag {
            flow: flow(route.route),
            micro_batch: mb,
        };
        outgoing.insert(tag, parts.into());
    }
    Ok(bundle.into())
}
