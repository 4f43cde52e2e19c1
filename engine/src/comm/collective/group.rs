//! The [`Collective`] trait: one member's handle on a group, with two flat primitives to
//! implement and tensor methods built on them.

use std::ops::Range;

use burn::prelude::*;

use super::packing::{by_owner, even_bounds, owner_bounds, values};
use crate::error::EngineError;

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
    ) -> Result<Vec<f32>, EngineError>;

    /// Member `r` contributes `data[bounds[r]]`; afterwards every member's `data` holds all
    /// contributions.
    fn all_gather(&mut self, data: &mut [f32], bounds: &[Range<usize>]) -> Result<(), EngineError>;

    /// Element-wise sum over all members, in place; every member ends with identical bits.
    fn all_reduce(&mut self, data: &mut [f32]) -> Result<(), EngineError> {
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
    ) -> Result<Vec<Option<Tensor<1>>>, EngineError> {
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
    ) -> Result<Vec<Tensor<1>>, EngineError> {
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
    ) -> Result<Vec<Tensor<1>>, EngineError> {
        let Some(spread) = Spread::of(&tensors, self.size()) else {
            return Ok(tensors);
        };
        let reduced = self.reduce_tensors(tensors, &spread.owners)?;
        self.broadcast_tensors(reduced, &spread.owners, &spread.lens, &spread.device)
    }
}

/// How an all-reduce spreads its tensors over the members: each tensor summed by one owner,
/// the owners balanced by size.
pub(crate) struct Spread {
    /// Where the tensors are.
    pub device: Device,
    /// Their lengths.
    pub lens: Vec<usize>,
    /// Tensor `i`'s owner.
    pub owners: Vec<usize>,
}

impl Spread {
    /// The spread of `tensors` over `members`, or `None` when there is nothing to sum (one
    /// member, or no tensors).
    pub fn of(tensors: &[Tensor<1>], members: usize) -> Option<Self> {
        if members == 1 {
            return None;
        }
        let device = tensors.first()?.device();
        let lens: Vec<usize> = tensors.iter().map(|t| t.dims()[0]).collect();
        let owners = crate::adapter::assign_owners(&lens, members);
        Some(Self {
            device,
            lens,
            owners,
        })
    }
}
