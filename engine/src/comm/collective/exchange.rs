//! The two flat primitives, written once over point-to-point messages: every implementation
//! that moves `f32` buffers between members ([`ChannelCollective`](super::ChannelCollective)
//! in one process, the MPI collective across processes) runs these, so their sums are taken in
//! the same (rank) order and give the same bits.

use std::ops::Range;

use super::packing::check_bounds;
use crate::error::EngineError;

/// Point-to-point messages between the members of one group.
pub(crate) trait Exchange {
    /// This member's rank.
    fn me(&self) -> usize;
    /// Number of members.
    fn members(&self) -> usize;
    /// Sends `values` to member `peer`.
    fn send_values(&mut self, peer: usize, values: &[f32]) -> Result<(), EngineError>;
    /// The next values from member `peer`, which must be `expected` long.
    fn recv_values(&mut self, peer: usize, expected: usize) -> Result<Vec<f32>, EngineError>;
}

/// [`Collective::reduce_scatter`](super::Collective::reduce_scatter): each member sends every
/// other member its range, and sums the contributions to its own range in rank order
/// (`c₀ + c₁ + …`).
pub(crate) fn reduce_scatter(
    ex: &mut impl Exchange,
    data: &[f32],
    bounds: &[Range<usize>],
) -> Result<Vec<f32>, EngineError> {
    let (me, size) = (ex.me(), ex.members());
    check_bounds(bounds, data.len(), size)?;
    for (peer, range) in bounds.iter().enumerate() {
        if peer != me {
            ex.send_values(peer, &data[range.clone()])?;
        }
    }
    let mine = bounds[me].clone();
    let mut sum: Option<Vec<f32>> = None;
    for peer in 0..size {
        let contribution = if peer == me {
            data[mine.clone()].to_vec()
        } else {
            ex.recv_values(peer, mine.len())?
        };
        match sum.as_mut() {
            None => sum = Some(contribution),
            Some(acc) => acc.iter_mut().zip(&contribution).for_each(|(a, c)| *a += c),
        }
    }
    Ok(sum.unwrap_or_default())
}

/// [`Collective::all_gather`](super::Collective::all_gather): each member sends its range to
/// every other member and copies theirs in.
pub(crate) fn all_gather(
    ex: &mut impl Exchange,
    data: &mut [f32],
    bounds: &[Range<usize>],
) -> Result<(), EngineError> {
    let (me, size) = (ex.me(), ex.members());
    check_bounds(bounds, data.len(), size)?;
    let mine = data[bounds[me].clone()].to_vec();
    for peer in (0..size).filter(|&p| p != me) {
        ex.send_values(peer, &mine)?;
    }
    for (peer, range) in bounds.iter().enumerate() {
        if peer != me {
            let values = ex.recv_values(peer, range.len())?;
            data[range.clone()].copy_from_slice(&values);
        }
    }
    Ok(())
}
