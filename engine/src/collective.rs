//! Collectives across the replicas of one stage: the seam a multi-process (MPI) or GPU (NCCL)
//! implementation plugs into.
//!
//! A group is the R workers that hold the same stage in R replicas (or, for a tied parameter, the
//! two stages that hold it). Two flat primitives carry everything — `reduce_scatter` and
//! `all_gather` over `f32` buffers, with `all_reduce` their composition — and the tensor methods
//! the engine calls (`reduce_tensors`, `broadcast_tensors`, `all_reduce_tensors`) have defaults
//! built on them, which is all a multi-process implementation must provide. The in-process
//! [`ChannelCollective`] overrides the tensor methods to pass tensor handles instead of copies.
//! Every sum is taken in **rank order** (`c₀ + c₁ + … + c_{R−1}`) by exactly one member, which
//! then hands the result to the others: a run repeats bit for bit however the threads are timed,
//! and every member ends with identical bits.
//!
//! ```
//! use std::sync::Arc;
//! use pipetrain_engine::{Abort, ChannelCollective, Collective};
//!
//! let abort = Arc::new(Abort::new());
//! let members = ChannelCollective::group(3, &abort);
//! let sums: Vec<Vec<f32>> = std::thread::scope(|s| {
//!     let handles: Vec<_> = members
//!         .into_iter()
//!         .map(|mut c| s.spawn(move || {
//!             let mut data = vec![c.rank() as f32 + 1.0; 5];
//!             c.all_reduce(&mut data).unwrap();
//!             data
//!         }))
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).collect()
//! });
//! assert!(sums.iter().all(|d| d == &vec![6.0; 5]));
//! ```

use std::ops::Range;
use std::sync::Arc;

use burn::prelude::*;
use crossbeam_channel::{Receiver, Sender, select, unbounded};

use crate::abort::Abort;

/// Why a collective failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CollectiveError {
    /// Another worker failed and the step is ending.
    #[error("aborted: another worker failed")]
    Aborted,
    /// A member went away without an error of its own.
    #[error("member {peer} of the {size}-member group hung up")]
    Disconnected {
        /// The peer's rank in the group.
        peer: usize,
        /// Group size.
        size: usize,
    },
    /// Members disagree on the buffer: they hold different models or different gradients.
    #[error(
        "member {peer} sent {got} values for rank {rank}'s range, which holds {expected}; the \
         replicas of a stage must hold the same parameters"
    )]
    Mismatch {
        /// The sender's rank.
        peer: usize,
        /// This member's rank.
        rank: usize,
        /// Values expected.
        expected: usize,
        /// Values received.
        got: usize,
    },
    /// `bounds` does not split the buffer into one range per member.
    #[error("bounds {bounds:?} do not split {len} values into {size} consecutive ranges")]
    Bounds {
        /// The ranges given.
        bounds: Vec<Range<usize>>,
        /// Buffer length.
        len: usize,
        /// Group size.
        size: usize,
    },
}

/// One member's handle on a collective group.
pub trait Collective: Send {
    /// This member's rank in the group, `0..size()`.
    fn rank(&self) -> usize;

    /// Number of members.
    fn size(&self) -> usize;

    /// Every member passes a buffer of the same length and the same `bounds` (one consecutive
    /// range per member covering the buffer). Member `r` gets back the element-wise sum over all
    /// members of `data[bounds[r]]`, summed in rank order.
    fn reduce_scatter(
        &mut self,
        data: &[f32],
        bounds: &[Range<usize>],
    ) -> Result<Vec<f32>, CollectiveError>;

    /// Member `r` contributes `data[bounds[r]]`; afterwards every member's `data` holds all
    /// contributions.
    fn all_gather(
        &mut self,
        data: &mut [f32],
        bounds: &[Range<usize>],
    ) -> Result<(), CollectiveError>;

