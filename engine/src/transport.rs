//! Transport: moves activations downstream and input gradients upstream between neighbouring
//! stages of one replica.
//!
//! Messages are tagged with (flow, micro-batch); a receive asks for one tag and buffers whatever
//! else arrives first, so an out-of-order arrival is never mistaken for another micro-batch.
//! [`ChannelTransport`] is the in-process implementation; a multi-process one (MPI) implements
//! the same trait.

use std::collections::HashMap;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, select, unbounded};
use pipetrain_schedules::{ActionKind, MicroBatchId, StageId};

use crate::abort::Abort;
use crate::activation::Activation;

/// Which way a tensor flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// A forward activation, from stage s to s + 1.
    Activation,
    /// An input gradient, from stage s to s − 1.
    Gradient,
}

impl Flow {
    /// The flow a transfer action moves: activations for `SF`/`RF`, gradients for `SB`/`RB`.
    ///
    /// # Panics
    /// On an action kind that is not a transfer.
    pub fn of(kind: ActionKind) -> Flow {
        match kind {
            ActionKind::SendActivation | ActionKind::RecvActivation => Flow::Activation,
            ActionKind::SendGradient | ActionKind::RecvGradient => Flow::Gradient,
            other => panic!("{other} moves no tensor between stages"),
        }
    }
}

/// The tag of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// Activation or gradient.
    pub flow: Flow,
    /// The micro-batch it belongs to.
    pub micro_batch: MicroBatchId,
}

/// Why a transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Another worker failed: this step is over.
    #[error("step aborted by another worker's failure")]
    Aborted,
    /// The neighbour is gone without an error of its own.
    #[error("{peer} hung up while {tag:?} was awaited")]
    Disconnected {
        /// The neighbour.
        peer: StageId,
        /// What was awaited or sent.
        tag: Tag,
    },
    /// Nothing came from the neighbour within the communication timeout (multi-process runs).
    #[error(
        "{peer} (MPI rank {rank}) sent nothing for {timeout:?} while {tag:?} was awaited; it may be dead or stuck \
         (raise --comm-timeout if its steps are that slow)"
    )]
    Timeout {
        /// The neighbour.
        peer: StageId,
        /// The neighbour's process.
        rank: usize,
        /// What was awaited.
        tag: Tag,
        /// The communication timeout.
        timeout: std::time::Duration,
    },
    /// A neighbour sent the same tag twice.
    #[error("{peer} sent {tag:?} twice")]
    Duplicate {
        /// The neighbour.
        peer: StageId,
        /// The repeated tag.
        tag: Tag,
    },
}

/// One worker's link to its neighbouring stages.
pub trait Transport: Send {
    /// Sends `payload` (a plain, detached tensor) to the neighbour `tag.flow` points to. Never
    /// blocks for long: the receiver buffers.
    fn send(&mut self, tag: Tag, payload: Activation) -> Result<(), TransportError>;
    /// Blocks until the message tagged `tag` arrives, or the step is aborted.
    fn recv(&mut self, tag: Tag) -> Result<Activation, TransportError>;
}

struct Message {
    tag: Tag,
    payload: Activation,
}

struct Link {
    peer: StageId,
    tx: Sender<Message>,
}

struct Inbox {
    peer: StageId,
    rx: Receiver<Message>,
}

/// In-process transport over unbounded crossbeam channels.
pub struct ChannelTransport {
    downstream: Option<Link>,
    upstream: Option<Link>,
    from_upstream: Option<Inbox>,
    from_downstream: Option<Inbox>,
    pending: HashMap<Tag, Activation>,
    abort: Arc<Abort>,
}

impl ChannelTransport {
    /// Endpoints for one replica's pipeline of `stages` stages, indexed by stage.
    pub fn pipeline(stages: usize, abort: &Arc<Abort>) -> Vec<ChannelTransport> {
        let mut ends: Vec<ChannelTransport> = (0..stages)
            .map(|_| ChannelTransport {
                downstream: None,
                upstream: None,
                from_upstream: None,
                from_downstream: None,
                pending: HashMap::new(),
                abort: Arc::clone(abort),
            })
            .collect();
        for s in 1..stages {
            let (up, down) = (StageId::from(s - 1), StageId::from(s));
            let (act_tx, act_rx) = unbounded();
            ends[s - 1].downstream = Some(Link {
                peer: down,
                tx: act_tx,
            });
            ends[s].from_upstream = Some(Inbox {
                peer: up,
                rx: act_rx,
            });
            let (grad_tx, grad_rx) = unbounded();
            ends[s].upstream = Some(Link {
                peer: up,
                tx: grad_tx,
            });
            ends[s - 1].from_downstream = Some(Inbox {
                peer: down,
                rx: grad_rx,
            });
        }
        ends
    }
}

impl Transport for ChannelTransport {
    fn send(&mut self, tag: Tag, payload: Activation) -> Result<(), TransportError> {
        let link = match tag.flow {
            Flow::Activation => self.downstream.as_ref(),
            Flow::Gradient => self.upstream.as_ref(),
        };
        let link = link.expect("validated plans only send to existing neighbours");
        link.tx.send(Message { tag, payload }).map_err(|_| {
            if self.abort.is_aborted() {
                TransportError::Aborted
            } else {
                TransportError::Disconnected {
                    peer: link.peer,
                    tag,
                }
            }
        })
    }

    fn recv(&mut self, tag: Tag) -> Result<Activation, TransportError> {
        if let Some(payload) = self.pending.remove(&tag) {
            return Ok(payload);
        }
        let inbox = match tag.flow {
            Flow::Activation => self.from_upstream.as_ref(),
            Flow::Gradient => self.from_downstream.as_ref(),
        };
        let inbox = inbox.expect("validated plans only receive from existing neighbours");
        loop {
            select! {
                recv(inbox.rx) -> message => match message {
                    Ok(m) if m.tag == tag => return Ok(m.payload),
                    Ok(m) => {
                        if self.pending.insert(m.tag, m.payload).is_some() {
                            return Err(TransportError::Duplicate { peer: inbox.peer, tag: m.tag });
                        }
                    }
                    Err(_) if self.abort.is_aborted() => return Err(TransportError::Aborted),
                    Err(_) => return Err(TransportError::Disconnected { peer: inbox.peer, tag }),
                },
                recv(self.abort.watch()) -> _ => return Err(TransportError::Aborted),
            }
        }
    }
}
