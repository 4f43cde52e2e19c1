//! Transport: moves activations downstream and input gradients upstream between neighbouring
//! stages of one replica, and skips straight from the stage that stashes them to the one that
//! pops them (their gradients straight back), on flows of their own.
//!
//! Messages are tagged with (flow, micro-batch); a receive asks for one tag and buffers whatever
//! else arrives first, so an out-of-order arrival is never mistaken for another micro-batch.
//! [`ChannelTransport`] is the in-process implementation; a multi-process one (MPI) implements
//! the same trait.

use std::collections::HashMap;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, select, unbounded};

use pipetrain_schedules::{SkipRoute, StageId};

use crate::comm::abort::Abort;
use crate::error::EngineError;
pub use crate::ids::{Flow, Tag};
use crate::model::activation::Activation;

/// One worker's link to its neighbouring stages (and the stages it exchanges skips with).
pub trait Transport: Send {
    /// Sends `payload` (a plain, detached tensor) to the stage `tag.flow` points to. Never
    /// blocks for long: the receiver buffers.
    fn send(&mut self, tag: Tag, payload: Activation) -> Result<(), EngineError>;
    /// Blocks until the message tagged `tag` arrives, or the step is aborted.
    fn recv(&mut self, tag: Tag) -> Result<Activation, EngineError>;
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

/// In-process transport over unbounded crossbeam channels: one channel per direction between
/// neighbours and between the two stages of each skip route, so a skip never passes through the
/// stages between.
pub struct ChannelTransport {
    me: StageId,
    /// To each stage this one sends to.
    links: HashMap<StageId, Link>,
    /// From each stage this one receives from.
    inboxes: HashMap<StageId, Inbox>,
    pending: HashMap<Tag, Activation>,
    abort: Arc<Abort>,
}

impl ChannelTransport {
    /// Endpoints for one replica's pipeline of `stages` stages, indexed by stage: links between
    /// neighbours, and between the stages of each of `skips`.
    pub fn pipeline(
        stages: usize,
        skips: &[SkipRoute],
        abort: &Arc<Abort>,
    ) -> Vec<ChannelTransport> {
        let mut ends: Vec<ChannelTransport> = StageId::range(stages)
            .map(|me| ChannelTransport {
                me,
                links: HashMap::new(),
                inboxes: HashMap::new(),
                pending: HashMap::new(),
                abort: Arc::clone(abort),
            })
            .collect();
        let neighbours = (1..stages).map(|s| (s - 1, s));
        let skips = skips.iter().map(|r| (r.stash.index(), r.pop.index()));
        for (a, b) in neighbours.chain(skips) {
            for (from, to) in [(a, b), (b, a)] {
                if ends[from].links.contains_key(&StageId::from(to)) {
                    continue; // a skip between neighbours shares their channels
                }
                let (tx, rx) = unbounded();
                let (peer_of_sender, peer_of_receiver) = (StageId::from(to), StageId::from(from));
                ends[from].links.insert(
                    peer_of_sender,
                    Link {
                        peer: peer_of_sender,
                        tx,
                    },
                );
                ends[to].inboxes.insert(
                    peer_of_receiver,
                    Inbox {
                        peer: peer_of_receiver,
                        rx,
                    },
                );
            }
        }
        ends
    }
}

impl Transport for ChannelTransport {
    fn send(&mut self, tag: Tag, payload: Activation) -> Result<(), EngineError> {
        let to = tag.flow.destination(self.me);
        let link = self
            .links
            .get(&to)
            .expect("validated plans only send to linked stages");
        link.tx.send(Message { tag, payload }).map_err(|_| {
            if self.abort.is_aborted() {
                EngineError::Aborted
            } else {
                EngineError::HungUp {
                    peer: link.peer,
                    tag,
                }
            }
        })
    }

    fn recv(&mut self, tag: Tag) -> Result<Activation, EngineError> {
        if let Some(payload) = self.pending.remove(&tag) {
            return Ok(payload);
        }
        let from = tag.flow.source(self.me);
        let inbox = self
            .inboxes
            .get(&from)
            .expect("validated plans only receive from linked stages");
        loop {
            select! {
                recv(inbox.rx) -> message => match message {
                    Ok(m) if m.tag == tag => return Ok(m.payload),
                    Ok(m) => {
                        if self.pending.insert(m.tag, m.payload).is_some() {
                            return Err(EngineError::Duplicate { peer: inbox.peer, tag: m.tag });
                        }
                    }
                    Err(_) if self.abort.is_aborted() => return Err(EngineError::Aborted),
                    Err(_) => return Err(EngineError::HungUp { peer: inbox.peer, tag }),
                },
                recv(self.abort.watch()) -> _ => return Err(EngineError::Aborted),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::prelude::*;

    use super::*;
    use crate::error::EngineError;
    use pipetrain_schedules::MicroBatchId;

    fn tag(flow: Flow) -> Tag {
        Tag {
            flow,
            micro_batch: MicroBatchId(0),
        }
    }

    #[test]
    fn a_skip_goes_straight_to_its_popping_stage_and_its_gradient_straight_back() {
        let abort = Arc::new(Abort::new());
        let route: SkipRoute = "0:3".parse().unwrap();
        let mut ends = ChannelTransport::pipeline(4, &[route], &abort);
        // Only the pair is linked beyond the neighbours.
        assert!(ends[0].links.contains_key(&StageId(3)));
        assert!(ends[3].inboxes.contains_key(&StageId(0)));
        assert!(!ends[1].inboxes.contains_key(&StageId(3)));
        let x = Tensor::<2>::ones([2, 3], &Device::flex());
        ends[0]
            .send(tag(Flow::Skip(route)), x.clone().into())
            .unwrap();
        let got = ends[3].recv(tag(Flow::Skip(route))).unwrap();
        assert_eq!(got.dims(), vec![2, 3]);
        ends[3]
            .send(tag(Flow::SkipGradient(route)), x.into())
            .unwrap();
        assert!(ends[0].recv(tag(Flow::SkipGradient(route))).is_ok());
        // Nothing reached the stages between.
        for between in &ends[1..3] {
            assert!(between.inboxes.values().all(|inbox| inbox.rx.is_empty()));
        }
    }

    #[test]
    fn a_stage_waiting_for_a_skip_wakes_when_the_step_aborts() {
        let abort = Arc::new(Abort::new());
        let route: SkipRoute = "0:2".parse().unwrap();
        let mut ends = ChannelTransport::pipeline(3, &[route], &abort);
        let waiter = std::thread::spawn({
            let mut stage0 = ends.remove(0);
            move || stage0.recv(tag(Flow::SkipGradient(route)))
        });
        abort.fail(EngineError::Poisoned);
        assert!(matches!(waiter.join().unwrap(), Err(EngineError::Aborted)));
    }
}