    /// Element-wise sum over all members, in place; every member ends with identical bits.
    fn all_reduce(&mut self, data: &mut [f32]) -> Result<(), CollectiveError> {
        if self.size() == 1 {
            return Ok(());
        }
        let bounds = even_bounds(data.len(), self.size());
        let mine = self.reduce_scatter(data, &bounds)?;
        data[bounds[self.rank()].clone()].copy_from_slice(&mine);
        self.all_gather(data, &bounds)
    }

    /// Tensor `i` summed over all members (in rank order) and handed to member `owners[i]`;
    /// the others get `None`. Every member passes tensors of the same lengths and the same
    /// `owners`. The default goes through flat `f32` buffers ([`reduce_scatter`](Self::reduce_scatter));
    /// an in-process implementation can pass tensor handles instead.
    fn reduce_tensors(
        &mut self,
        tensors: Vec<Tensor<1>>,
        owners: &[usize],
    ) -> Result<Vec<Option<Tensor<1>>>, CollectiveError> {
        let device = tensors.first().map(|t| t.device()).unwrap_or_default();
        let lens: Vec<usize> = tensors.iter().map(|t| t.dims()[0]).collect();
        let order = by_owner(owners, self.size());
        let mut flat = Vec::with_capacity(lens.iter().sum());
        let mut tensors: Vec<Option<Tensor<1>>> = tensors.into_iter().map(Some).collect();
        for &i in &order {
            flat.extend(values(tensors[i].take().expect("each tensor once")));
        }
        let bounds = owner_bounds(&order, owners, &lens, self.size());
        let mine = self.reduce_scatter(&flat, &bounds)?;
        let mut out = vec![None; lens.len()];
        let mut at = 0;
        for &i in order.iter().filter(|&&i| owners[i] == self.rank()) {
            let part = mine[at..at + lens[i]].to_vec();
            out[i] = Some(Tensor::from_data(TensorData::new(part, [lens[i]]), &device));
            at += lens[i];
        }
        Ok(out)
    }

    /// Member `owners[i]` passes tensor `i` (`Some`), the others `None`; every member gets all
    /// of them. `lens` are the tensors' lengths, `device` where the received ones go.
    fn broadcast_tensors(
        &mut self,
        tensors: Vec<Option<Tensor<1>>>,
        owners: &[usize],
        lens: &[usize],
        device: &Device,
    ) -> Result<Vec<Tensor<1>>, CollectiveError> {
        let order = by_owner(owners, self.size());
        let bounds = owner_bounds(&order, owners, lens, self.size());
        let mut flat = vec![0.0; lens.iter().sum()];
        let mut tensors = tensors;
        let mut at = bounds[self.rank()].start;
        for &i in order.iter().filter(|&&i| owners[i] == self.rank()) {
            let v = values(tensors[i].take().expect("an owner passes its tensors"));
            flat[at..at + lens[i]].copy_from_slice(&v);
            at += lens[i];
        }
        self.all_gather(&mut flat, &bounds)?;
        let mut out: Vec<Option<Tensor<1>>> = vec![None; lens.len()];
        let mut at = 0;
        for &i in &order {
            let part = flat[at..at + lens[i]].to_vec();
            out[i] = Some(Tensor::from_data(TensorData::new(part, [lens[i]]), device));
            at += lens[i];
        }
        Ok(out
            .into_iter()
            .map(|t| t.expect("every tensor placed"))
            .collect())
    }

    /// Every tensor summed over all members (in rank order): [`reduce_tensors`] with the
    /// tensors spread over the members by size, then [`broadcast_tensors`]. Every member gets
    /// identical bits.
    ///
    /// [`reduce_tensors`]: Self::reduce_tensors
    /// [`broadcast_tensors`]: Self::broadcast_tensors
    fn all_reduce_tensors(
        &mut self,
        tensors: Vec<Tensor<1>>,
    ) -> Result<Vec<Tensor<1>>, CollectiveError> {
        if self.size() == 1 {
            return Ok(tensors);
        }
        let Some(device) = tensors.first().map(|t| t.device()) else {
            return Ok(tensors);
        };
        let lens: Vec<usize> = tensors.iter().map(|t| t.dims()[0]).collect();
        let owners = crate::adapter::assign_owners(&lens, self.size());
        let reduced = self.reduce_tensors(tensors, &owners)?;
        self.broadcast_tensors(reduced, &owners, &lens, &device)
    }
}

