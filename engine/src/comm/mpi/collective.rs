//! [`MpiCollective`]: a stage group's (or a tie pair's) collective over MPI, with the
//! in-process collective's rank-order sums.
//!
//! Every sum is taken in rank order (`c₀ + c₁ + …`) by one member, exactly as
//! [`ChannelCollective`](crate::ChannelCollective) does — not with `MPI_Allreduce`, whose
//! summation order is the library's — so a run over MPI ends with the same bits as the same run
//! in one process.
//!
//! The tensor methods (what a step's gradient all-reduce, ZeRO-1 and the buffer broadcast call)
//! move each tensor's values as one `f32` message, straight from the `Vec<f32>` its data comes out
//! as and into the one a summed tensor is made from: tensor `i` goes to its owner, which adds
//! the contributions as they come and sends the sum on to the others at once, while it waits for
//! the next tensor's. A 2-replica all-reduce copies each value only inside MPI (and once more on
//! the owner, for the sum it keeps). The flat primitives go through [`Exchange`].

use std::ops::Range;
use std::sync::Arc;

use burn::prelude::*;

use super::comm::Comm;
use super::inbox::{Inbox, Wait};
use super::wire::{Body, Envelope, Route};
use crate::comm::collective::{
    Collective, Exchange, Spread, all_gather, reduce_scatter, values as tensor_values,
};
use crate::error::EngineError;

/// One member of a group: its rank, and each member's (process, worker rank in the world).
pub struct MpiCollective {
    rank: usize,
    members: Vec<(usize, u32)>,
    channel: u32,
    epoch: u32,
    comm: Comm,
    inbox: Inbox,
    /// Calls made so far: every member makes the same calls in the same order, so the count
    /// keys each call's messages.
    calls: u32,
}

impl MpiCollective {
    pub(crate) fn new(
        rank: usize,
        members: Vec<(usize, u32)>,
        channel: u32,
        epoch: u32,
        comm: Comm,
        inbox: Inbox,
    ) -> Self {
        Self {
            rank,
            members,
            channel,
            epoch,
            comm,
            inbox,
            calls: 0,
        }
    }

    /// Sends `values` to member `peer`, keyed (`call`, `b`).
    fn send(&self, peer: usize, key: (u32, u32), values: Vec<f32>) -> Result<(), EngineError> {
        self.send_body(peer, key, Body::Values(values))
    }

    /// Sends `body` to member `peer`, keyed (`call`, `b`).
    fn send_body(&self, peer: usize, (call, b): (u32, u32), body: Body) -> Result<(), EngineError> {
        let (process, worker) = self.members[peer];
        let envelope = Envelope {
            route: Route {
                to: worker,
                channel: self.channel,
                epoch: self.epoch,
            },
            a: call,
            b,
            from: self.comm.identity().rank as u32,
            body,
        };
        self.comm
            .send(process, envelope)
            .map_err(|_| EngineError::MemberHungUp {
                peer,
                size: self.size(),
            })
    }

    /// The values keyed (`call`, `b`) from member `peer`, which must be `expected` long.
    fn recv(
        &mut self,
        peer: usize,
        (call, b): (u32, u32),
        expected: usize,
    ) -> Result<Vec<f32>, EngineError> {
        let (size, process) = (self.size(), self.members[peer].0);
        let envelope = self.inbox.take(call, b).map_err(|w| match w {
            Wait::Aborted => EngineError::Aborted,
            Wait::Timeout => EngineError::CollectiveTimeout {
                peer,
                rank: process,
                size,
                timeout: self.inbox.timeout(),
            },
            Wait::Closed => EngineError::MemberHungUp { peer, size },
        })?;
        let values = match envelope.body {
            Body::Values(values) => values,
            // From a member in this process: the sender's buffer itself, if it let go of it.
            Body::Shared(values) => take_back(values),
            Body::Bytes(bytes) => {
                return Err(EngineError::MemberMismatch {
                    peer,
                    rank: self.rank,
                    expected,
                    got: bytes.len() / 4,
                });
            }
        };
        if values.len() != expected {
            return Err(EngineError::MemberMismatch {
                peer,
                rank: self.rank,
                expected,
                got: values.len(),
            });
        }
        Ok(values)
    }

    /// The key of tensor `i`'s message from member `member` in call `call`.
    fn key(&self, call: u32, i: usize, member: usize) -> (u32, u32) {
        (call, (i * self.size() + member) as u32)
    }

    /// Sends tensor `i`'s `values` (owned here) to every other member in call `call`, as one
    /// buffer they all share; [`collect`](Self::collect) takes it back.
    fn share(&self, call: u32, i: usize, values: Vec<f32>) -> Result<Arc<Vec<f32>>, EngineError> {
        let values = Arc::new(values);
        for peer in (0..self.size()).filter(|&p| p != self.rank) {
            self.send_body(
                peer,
                self.key(call, i, self.rank),
                Body::Shared(Arc::clone(&values)),
            )?;
        }
        Ok(values)
    }

    /// Receives every tensor another member owns (call `call`) into `out`, then takes back the
    /// buffers this member [`share`](Self::share)d.
    fn collect(
        &mut self,
        call: u32,
        owners: &[usize],
        lens: &[usize],
        out: &mut [Option<Vec<f32>>],
        shared: Vec<(usize, Arc<Vec<f32>>)>,
    ) -> Result<(), EngineError> {
        let me = self.rank;
        for i in (0..out.len()).filter(|&i| owners[i] != me) {
            let key = self.key(call, i, owners[i]);
            out[i] = Some(self.recv(owners[i], key, lens[i])?);
        }
        for (i, values) in shared {
            out[i] = Some(take_back(values));
        }
        Ok(())
    }

