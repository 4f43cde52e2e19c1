//! Flat f32 buffers of a stage's gradients and parameters: what collectives move.
//!
//! A [`Layout`] lists the parameters that have a gradient (trainable ones: batch-norm running
//! statistics and frozen weights have none), each with a range in one flat buffer. Replicas hold
//! clones of one model, so their layouts agree slot for slot. The slots can be grouped by an
//! owner rank (ZeRO-1): then each rank's parameters form one consecutive range.

use std::collections::HashMap;
use std::ops::Range;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;

/// One parameter's place in a flat buffer.
#[derive(Clone, Debug)]
struct Slot {
    shape: Vec<usize>,
    range: Range<usize>,
}

/// Where each gradient-carrying parameter of a module lives in a flat buffer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Layout {
    slots: HashMap<ParamId, Slot>,
    len: usize,
    /// Per owner rank, its consecutive range (one range covering everything when unowned).
    bounds: Vec<Range<usize>>,
}

struct Gather<'a> {
    grads: &'a GradientsParams,
    found: Vec<(ParamId, Vec<usize>)>,
}

impl ModuleVisitor for Gather<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            self.found.push((param.id, grad.dims().to_vec()));
        }
    }
}

impl Layout {
    /// The parameters of `module` that have a gradient in `grads`, in module order, their
    /// slots grouped by owner: `owners` ranks, parameters assigned greedily by size (largest
    /// first, to the least-loaded rank, ties to the lower rank) as PyTorch's
    /// `ZeroRedundancyOptimizer` does; `owners == 1` keeps module order.
    pub(crate) fn new<M: Module>(module: &M, grads: &GradientsParams, owners: usize) -> Self {
        let mut gather = Gather {
            grads,
            found: Vec::new(),
        };
        module.visit(&mut gather);
        let sizes: Vec<usize> = gather
            .found
            .iter()
            .map(|(_, s)| s.iter().product())
            .collect();
        let owner = assign_owners(&sizes, owners.max(1));
        let mut slots = HashMap::with_capacity(sizes.len());
        let mut bounds = Vec::with_capacity(owners.max(1));
        let mut len = 0;
        for rank in 0..owners.max(1) {
            let start = len;
            for (i, (id, shape)) in gather.found.iter().enumerate() {
                if owner[i] == rank {
                    slots.insert(
                        *id,
                        Slot {
                            shape: shape.clone(),
                            range: len..len + sizes[i],
                        },
                    );
                    len += sizes[i];
                }
            }
            bounds.push(start..len);
        }
        Self { slots, len, bounds }
    }

    /// Values in the buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Each owner's consecutive range.
    pub(crate) fn bounds(&self) -> &[Range<usize>] {
        &self.bounds
    }

    /// The gradients, flattened.
    pub(crate) fn flatten_grads<M: Module>(&self, module: &M, grads: &GradientsParams) -> Vec<f32> {
        let mut buffer = vec![0.0; self.len];
        module.visit(&mut Flatten {
            layout: self,
            buffer: &mut buffer,
            source: Source::Grads(grads),
        });
        buffer
    }

    /// The parameter values, flattened.
    pub(crate) fn flatten_params<M: Module>(&self, module: &M) -> Vec<f32> {
        let mut buffer = vec![0.0; self.len];
        module.visit(&mut Flatten {
            layout: self,
            buffer: &mut buffer,
            source: Source::Params,
        });
        buffer
    }

    /// Gradients from `buffer`, for the parameters whose slots lie inside `within` (the whole
    /// buffer, or one owner's range); `buffer` holds just that range.
    pub(crate) fn grads_from<M: Module>(
        &self,
        module: &M,
        buffer: &[f32],
        within: Range<usize>,
    ) -> GradientsParams {
        let mut out = Unflatten {
            layout: self,
            buffer,
            within,
            grads: GradientsParams::new(),
        };
        module.visit(&mut out);
        out.grads
    }

    /// `module` with the parameters outside `keep` replaced by the values in `buffer` (the
    /// whole flat buffer).
    pub(crate) fn load_params<M: Module>(
        &self,
        module: M,
        buffer: &[f32],
        keep: Range<usize>,
    ) -> M {
        module.map(&mut Load {
            layout: self,
            buffer,
            keep,
        })
    }
}

/// Greedy balanced assignment: largest first, to the least-loaded owner (ties: lower rank,
/// then module order), deterministic.
fn assign_owners(sizes: &[usize], owners: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(sizes[i]), i));
    let mut load = vec![0usize; owners];
    let mut owner = vec![0; sizes.len()];
    for i in order {
        let rank = (0..owners).min_by_key(|&r| (load[r], r)).unwrap_or(0);
        owner[i] = rank;
        load[rank] += sizes[i];
    }
    owner
}

enum Source<'a> {
    Grads(&'a GradientsParams),
    Params,
}

struct Flatten<'a> {
    layout: &'a Layout,
    buffer: &'a mut [f32],
    source: Source<'a>,
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 data after convert")
}

impl ModuleVisitor for Flatten<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let Some(slot) = self.layout.slots.get(&param.id) else {
            return;
        };
        let tensor = match &self.source {
            Source::Grads(grads) => grads.get::<D>(param.id),
            Source::Params => Some(param.val().inner()),
        };
        if let Some(tensor) = tensor {
            self.buffer[slot.range.clone()].copy_from_slice(&values(tensor));
        }
    }
}

struct Unflatten<'a> {
    layout: &'a Layout,
    buffer: &'a [f32],
    within: Range<usize>,
    grads: GradientsParams,
}

impl ModuleVisitor for Unflatten<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let Some(slot) = self.layout.slots.get(&param.id) else {
            return;
        };
        if slot.range.start < self.within.start || slot.range.end > self.within.end {
            return;
        }
        let local = slot.range.start - self.within.start..slot.range.end - self.within.start;
        let device = param.val().inner().device();
        let data = TensorData::new(self.buffer[local].to_vec(), slot.shape.clone());
        self.grads
            .register::<D>(param.id, Tensor::from_data(data, &device));
    }
}

struct Load<'a> {
    layout: &'a Layout,
    buffer: &'a [f32],
    keep: Range<usize>,
}

impl ModuleMapper for Load<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(slot) = self.layout.slots.get(&param.id) else {
            return param;
        };
        if slot.range.start >= self.keep.start && slot.range.end <= self.keep.end {
            return param;
        }
        let data = TensorData::new(self.buffer[slot.range.clone()].to_vec(), slot.shape.clone());
        param.map(|old| {
            let require_grad = old.is_require_grad();
            Tensor::from_data(data, &old.device()).set_require_grad(require_grad)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::assign_owners;

    #[test]
    fn owners_are_balanced_and_deterministic() {
        let owner = assign_owners(&[100, 10, 100, 10, 50], 2);
        assert_eq!(owner, vec![0, 1, 1, 1, 0]);
        assert_eq!(assign_owners(&[5, 5, 5], 1), vec![0, 0, 0]);
        // more owners than parameters: some own nothing
        assert_eq!(assign_owners(&[5], 3), vec![0]);
    }
}