/// Tensor indices grouped by owner rank (rank 0's first), in index order within a rank.
fn by_owner(owners: &[usize], size: usize) -> Vec<usize> {
    (0..size)
        .flat_map(|r| (0..owners.len()).filter(move |&i| owners[i] == r))
        .collect()
}

/// Each rank's consecutive range in a buffer laid out in `order`.
fn owner_bounds(
    order: &[usize],
    owners: &[usize],
    lens: &[usize],
    size: usize,
) -> Vec<Range<usize>> {
    let mut bounds = Vec::with_capacity(size);
    let mut start = 0;
    for r in 0..size {
        let len: usize = order
            .iter()
            .filter(|&&i| owners[i] == r)
            .map(|&i| lens[i])
            .sum();
        bounds.push(start..start + len);
        start += len;
    }
    bounds
}

fn values(t: Tensor<1>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 after convert")
}

/// `len` values split into `parts` consecutive ranges whose sizes differ by at most one (the
/// first `len % parts` ranges are one longer).
///
/// ```
/// assert_eq!(pipetrain_engine::even_bounds(7, 3), vec![0..3, 3..5, 5..7]);
/// ```
pub fn even_bounds(len: usize, parts: usize) -> Vec<Range<usize>> {
    let (base, extra) = (len / parts, len % parts);
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let end = start + base + usize::from(i < extra);
            let range = start..end;
            start = end;
            range
        })
        .collect()
}

fn check_bounds(bounds: &[Range<usize>], len: usize, size: usize) -> Result<(), CollectiveError> {
    let consecutive = bounds.len() == size
        && bounds.first().is_none_or(|b| b.start == 0)
        && bounds.windows(2).all(|w| w[0].end == w[1].start)
        && bounds.iter().all(|b| b.start <= b.end)
        && bounds.last().is_none_or(|b| b.end == len);
    if consecutive {
        Ok(())
    } else {
        Err(CollectiveError::Bounds {
            bounds: bounds.to_vec(),
            len,
            size,
        })
    }
}

/// In-process collective over crossbeam channels: one FIFO channel per ordered pair of members,
/// so each phase matches its messages by sender without tags. Every wait also watches the step's
/// [`Abort`].
pub struct ChannelCollective {
    rank: usize,
    to: Vec<Sender<Message>>,
    from: Vec<Receiver<Message>>,
    abort: Arc<Abort>,
}

/// What members send each other: values, or tensor handles (in one process a tensor is shared,
/// not copied).
enum Message {
    Values(Vec<f32>),
    Tensors(Vec<Tensor<1>>),
}