    /// Tensor `i` summed over the members in rank order at member `owners[i]`, which gets
    /// `Some`; the others get `None`. With `share`, each owner sends every sum to the other
    /// members as soon as it has it, and every member gets every sum.
    fn sum_at_owners(
        &mut self,
        values: Vec<Vec<f32>>,
        owners: &[usize],
        share: bool,
    ) -> Result<Vec<Option<Vec<f32>>>, EngineError> {
        let (me, size) = (self.rank, self.size());
        let lens: Vec<usize> = values.iter().map(Vec::len).collect();
        // Two calls: the contributions, then the shared sums.
        let (reduce, gather) = (self.calls + 1, self.calls + 2);
        self.calls += 2;
        let mut out: Vec<Option<Vec<f32>>> = vec![None; values.len()];
        let mut shared = Vec::new();
        for (i, v) in values.into_iter().enumerate() {
            if owners[i] == me {
                out[i] = Some(v);
            } else {
                self.send(owners[i], self.key(reduce, i, me), v)?;
            }
        }
        for i in (0..out.len()).filter(|&i| owners[i] == me) {
            let mut own = out[i].take();
            let mut sum: Option<Vec<f32>> = None;
            for member in 0..size {
                let c = match own.take_if(|_| member == me) {
                    Some(c) => c,
                    None => self.recv(member, self.key(reduce, i, member), lens[i])?,
                };
                match sum.as_mut() {
                    None => sum = Some(c),
                    Some(acc) => acc.iter_mut().zip(&c).for_each(|(a, c)| *a += c),
                }
            }
            let sum = sum.expect("at least one member");
            if share {
                shared.push((i, self.share(gather, i, sum)?));
            } else {
                out[i] = Some(sum);
            }
        }
        if share {
            self.collect(gather, owners, &lens, &mut out, shared)?;
        }
        Ok(out)
    }
}

/// The buffer of a shared send: its own once every send let go of it, else a copy (a send
/// still in flight is not waited for).
fn take_back(values: Arc<Vec<f32>>) -> Vec<f32> {
    Arc::try_unwrap(values).unwrap_or_else(|v| v.to_vec())
}

/// A rank-1 tensor of `values` on `device`.
fn tensor(values: Vec<f32>, device: &Device) -> Tensor<1> {
    let len = values.len();
    Tensor::from_data(TensorData::new(values, [len]), device)
}

impl Collective for MpiCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    fn reduce_scatter(
        &mut self,
        data: &[f32],
        bounds: &[Range<usize>],
    ) -> Result<Vec<f32>, EngineError> {
        self.calls += 1;
        reduce_scatter(self, data, bounds)
    }

    fn all_gather(&mut self, data: &mut [f32], bounds: &[Range<usize>]) -> Result<(), EngineError> {
        self.calls += 1;
        all_gather(self, data, bounds)
    }

    fn reduce_tensors(
        &mut self,
        tensors: Vec<Tensor<1>>,
        owners: &[usize],
    ) -> Result<Vec<Option<Tensor<1>>>, EngineError> {
        let device = tensors.first().map(|t| t.device()).unwrap_or_default();
        let values = tensors.into_iter().map(tensor_values).collect();
        let sums = self.sum_at_owners(values, owners, false)?;
        Ok(sums
            .into_iter()
            .map(|v| v.map(|v| tensor(v, &device)))
            .collect())
    }

    fn broadcast_tensors(
        &mut self,
        tensors: Vec<Option<Tensor<1>>>,
        owners: &[usize],
        lens: &[usize],
        device: &Device,
    ) -> Result<Vec<Tensor<1>>, EngineError> {
        let me = self.rank;
        self.calls += 1;
        let call = self.calls;
        let mut out: Vec<Option<Vec<f32>>> = vec![None; lens.len()];
        let mut shared = Vec::new();
        for (i, t) in tensors.into_iter().enumerate() {
            if owners[i] != me {
                continue;
            }
            let values = tensor_values(t.expect("an owner passes its tensors"));
            shared.push((i, self.share(call, i, values)?));
        }
        self.collect(call, owners, lens, &mut out, shared)?;
        Ok(out
            .into_iter()
            .map(|v| tensor(v.expect("every tensor placed"), device))
            .collect())
    }

    fn all_reduce_tensors(
        &mut self,
        tensors: Vec<Tensor<1>>,
    ) -> Result<Vec<Tensor<1>>, EngineError> {
        let Some(spread) = Spread::of(&tensors, self.size()) else {
            return Ok(tensors);
        };
        let values = tensors.into_iter().map(tensor_values).collect();
        let sums = self.sum_at_owners(values, &spread.owners, true)?;
        Ok(sums
            .into_iter()
            .map(|v| tensor(v.expect("every sum shared"), &spread.device))
            .collect())
    }
}

impl Exchange for MpiCollective {
    fn me(&self) -> usize {
        self.rank
    }

    fn members(&self) -> usize {
        self.members.len()
    }

    fn send_values(&mut self, peer: usize, values: &[f32]) -> Result<(), EngineError> {
        self.send(peer, (self.calls, self.rank as u32), values.to_vec())
    }

    fn recv_values(&mut self, peer: usize, expected: usize) -> Result<Vec<f32>, EngineError> {
        self.recv(peer, (self.calls, peer as u32), expected)
    }
}
