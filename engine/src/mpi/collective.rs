//! [`MpiCollective`]: a stage group's (or a tie pair's) collective over MPI, with the
//! in-process collective's rank-order sums.
//!
//! Only the two flat primitives are implemented; the tensor methods take the trait's defaults.
//! `reduce_scatter` sends each member its range and sums the contributions in rank order
//! (`c₀ + c₁ + …`), exactly as [`ChannelCollective`](crate::ChannelCollective) does — not with
//! `MPI_Allreduce`, whose summation order is the library's — so a run over MPI ends with the
//! same bits as the same run in one process.

use std::ops::Range;

use super::comm::Comm;
use super::inbox::{Inbox, Wait};
use super::wire::{Envelope, Route, f32_bytes, f32_values};
use crate::collective::{Collective, CollectiveError, Exchange, all_gather, reduce_scatter};

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

    fn send(&self, peer: usize, values: &[f32]) -> Result<(), CollectiveError> {
        let (process, worker) = self.members[peer];
        let envelope = Envelope {
            route: Route {
                to: worker,
                channel: self.channel,
                epoch: self.epoch,
            },
            a: self.calls,
            b: self.rank as u32,
            from: self.comm.identity().rank as u32,
            body: f32_bytes(values),
        };
        self.comm
            .send(process, envelope)
            .map_err(|_| CollectiveError::Disconnected {
                peer,
                size: self.size(),
            })
    }

    fn recv(&mut self, peer: usize, expected: usize) -> Result<Vec<f32>, CollectiveError> {
        let (size, process) = (self.size(), self.members[peer].0);
        let envelope = self
            .inbox
            .take(self.calls, peer as u32)
            .map_err(|w| match w {
                Wait::Aborted => CollectiveError::Aborted,
                Wait::Timeout => CollectiveError::Timeout {
                    peer,
                    rank: process,
                    size,
                    timeout: self.inbox.timeout(),
                },
                Wait::Closed => CollectiveError::Disconnected { peer, size },
            })?;
        let values = f32_values(&envelope.body).map_err(|_| CollectiveError::Mismatch {
            peer,
            rank: self.rank,
            expected,
            got: envelope.body.len() / 4,
        })?;
        if values.len() != expected {
            return Err(CollectiveError::Mismatch {
                peer,
                rank: self.rank,
                expected,
                got: values.len(),
            });
        }
        Ok(values)
    }
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
    ) -> Result<Vec<f32>, CollectiveError> {
        self.calls += 1;
        reduce_scatter(self, data, bounds)
    }

    fn all_gather(
        &mut self,
        data: &mut [f32],
        bounds: &[Range<usize>],
    ) -> Result<(), CollectiveError> {
        self.calls += 1;
        all_gather(self, data, bounds)
    }
}

impl Exchange for MpiCollective {
    fn me(&self) -> usize {
        self.rank
    }

    fn members(&self) -> usize {
        self.members.len()
    }

    fn send_values(&mut self, peer: usize, values: &[f32]) -> Result<(), CollectiveError> {
        self.send(peer, values)
    }

    fn recv_values(&mut self, peer: usize, expected: usize) -> Result<Vec<f32>, CollectiveError> {
        self.recv(peer, expected)
    }
}
