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
use crate::comm::transport::{Flow, Tag};
use crate::error::EngineError;
use crate::model::activation::Activation;
use crate::model::bundle::Bundle;

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
    ) -> Result<Activation, EngineError> {
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
    ) -> Result<Activation, EngineError> {
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
    ) -> Result<Activation, EngineError> {
        match flow {
            Flow::Activation => split(&self.stashed, mb, value, outgoing, Flow::Skip, true),
            _ => split(&self.popped, mb, value, outgoing, Flow::SkipGradient, false),
        }
    }
}

/// A message for `route` did not fit: an error naming the route and the skips.
fn failure(route: &Route, what: &str, error: EngineError) -> EngineError {
    EngineError::SkipBundle {
        names: route.names.iter().map(|n| n.to_string()).collect(),
        stash: route.route.stash,
        pop: route.route.pop,
        what: what.to_string(),
        error: Box::new(error),
    }
}

/// `value` (`what`) with the bundles received for `mb` on each of `routes`' `flow` added.
fn join(
    routes: &[Route],
    (mb, flow): (MicroBatchId, fn(SkipRoute) -> Flow),
    value: Activation,
    received: &mut Messages,
    device: &Device,
    what: &str,
) -> Result<Activation, EngineError> {
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
) -> Result<Activation, EngineError> {
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

#[cfg(test)]
mod tests {
    use pipetrain_partitioner::Partition;

    use super::*;
    use crate::model::layer::Layer;

    /// Down `level` stashes `s{level}`, up pops it.
    #[derive(burn::module::Module, Debug)]
    struct L {
        level: usize,
        up: bool,
    }

    impl Layer for L {
        fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
            Ok(x)
        }
        fn stashes(&self) -> Vec<String> {
            (!self.up)
                .then(|| format!("s{}", self.level))
                .into_iter()
                .collect()
        }
        fn pops(&self) -> Vec<String> {
            self.up
                .then(|| format!("s{}", self.level))
                .into_iter()
                .collect()
        }
    }

    /// down 0, down 1 | up 1 | up 0: stage 0 sends `s1` to stage 1 and `s0` to stage 2.
    fn stages() -> [StageSkips; 3] {
        let layer = |level, up| L { level, up };
        let model = [
            layer(0, false),
            layer(1, false),
            layer(1, true),
            layer(0, true),
        ];
        let routes = SkipRoutes::new(&model, &Partition::from_balance(&[2, 1, 1], 4).unwrap());
        [0, 1, 2].map(|s| StageSkips::new(&routes, StageId(s)))
    }

    fn names(a: &Activation) -> Vec<String> {
        let bundle = a.clone().bundle().unwrap();
        bundle.parts().iter().map(|p| p.name.clone()).collect()
    }

    /// Only a stage with skips on a flow splits it: the worker skips the machinery otherwise.
    #[test]
    fn only_stages_with_skips_split_their_messages() {
        let [s0, s1, s2] = stages();
        let none = StageSkips::new(&SkipRoutes::default(), StageId(0));
        let splits = |s: &StageSkips| [Flow::Activation, Flow::Gradient].map(|f| s.splits(f));
        assert_eq!(splits(&s0), [true, false]);
        assert_eq!(splits(&s1), [false, true]);
        assert_eq!(splits(&s2), [false, true]);
        assert_eq!(splits(&none), [false, false]);
    }

    /// The stashing stage's output loses its skips to one message per popping stage; the popper
    /// joins its message back into its input.
    #[test]
    fn the_stashing_stage_splits_and_the_popping_stage_joins() {
        let [s0, s1, _] = stages();
        let device = Device::flex();
        let t = |v: f32| Tensor::<2>::full([2, 3], v, &device);
        let output = Bundle::new()
            .with("x", t(1.0))
            .with("s0", t(2.0))
            .with("s1", t(3.0));
        let (mb, mut outgoing) = (MicroBatchId(0), Messages::new());
        let rest = s0
            .split(Flow::Activation, mb, output.into(), &mut outgoing)
            .unwrap();
        assert_eq!(names(&rest), ["x"]);
        let tag = |route: &str| Tag {
            flow: Flow::Skip(route.parse().unwrap()),
            micro_batch: mb,
        };
        assert_eq!(outgoing.len(), 2);
        assert_eq!(names(&outgoing[&tag("0:1")]), ["s1"]);
        assert_eq!(names(&outgoing[&tag("0:2")]), ["s0"]);
        let mut received: Messages = outgoing
            .into_iter()
            .filter(|(k, _)| *k == tag("0:1"))
            .collect();
        let input = s1.join_input(mb, rest, &mut received, &device).unwrap();
        assert_eq!(names(&input), ["x", "s1"]);
        assert!(received.is_empty());
    }

    /// A stashing layer that leaves its skip out is an error naming the route and the skip.
    #[test]
    fn a_missing_skip_names_its_route() {
        let [s0, _, _] = stages();
        let device = Device::flex();
        let output = Bundle::new().with("s1", Tensor::<2>::zeros([1, 1], &device));
        let mut outgoing = Messages::new();
        let error = s0
            .split(
                Flow::Activation,
                MicroBatchId(0),
                output.into(),
                &mut outgoing,
            )
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains(r#"skips ["s0"] from "#), "{message}");
        assert!(
            message.contains("the stashing layer left it out"),
            "{message}"
        );
    }
}