impl ChannelCollective {
    /// The `size` members of one group, indexed by rank.
    pub fn group(size: usize, abort: &Arc<Abort>) -> Vec<ChannelCollective> {
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
            })
            .collect()
    }

    fn send(&self, peer: usize, values: Vec<f32>) -> Result<(), CollectiveError> {
        self.to[peer]
            .send(Message::Values(values))
            .map_err(|_| self.hung_up(peer))
    }

    fn send_tensors(&self, peer: usize, tensors: Vec<Tensor<1>>) -> Result<(), CollectiveError> {
        self.to[peer]
            .send(Message::Tensors(tensors))
            .map_err(|_| self.hung_up(peer))
    }

    fn recv_message(&self, peer: usize) -> Result<Message, CollectiveError> {
        select! {
            recv(self.from[peer]) -> message => message.map_err(|_| self.hung_up(peer)),
            recv(self.abort.watch()) -> _ => Err(CollectiveError::Aborted),
        }
    }

    fn mismatch(&self, peer: usize, expected: usize, got: usize) -> CollectiveError {
        CollectiveError::Mismatch {
            peer,
            rank: self.rank,
            expected,
            got,
        }
    }

    fn recv(&self, peer: usize, expected: usize) -> Result<Vec<f32>, CollectiveError> {
        match self.recv_message(peer)? {
            Message::Values(values) if values.len() == expected => Ok(values),
            Message::Values(values) => Err(self.mismatch(peer, expected, values.len())),
            Message::Tensors(t) => Err(self.mismatch(peer, expected, t.len())),
        }
    }

    /// `lens.len()` tensors of the given lengths from `peer`.
    fn recv_tensors(&self, peer: usize, lens: &[usize]) -> Result<Vec<Tensor<1>>, CollectiveError> {
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

    fn hung_up(&self, peer: usize) -> CollectiveError {
        if self.abort.is_aborted() {
            CollectiveError::Aborted
        } else {
            CollectiveError::Disconnected {
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
    /// on the way.
    fn reduce_tensors(
        &mut self,
        tensors: Vec<Tensor<1>>,
        owners: &[usize],
    ) -> Result<Vec<Option<Tensor<1>>>, CollectiveError> {
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
                self.recv_tensors(peer, &lens)?
            };
            for (sum, t) in sums.iter_mut().zip(contribution) {
                *sum = Some(match sum.take() {
                    None => t,
                    Some(s) => {
                        let t = t.to_device(&s.device());
                        s + t
                    }
                });
            }
        }
        let mut out = vec![None; owners.len()];
        for (i, sum) in mine.into_iter().zip(sums) {
            out[i] = sum;
        }
        Ok(out)
    }

    /// Passes tensor handles: every member ends with the owners' very tensors.
    fn broadcast_tensors(
        &mut self,
        tensors: Vec<Option<Tensor<1>>>,
        owners: &[usize],
        lens: &[usize],
        device: &Device,
    ) -> Result<Vec<Tensor<1>>, CollectiveError> {
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
                out[i] = Some(t.to_device(device));
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
    ) -> Result<Vec<f32>, CollectiveError> {
        check_bounds(bounds, data.len(), self.size())?;
        for (peer, range) in bounds.iter().enumerate() {
            if peer != self.rank {
                self.send(peer, data[range.clone()].to_vec())?;
            }
        }
        let mine = bounds[self.rank].clone();
        let mut sum: Option<Vec<f32>> = None;
        for peer in 0..self.size() {
            let contribution = if peer == self.rank {
                data[mine.clone()].to_vec()
            } else {
                self.recv(peer, mine.len())?
            };
            match sum.as_mut() {
                None => sum = Some(contribution),
                Some(acc) => acc.iter_mut().zip(&contribution).for_each(|(a, c)| *a += c),
            }
        }
        Ok(sum.unwrap_or_default())
    }

    fn all_gather(
        &mut self,
        data: &mut [f32],
        bounds: &[Range<usize>],
    ) -> Result<(), CollectiveError> {
        check_bounds(bounds, data.len(), self.size())?;
        let mine = data[bounds[self.rank].clone()].to_vec();
        for peer in (0..self.size()).filter(|&p| p != self.rank) {
            self.send(peer, mine.clone())?;
        }
        for (peer, range) in bounds.iter().enumerate() {
            if peer != self.rank {
                let values = self.recv(peer, range.len())?;
                data[range.clone()].copy_from_slice(&values);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ) -> Result<Vec<f32>, CollectiveError> {
            self.0.reduce_scatter(data, bounds)
        }
        fn all_gather(
            &mut self,
            data: &mut [f32],
            bounds: &[Range<usize>],
        ) -> Result<(), CollectiveError> {
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
