//! Skips on a worker: the stashing stage takes its skips out of the output it sends downstream
//! and queues them, one message per popping stage; the popping stage adds the skips it
//! received to its input before its forward (and keeps them in the stash with the input, so a
//! re-materialized forward has them again). Backward runs the other way: the popping stage
//! splits its input gradient, sending the skips' parts straight back; the stashing stage adds
//! them to the gradient from downstream before its own backward.

use pipetrain_schedules::{MicroBatchId, SkipRoute};

use super::interpreter::{Failure, Worker};
use crate::activation::{Activation, ActivationError};
use crate::bundle::Bundle;
use crate::error::Cause;
use crate::layer::Layer;
use crate::transport::{Flow, Tag};

impl<L: Layer> Worker<'_, L> {
    fn tag(flow: Flow, micro_batch: MicroBatchId) -> Tag {
        Tag { flow, micro_batch }
    }

    /// A message for `route` did not fit: an error naming the route and the skips.
    fn skip_failure(&self, route: SkipRoute, what: &str, error: ActivationError) -> Failure {
        Failure::Cause(Cause::Skip {
            names: self
                .ctx
                .skips
                .names(route)
                .into_iter()
                .map(String::from)
                .collect(),
            stash: route.stash,
            pop: route.pop,
            what: what.to_string(),
            error,
        })
    }

    /// `input` with the skips received for `mb` added (a bundle's parts), on a popping stage.
    pub(super) fn with_skips(
        &mut self,
        mb: MicroBatchId,
        input: Activation,
    ) -> Result<Activation, Failure> {
        let routes = self.ctx.skips.popped_on(self.id().stage);
        self.add_received(mb, input, routes, Flow::Skip, "this stage's input")
    }

    /// The gradient of this stage's output for `mb`: the one from downstream with the skips'
    /// gradients from the stages that popped them added, on a stashing stage.
    pub(super) fn with_skip_grads(
        &mut self,
        mb: MicroBatchId,
        grad: Activation,
    ) -> Result<Activation, Failure> {
        let routes = self.ctx.skips.stashed_on(self.id().stage);
        let what = "the gradient from downstream";
        self.add_received(mb, grad, routes, Flow::SkipGradient, what)
    }

    /// `value` (`what`) with the bundles received on `flow` of each of `routes` for `mb` added.
    fn add_received(
        &mut self,
        mb: MicroBatchId,
        value: Activation,
        routes: Vec<SkipRoute>,
        flow: fn(SkipRoute) -> Flow,
        what: &str,
    ) -> Result<Activation, Failure> {
        let Some(&first) = routes.first() else {
            return Ok(value);
        };
        let mut bundle = value
            .bundle()
            .map_err(|e| self.skip_failure(first, &format!("{what} is no bundle"), e))?;
        for route in routes {
            let received = self
                .received
                .remove(&Self::tag(flow(route), mb))
                .expect("validated: received before the compute that needs it")
                .to_device(&self.state.device)
                .bundle()
                .map_err(|e| self.skip_failure(route, "received no bundle", e))?;
            bundle = bundle.with_parts(received);
        }
        Ok(bundle.into())
    }

    /// Queues this stage's (plain) output of `mb` for sending: its skips to the stages that pop
    /// them, the rest downstream.
    pub(super) fn queue_output(
        &mut self,
        mb: MicroBatchId,
        output: Activation,
    ) -> Result<(), Failure> {
        let routes = self.ctx.skips.stashed_on(self.id().stage);
        let rest = self.queue_parts(mb, output, routes, Flow::Skip, true)?;
        self.outgoing.insert(Self::tag(Flow::Activation, mb), rest);
        Ok(())
    }

    /// Drops what [`queue_output`](Self::queue_output) queued for `mb` (a re-materialized
    /// forward's output: it was sent already).
    pub(super) fn drop_queued_output(&mut self, mb: MicroBatchId) {
        self.outgoing.remove(&Self::tag(Flow::Activation, mb));
        for route in self.ctx.skips.stashed_on(self.id().stage) {
            self.outgoing.remove(&Self::tag(Flow::Skip(route), mb));
        }
    }

    /// Queues the input gradient of `mb` for sending: the popped skips' parts straight back to
    /// the stages that stashed them (only differentiable skips have one), the rest upstream.
    pub(super) fn queue_input_grad(
        &mut self,
        mb: MicroBatchId,
        grad: Activation,
    ) -> Result<(), Failure> {
        let routes = self.ctx.skips.popped_on(self.id().stage);
        let rest = self.queue_parts(mb, grad, routes, Flow::SkipGradient, false)?;
        self.outgoing.insert(Self::tag(Flow::Gradient, mb), rest);
        Ok(())
    }

    /// Takes each route's skips out of `value` and queues them on `flow`; returns the rest. A
    /// skip missing from `value` is an error when `required`.
    fn queue_parts(
        &mut self,
        mb: MicroBatchId,
        value: Activation,
        routes: Vec<SkipRoute>,
        flow: fn(SkipRoute) -> Flow,
        required: bool,
    ) -> Result<Activation, Failure> {
        let Some(&first) = routes.first() else {
            return Ok(value);
        };
        let mut bundle = value
            .bundle()
            .map_err(|e| self.skip_failure(first, "this stage's result is no bundle", e))?;
        for route in routes {
            let mut parts = Bundle::new();
            for name in self.ctx.skips.names(route) {
                match bundle.take_part(name) {
                    Ok(part) => parts = parts.with_part(part),
                    Err(e) if required => {
                        return Err(self.skip_failure(route, "the stashing layer left it out", e));
                    }
                    Err(_) => {}
                }
            }
            self.outgoing
                .insert(Self::tag(flow(route), mb), parts.into());
        }
        Ok(bundle.into())
    }
}
