//! Collectives across the replicas of one stage: the seam a multi-process (MPI) or GPU (NCCL)
//! implementation plugs into.
//!
//! A group is the R workers that hold the same stage in R replicas. Two primitives carry
//! everything data parallelism needs — `reduce_scatter` and `all_gather` — and `all_reduce` is
//! their composition. Every sum is taken in **rank order** (`c₀ + c₁ + … + c_{R−1}`) by exactly one
//! member, which then hands the result to the others: a run repeats bit for bit however the
//! threads are timed, and every member ends with identical bits.
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
    to: Vec<Sender<Vec<f32>>>,
    from: Vec<Receiver<Vec<f32>>>,
    abort: Arc<Abort>,
}

impl ChannelCollective {
    /// The `size` members of one group, indexed by rank.
    pub fn group(size: usize, abort: &Arc<Abort>) -> Vec<ChannelCollective> {
        // links[i][j]: member i → member j.
        type Link = (Sender<Vec<f32>>, Receiver<Vec<f32>>);
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
        self.to[peer].send(values).map_err(|_| self.hung_up(peer))
    }

    fn recv(&self, peer: usize, expected: usize) -> Result<Vec<f32>, CollectiveError> {
        select! {
            recv(self.from[peer]) -> message => {
                let values = message.map_err(|_| self.hung_up(peer))?;
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
            recv(self.abort.watch()) -> _ => Err(CollectiveError::Aborted),
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
