//! [`ChannelCollective`]: the in-process collective, over crossbeam channels.

use std::ops::Range;
use std::sync::Arc;

use burn::prelude::*;
use crossbeam_channel::{Receiver, Sender, select, unbounded};

use super::exchange::{Exchange, all_gather, reduce_scatter};
use super::group::Collective;
use crate::comm::abort::Abort;
use crate::device::handoff::Handoff;
use crate::error::EngineError;

/// In-process collective over crossbeam channels: one FIFO channel per ordered pair of members,
/// so each phase matches its messages by sender without tags. Every wait also watches the step's
/// [`Abort`].
pub struct ChannelCollective {
    rank: usize,
    to: Vec<Sender<Message>>,
    from: Vec<Receiver<Message>>,
    abort: Arc<Abort>,
    /// How tensors cross to the other members' threads on a GPU.
    handoff: Handoff,
}

/// What members send each other: values, or tensor handles (in one process a tensor is shared,
/// not copied).
enum Message {
    Values(Vec<f32>),
    Tensors(Vec<Tensor<1>>),
}

impl ChannelCollective {
    /// The `size` members of one group, indexed by rank, handing tensors over as
    /// [`Handoff::Host`] (see [`group_with`](Self::group_with)).
    pub fn group(size: usize, abort: &Arc<Abort>) -> Vec<ChannelCollective> {
        Self::group_with(size, abort, Handoff::Host)
    }

    /// The `size` members of one group, indexed by rank, handing tensors to each other's threads
    /// as `handoff` says.
    pub fn group_with(size: usize, abort: &Arc<Abort>, handoff: Handoff) -> Vec<ChannelCollective> {
        // links[i][j]: member i → member j.
        type Link = (Sender<Message>, Receiver<Message>);
        let links: Vec<Vec<Link>> = (0..size)
            .map(|_| (0..size).map(|_| unbounded()).collect())
            .collect();
        (0..size)
            .map(|rank| ChannelCollective {
                rank,
                to: (0..size).map(|j| links[rank][j].0.clone()).collect(),
                from: (0..size).map(|i| links[i][rank].1.clone()).collect(),
                abort: Arc::clone(abort),
                handoff,
            })
            .collect()
    }

    fn send(&self, peer: usize, values: Vec<f32>) -> Result<(), EngineError> {
        self.to[peer]
            .send(Message::Values(values))
            .map_err(|_| self.hung_up(peer))
    }

    fn send_tensors(&self, peer: usize, tensors: Vec<Tensor<1>>) -> Result<(), EngineError> {
        let tensors = tensors
            .into_iter()
            .map(|t| self.handoff.outgoing(t))
            .collect();
        self.to[peer]
            .send(Message::Tensors(tensors))
            .map_err(|_| self.hung_up(peer))
    }

    fn recv_message(&self, peer: usize) -> Result<Message, EngineError> {
        select! {
            recv(self.from[peer]) -> message => message.map_err(|_| self.hung_up(peer)),
            recv(self.abort.watch()) -> _ => Err(EngineError::Aborted),
        }
    }

    fn mismatch(&self, peer: usize, expected: usize, got: usize) -> EngineError {
        EngineError::MemberMismatch {
            peer,
            rank: self.rank,
            expected,
            got,
        }
    }

    fn recv(&self, peer: usize, expected: usize) -> Result<Vec<f32>, EngineError> {
        match self.recv_message(peer)? {
            Message::Values(values) if values.len() == expected => Ok(values),
            Message::Values(values) => Err(self.mismatch(peer, expected, values.len())),
            Message::Tensors(t) => Err(self.mismatch(peer, expected, t.len())),
        }
    }

    /// `lens.len()` tensors of the given lengths from `peer`.
    fn recv_tensors(&self, peer: usize, lens: &[usize]) -> Result<Vec<Tensor<1>>, EngineError> {
        match self.recv_message(peer)? {
            Message::Tensors(t)
                if t.len() == lens.len() && t.iter().zip(lens).all(|(t, &n)| t.dims()[0] == n) =>
            {
                Ok(t)
            }
            Message::Tensors(t) => {
                Err(self.mismatch(peer, lens.iter().sum(), t.iter().map(|t| t.dims()[0]).sum()))
            }
            Message::Values(v) => Err(self.mismatch(peer, lens.iter().sum(), v.len())),
        }
    }

    fn hung_up(&self, peer: usize) -> EngineError {
        if self.abort.is_aborted() {
            EngineError::Aborted
        } else {
            EngineError::MemberHungUp {
                peer,
                size: self.to.len(),
            }
        }
    }
}

