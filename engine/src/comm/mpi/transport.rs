//! [`MpiTransport`]: activations and input gradients between neighbouring stages of one
//! replica, and skips (and their gradients) point to point between the stage that stashes them
//! and the one that pops them, over MPI (or locally, when the peer runs in the same process).

use burn::prelude::*;
use pipetrain_schedules::WorkerId;

use super::comm::Comm;
use super::inbox::{Inbox, Wait};
use super::launch::Placement;
use super::wire::{Envelope, Route, activation_bytes, activation_from, channel};
use crate::comm::transport::{Flow, Tag, Transport};
use crate::error::EngineError;
use crate::model::activation::Activation;

/// One worker's transport: messages keyed by (flow, micro-batch), as the in-process one.
pub struct MpiTransport {
    me: WorkerId,
    epoch: u32,
    comm: Comm,
    placement: Placement,
    inbox: Inbox,
    device: Device,
}

impl MpiTransport {
    pub(crate) fn new(
        me: WorkerId,
        epoch: u32,
        comm: Comm,
        placement: Placement,
        inbox: Inbox,
    ) -> Self {
        Self {
            me,
            epoch,
            comm,
            placement,
            inbox,
            // Host memory: the bytes arrive on the host, and the worker moves what it receives
            // to its own device. Not `Device::default()`: in a build with burn's CUDA backend
            // that is CUDA GPU 0, even for a CPU run.
            device: Device::flex(),
        }
    }

    /// The worker a message of `flow` goes to.
    fn receiver(&self, flow: Flow) -> WorkerId {
        WorkerId::new(self.me.replica, flow.destination(self.me.stage))
    }
}

/// The inbox key of a flow: the receiver tells its messages apart by it. Activations 0,
/// gradients 1; a skip 2 + 2·(the stashing stage), its gradient 3 + 2·(the popping stage) — one
/// key per sender of each kind.
fn flow_key(flow: Flow) -> u32 {
    match flow {
        Flow::Activation => 0,
        Flow::Gradient => 1,
        Flow::Skip(route) => 2 + 2 * route.stash.0,
        Flow::SkipGradient(route) => 3 + 2 * route.pop.0,
    }
}

impl Transport for MpiTransport {
    fn send(&mut self, tag: Tag, payload: Activation) -> Result<(), EngineError> {
        let peer = self.receiver(tag.flow);
        let envelope = Envelope {
            route: Route {
                to: peer.rank(self.placement.stages()) as u32,
                channel: channel::TRANSPORT,
                epoch: self.epoch,
            },
            a: flow_key(tag.flow),
            b: tag.micro_batch.index() as u32,
            from: self.placement.rank() as u32,
            body: activation_bytes(payload).into(),
        };
        self.comm
            .send(self.placement.process_of(peer), envelope)
            .map_err(|_| EngineError::HungUp {
                peer: peer.stage,
                tag,
            })
    }

    fn recv(&mut self, tag: Tag) -> Result<Activation, EngineError> {
        let peer = tag.flow.source(self.me.stage);
        let key = (flow_key(tag.flow), tag.micro_batch.index() as u32);
        match self.inbox.take(key.0, key.1) {
            Ok(envelope) => activation_from(envelope.body.as_bytes(), &self.device)
                .map_err(|_| EngineError::HungUp { peer, tag }),
            Err(Wait::Aborted) => Err(EngineError::Aborted),
            Err(Wait::Timeout) => Err(EngineError::TransportTimeout {
                peer,
                rank: self
                    .placement
                    .process_of(WorkerId::new(self.me.replica, peer)),
                tag,
                timeout: self.inbox.timeout(),
            }),
            Err(Wait::Closed) => Err(EngineError::HungUp { peer, tag }),
        }
    }
}
