//! [`MpiTransport`]: activations and input gradients between neighbouring stages of one
//! replica, over MPI (or locally, when the neighbour runs in the same process).

use burn::prelude::*;
use pipetrain_schedules::{StageId, WorkerId};

use super::comm::Comm;
use super::inbox::{Inbox, Wait};
use super::launch::Layout;
use super::wire::{Envelope, Route, activation_bytes, activation_from, channel};
use crate::activation::Activation;
use crate::transport::{Flow, Tag, Transport, TransportError};

/// One worker's transport: messages keyed by (flow, micro-batch), as the in-process one.
pub struct MpiTransport {
    me: WorkerId,
    epoch: u32,
    comm: Comm,
    layout: Layout,
    inbox: Inbox,
    device: Device,
}

impl MpiTransport {
    pub(crate) fn new(me: WorkerId, epoch: u32, comm: Comm, layout: Layout, inbox: Inbox) -> Self {
        Self {
            me,
            epoch,
            comm,
            layout,
            inbox,
            device: Device::default(),
        }
    }

    /// The neighbour a tag's flow goes to (sending) or comes from (receiving the other flow).
    fn neighbour(&self, flow: Flow) -> WorkerId {
        let s = self.me.stage.index();
        let stage = match flow {
            Flow::Activation => s + 1,
            Flow::Gradient => s
                .checked_sub(1)
                .expect("validated plans send to neighbours"),
        };
        WorkerId::new(self.me.replica, StageId::from(stage))
    }

    /// The neighbour messages of `flow` come from.
    fn sender(&self, flow: Flow) -> StageId {
        let s = self.me.stage.index();
        StageId::from(match flow {
            Flow::Activation => s.saturating_sub(1),
            Flow::Gradient => s + 1,
        })
    }
}

fn flow_key(flow: Flow) -> u32 {
    match flow {
        Flow::Activation => 0,
        Flow::Gradient => 1,
    }
}

impl Transport for MpiTransport {
    fn send(&mut self, tag: Tag, payload: Activation) -> Result<(), TransportError> {
        let peer = self.neighbour(tag.flow);
        let envelope = Envelope {
            route: Route {
                to: peer.rank(self.layout.stages()) as u32,
                channel: channel::TRANSPORT,
                epoch: self.epoch,
            },
            a: flow_key(tag.flow),
            b: tag.micro_batch.index() as u32,
            from: self.layout.rank() as u32,
            body: activation_bytes(payload).into(),
        };
        self.comm
            .send(self.layout.process_of(peer), envelope)
            .map_err(|_| TransportError::Disconnected {
                peer: peer.stage,
                tag,
            })
    }

    fn recv(&mut self, tag: Tag) -> Result<Activation, TransportError> {
        let peer = self.sender(tag.flow);
        let key = (flow_key(tag.flow), tag.micro_batch.index() as u32);
        match self.inbox.take(key.0, key.1) {
            Ok(envelope) => activation_from(envelope.body.as_bytes(), &self.device)
                .map_err(|_| TransportError::Disconnected { peer, tag }),
            Err(Wait::Aborted) => Err(TransportError::Aborted),
            Err(Wait::Timeout) => Err(TransportError::Timeout {
                peer,
                rank: self.layout.process_of(WorkerId::new(self.me.replica, peer)),
                tag,
                timeout: self.inbox.timeout(),
            }),
            Err(Wait::Closed) => Err(TransportError::Disconnected { peer, tag }),
        }
    }
}