impl Collective for ChannelCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    /// Passes tensor handles: each owner adds the members' tensors in rank order, with no copy
    /// on the way on a CPU. On a GPU every peer's tensor is copied as [`Handoff`] says, the first
    /// one too: the sum starts in that first buffer and `+` may write into it in place, and a
    /// buffer of the peer's would then be written on this thread's stream and broadcast back to
    /// the peer, whose stream does not wait for this one (cubecl orders streams by where a
    /// buffer was made, not where it was last written).
    fn reduce_tensors(
        &mut self,
        tensors: Vec<Tensor<1>>,
        owners: &[usize],
    ) -> Result<Vec<Option<Tensor<1>>>, EngineError> {
        let me = self.rank;
        let mine: Vec<usize> = (0..owners.len()).filter(|&i| owners[i] == me).collect();
        let lens: Vec<usize> = mine.iter().map(|&i| tensors[i].dims()[0]).collect();
        for peer in (0..self.size()).filter(|&p| p != me) {
            let theirs = (0..owners.len())
                .filter(|&i| owners[i] == peer)
                .map(|i| tensors[i].clone())
                .collect();
            self.send_tensors(peer, theirs)?;
        }
        let mut sums: Vec<Option<Tensor<1>>> = vec![None; mine.len()];
        for peer in 0..self.size() {
            let contribution: Vec<Tensor<1>> = if peer == me {
                mine.iter().map(|&i| tensors[i].clone()).collect()
            } else {
                // Every member holds its tensors on its own device: this member's.
                self.recv_tensors(peer, &lens)?
                    .into_iter()
                    .zip(&mine)
                    .map(|(t, &i)| self.handoff.incoming(t, &tensors[i].device()))
                    .collect()
            };
            for (sum, t) in sums.iter_mut().zip(contribution) {
                *sum = Some(match sum.take() {
                    None => t,
                    // The first sum in a buffer of this member's own: both operands stay held
                    // through the add, so it writes into neither (burn's CPU backend reuses an
                    // operand whose only handle it holds). Each owner then holds its own share's
                    // sums (`pipetrain::memory`'s `WorkerMemory::reduced`) whatever its peers'
                    // timing; before, a peer that had already dropped its gradient lent its
                    // buffer, and one replica of 2 read 1.19 of the model on some runs, 0.99 on
                    // others. The same add in the same order: the same bits.
                    Some(s) if peer == 1 => s.clone() + t.clone(),
                    Some(s) => s + t,
                });
            }
        }
        let mut out = vec![None; owners.len()];
        for (i, sum) in mine.into_iter().zip(sums) {
            out[i] = sum;
        }
        Ok(out)
    }

    /// Passes tensor handles: every member ends with the owners' very tensors on a CPU, and with
    /// copies of its own on a GPU (see [`Handoff`]).
    fn broadcast_tensors(
        &mut self,
        tensors: Vec<Option<Tensor<1>>>,
        owners: &[usize],
        lens: &[usize],
        device: &Device,
    ) -> Result<Vec<Tensor<1>>, EngineError> {
        let me = self.rank;
        let mut out = tensors;
        let mine: Vec<Tensor<1>> = (0..owners.len())
            .filter(|&i| owners[i] == me)
            .map(|i| out[i].clone().expect("an owner passes its tensors"))
            .collect();
        for peer in (0..self.size()).filter(|&p| p != me) {
            self.send_tensors(peer, mine.clone())?;
        }
        for peer in (0..self.size()).filter(|&p| p != me) {
            let theirs: Vec<usize> = (0..owners.len()).filter(|&i| owners[i] == peer).collect();
            let their_lens: Vec<usize> = theirs.iter().map(|&i| lens[i]).collect();
            let received = self.recv_tensors(peer, &their_lens)?;
            for (i, t) in theirs.into_iter().zip(received) {
                out[i] = Some(self.handoff.incoming(t, device));
            }
        }
        Ok(out
            .into_iter()
            .map(|t| t.expect("every tensor placed"))
            .collect())
    }

    fn size(&self) -> usize {
        self.to.len()
    }

    fn reduce_scatter(
        &mut self,
        data: &[f32],
        bounds: &[Range<usize>],
    ) -> Result<Vec<f32>, EngineError> {
        reduce_scatter(self, data, bounds)
    }

    fn all_gather(&mut self, data: &mut [f32], bounds: &[Range<usize>]) -> Result<(), EngineError> {
        all_gather(self, data, bounds)
    }
}

impl Exchange for ChannelCollective {
    fn me(&self) -> usize {
        self.rank
    }

    fn members(&self) -> usize {
        self.to.len()
    }

    fn send_values(&mut self, peer: usize, values: &[f32]) -> Result<(), EngineError> {
        self.send(peer, values.to_vec())
    }

    fn recv_values(&mut self, peer: usize, expected: usize) -> Result<Vec<f32>, EngineError> {
        self.recv(peer, expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::sole_holder;

    /// Only the required methods: the tensor methods take their flat-buffer defaults (the path
    /// a multi-process implementation gets).
    struct FlatOnly(ChannelCollective);

    impl Collective for FlatOnly {
        fn rank(&self) -> usize {
            self.0.rank()
        }
        fn size(&self) -> usize {
            self.0.size()
        }
        fn reduce_scatter(
            &mut self,
            data: &[f32],
            bounds: &[Range<usize>],
        ) -> Result<Vec<f32>, EngineError> {
            self.0.reduce_scatter(data, bounds)
        }
        fn all_gather(
            &mut self,
            data: &mut [f32],
            bounds: &[Range<usize>],
        ) -> Result<(), EngineError> {
            self.0.all_gather(data, bounds)
        }
    }

    fn run<C: Collective + 'static>(members: Vec<C>) -> Vec<Vec<Vec<f32>>> {
        let device = Device::flex();
        let handles: Vec<_> = members
            .into_iter()
            .map(|mut c| {
                let device = device.clone();
                std::thread::spawn(move || {
                    let r = c.rank() as f32;
                    let tensors: Vec<Tensor<1>> = [3usize, 1, 4, 2]
                        .iter()
                        .enumerate()
                        .map(|(i, &n)| {
                            let v: Vec<f32> = (0..n)
                                .map(|j| r * 0.1 + i as f32 + j as f32 * 0.01)
                                .collect();
                            Tensor::from_data(TensorData::new(v, [n]), &device)
                        })
                        .collect();
                    c.all_reduce_tensors(tensors)
                        .unwrap()
                        .into_iter()
                        .map(|t| t.into_data().try_to_vec::<f32>().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// Each member's all-reduced tensors under `handoff`, 2 members, every tensor on its own
    /// owner's thread first: then whether each is the only handle of its buffer, read while the
    /// other member still holds all of its own.
    fn sole_after_all_reduce(handoff: Handoff) -> Vec<Option<bool>> {
        let abort = Arc::new(Abort::new());
        let device = Device::flex();
        let handles: Vec<_> = ChannelCollective::group_with(2, &abort, handoff)
            .into_iter()
            .map(|mut c| {
                let device = device.clone();
                std::thread::spawn(move || {
                    let r = c.rank() as f32;
                    let tensors = (0..4)
                        .map(|i| Tensor::<1>::from_floats([r, i as f32, 1.0], &device))
                        .collect();
                    c.all_reduce_tensors(tensors).unwrap()
                })
            })
            .collect();
        let mut members: Vec<Vec<Tensor<1>>> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        let first = std::mem::take(&mut members[0]);
        first.into_iter().map(|t| sole_holder(t).1).collect()
    }

    /// The device hand-off's copy on send (forced on a CPU) leaves no member holding a buffer of
    /// another's: a sum broadcast by its owner reaches the others as copies. Passing handles
    /// (the host hand-off on a CPU), the members share the owners' sums.
    #[test]
    fn the_device_handoff_gives_every_member_buffers_of_its_own() {
        assert_eq!(
            sole_after_all_reduce(Handoff::DeviceOnCpuToo),
            [Some(true); 4],
            "a member's all-reduced tensor shares a buffer with the other member's: the sender did not copy (Handoff::outgoing)"
        );
        assert_eq!(
            sole_after_all_reduce(Handoff::Host),
            [Some(false); 4],
            "on a CPU the host hand-off passes handles"
        );
    }

    #[test]
    fn tensor_all_reduce_by_handles_equals_the_flat_default() {
        for size in [1, 2, 3] {
            let abort = Arc::new(Abort::new());
            let handles = run(ChannelCollective::group(size, &abort));
            let flat = run(ChannelCollective::group(size, &abort)
                .into_iter()
                .map(FlatOnly)
                .collect());
            assert_eq!(handles, flat, "{size} members");
            assert!(handles.iter().all(|h| h == &handles[0]), "members agree");
            // tensor 0 element 0: sum over ranks of 0.1·r
            let expected: f32 = (0..size).map(|r| r as f32 * 0.1).sum();
            assert!((handles[0][0][0] - expected).abs() < 1e-6);
        }
    }
}
