//! A stage's gradients and parameters as a list of rank-1 tensors: what collectives move.
//!
//! A [`Slots`] lists the parameters that have a gradient (trainable ones: batch-norm running
//! statistics and frozen weights have none) in module order, with their shapes. Replicas hold
//! clones of one model, so their lists agree entry for entry. Reshaping to rank 1 and back is
//! metadata only: no value is copied on the way to or from a collective.

use std::collections::HashMap;
use std::ops::Range;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;

use super::values::{set_values, shape};

/// The gradient-carrying parameters of a module, in module order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slots {
    ids: Vec<ParamId>,
    shapes: Vec<Vec<usize>>,
    index: HashMap<ParamId, usize>,
}

struct Gather<'a> {
    grads: &'a GradientsParams,
    slots: Slots,
    tensors: Vec<Tensor<1>>,
}

impl ModuleVisitor for Gather<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            let shape = grad.dims().to_vec();
            let n: usize = shape.iter().product();
            self.slots.index.insert(param.id, self.slots.ids.len());
            self.slots.ids.push(param.id);
            self.slots.shapes.push(shape);
            self.tensors.push(grad.reshape([n]));
        }
    }
}

impl Slots {
    /// The parameters of `module` with a gradient in `grads`, and those gradients as rank-1
    /// tensors.
    pub(crate) fn of_grads<M: Module>(
        module: &M,
        grads: &GradientsParams,
    ) -> (Self, Vec<Tensor<1>>) {
        let mut gather = Gather {
            grads,
            slots: Slots::default(),
            tensors: Vec::new(),
        };
        module.visit(&mut gather);
        (gather.slots, gather.tensors)
    }

    /// The trainable parameters of `module` (those that take a gradient), in module order, with
    /// their shapes: the entries [`of_grads`](Self::of_grads) lists when every one has a
    /// gradient.
    pub(crate) fn of_params<M: Module>(module: &M) -> Self {
        let mut trainable = TrainableShapes(Slots::default());
        module.visit(&mut trainable);
        trainable.0
    }

    /// The entry of parameter `id`, if it has one.
    pub(crate) fn position(&self, id: ParamId) -> Option<usize> {
        self.index.get(&id).copied()
    }

    /// Bytes of `f32` values of the entries where `select` is true.
    pub(crate) fn f32_bytes(&self, select: impl Fn(usize) -> bool) -> u64 {
        let sizes = self.sizes();
        let values: usize = (0..sizes.len())
            .filter(|&i| select(i))
            .map(|i| sizes[i])
            .sum();
        values as u64 * 4
    }

    /// `module` with the values of the entries where `drop` is true replaced by empty tensors of
    /// the same rank (ZeRO-3's reshard: the memory goes, the parameter's id and gradient
    /// requirement stay; [`load_params`](Self::load_params) puts values back, shaped by these
    /// slots).
    pub(crate) fn drop_params<M: Module>(&self, module: M, drop: &[bool]) -> M {
        module.map(&mut Drop { slots: self, drop })
    }

    /// The parameter of entry `i`.
    pub(crate) fn id(&self, i: usize) -> ParamId {
        self.ids[i]
    }

    /// Values per entry.
    pub(crate) fn sizes(&self) -> Vec<usize> {
        self.shapes.iter().map(|s| s.iter().product()).collect()
    }

    /// Consecutive entry ranges of at most `bucket_elems` values each (an entry larger than a
    /// bucket is a bucket of its own), in module order.
    pub(crate) fn buckets(&self, bucket_elems: usize) -> Vec<Range<usize>> {
        let mut buckets = Vec::new();
        let (mut start, mut filled) = (0, 0);
        for (i, n) in self.sizes().into_iter().enumerate() {
            if i > start && filled + n > bucket_elems {
                buckets.push(start..i);
                (start, filled) = (i, 0);
            }
            filled += n;
        }
        if start < self.ids.len() {
            buckets.push(start..self.ids.len());
        }
        buckets
    }

    /// Gradients from rank-1 `tensors` (one per entry; `None` entries are left out).
    pub(crate) fn grads<M: Module>(
        &self,
        module: &M,
        tensors: Vec<Option<Tensor<1>>>,
    ) -> GradientsParams {
        let mut register = Register {
            slots: self,
            tensors,
            grads: GradientsParams::new(),
        };
        module.visit(&mut register);
        register.grads
    }

    /// Parameter values (plain, rank 1) of the entries where `select` is true.
    pub(crate) fn params<M: Module>(&self, module: &M, select: &[bool]) -> Vec<Option<Tensor<1>>> {
        let mut read = Read {
            slots: self,
            select,
            values: vec![None; self.ids.len()],
        };
        module.visit(&mut read);
        read.values
    }

    /// `module` with the parameters of the entries whose value is `Some` set to it (one per
    /// entry).
    pub(crate) fn load_some<M: Module>(&self, module: M, values: Vec<Option<Tensor<1>>>) -> M {
        let replace: Vec<bool> = values.iter().map(Option::is_some).collect();
        module.map(&mut Load {
            slots: self,
            values,
            replace: &replace,
        })
    }

    /// `module` with the parameters of the entries where `replace` is true set to `values`.
    pub(crate) fn load_params<M: Module>(
        &self,
        module: M,
        values: Vec<Tensor<1>>,
        replace: &[bool],
    ) -> M {
        module.map(&mut Load {
            slots: self,
            values: values.into_iter().map(Some).collect(),
            replace,
        })
    }
}

struct TrainableShapes(Slots);

impl ModuleVisitor for TrainableShapes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        if value.is_require_grad() {
            let slots = &mut self.0;
            slots.index.insert(param.id, slots.ids.len());
            slots.ids.push(param.id);
            slots.shapes.push(value.dims().to_vec());
        }
    }
}

struct Drop<'a> {
    slots: &'a Slots,
    drop: &'a [bool],
}

impl ModuleMapper for Drop<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        match self.slots.index.get(&param.id) {
            Some(&i) if self.drop[i] => param.map(|old| {
                let require_grad = old.is_require_grad();
                let device = old.inner().device();
                let empty = Tensor::<D>::zeros(shape::<D>(&[0; D]), &device);
                Tensor::from_inner(empty).set_require_grad(require_grad)
            }),
            _ => param,
        }
    }
}

struct Trainable(Vec<(ParamId, usize)>);

impl ModuleVisitor for Trainable {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        if value.is_require_grad() {
            self.0.push((param.id, value.dims().iter().product()));
        }
    }
}

/// ZeRO-1 ownership of the trainable parameters of `module` among `replicas`: a function of the
/// module alone (not of which gradients a step produced), so the worker that steps and the
/// checkpoint that restores optimizer state agree.
pub(crate) fn owners_of<M: Module>(module: &M, replicas: usize) -> HashMap<ParamId, usize> {
    let mut trainable = Trainable(Vec::new());
    module.visit(&mut trainable);
    let sizes: Vec<usize> = trainable.0.iter().map(|(_, n)| *n).collect();
    let owners = assign_owners(&sizes, replicas);
    trainable.0.iter().map(|(id, _)| *id).zip(owners).collect()
}

impl Slots {
    /// Each entry's ZeRO-1 owner (see [`owners_of`]).
    pub(crate) fn owners<M: Module>(&self, module: &M, replicas: usize) -> Vec<usize> {
        let owners = owners_of(module, replicas);
        self.ids
            .iter()
            .map(|id| owners.get(id).copied().unwrap_or(0))
            .collect()
    }
}

/// A module's buffers: float state that is not trained (batch-norm running statistics), in
/// module order, as rank-1 tensors with their ids and shapes.
pub(crate) struct Buffers {
    pub ids: Vec<ParamId>,
    pub shapes: Vec<Vec<usize>>,
    pub values: Vec<Tensor<1>>,
}

struct CollectBuffers(Buffers);

impl ModuleVisitor for CollectBuffers {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            let shape = value.dims().to_vec();
            let n: usize = shape.iter().product();
            self.0.ids.push(param.id);
            self.0.shapes.push(shape);
            self.0.values.push(value.reshape([n]));
        }
    }
}

impl Buffers {
    /// The buffers of `module`, with every pending running-state update folded in.
    pub(crate) fn of<M: Module>(module: &M) -> Self {
        super::values::settle_running_states(module);
        let mut collect = CollectBuffers(Buffers {
            ids: Vec::new(),
            shapes: Vec::new(),
            values: Vec::new(),
        });
        module.visit(&mut collect);
        collect.0
    }

    /// `module` with its buffers set to `values` (one per entry, same order). Pending
    /// running-state updates are folded in first, so none overwrites `values` later.
    pub(crate) fn load<M: Module>(&self, module: M, values: Vec<Tensor<1>>) -> M {
        super::values::settle_running_states(&module);
        set_values(module, self.ids.iter().copied().zip(values).collect())
    }
}

/// Greedy balanced assignment of entries (by size) to `owners` ranks: largest first, to the
/// least-loaded owner (ties: lower rank, then module order), deterministic — as PyTorch's
/// `ZeroRedundancyOptimizer` partitions parameters.
pub(crate) fn assign_owners(sizes: &[usize], owners: usize) -> Vec<usize> {
    let owners = owners.max(1);
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

struct Register<'a> {
    slots: &'a Slots,
    tensors: Vec<Option<Tensor<1>>>,
    grads: GradientsParams,
}

impl ModuleVisitor for Register<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let Some(&i) = self.slots.index.get(&param.id) else {
            return;
        };
        if let Some(t) = self.tensors[i].take() {
            let device = param.val().inner().device();
            let t = t
                .to_device(&device)
                .reshape(shape::<D>(&self.slots.shapes[i]));
            self.grads.register::<D>(param.id, t);
        }
    }
}

struct Read<'a> {
    slots: &'a Slots,
    select: &'a [bool],
    values: Vec<Option<Tensor<1>>>,
}

impl ModuleVisitor for Read<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(&i) = self.slots.index.get(&param.id)
            && self.select[i]
        {
            let n: usize = self.slots.shapes[i].iter().product();
            self.values[i] = Some(param.val().inner().reshape([n]));
        }
    }
}

struct Load<'a> {
    slots: &'a Slots,
    values: Vec<Option<Tensor<1>>>,
    replace: &'a [bool],
}

impl ModuleMapper for Load<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(&i) = self.slots.index.get(&param.id) else {
            return param;
        };
        if !self.replace[i] {
            return param;
        }
        let value = self.values[i].take().expect("one value per replaced entry");
        let dims = shape::<D>(&self.slots.shapes[i]);
        param.map(|old| {
            let require_grad = old.is_require_grad();
            let inner = value.to_device(&old.inner().device()).reshape(dims);
            Tensor::from_inner(inner).set_require_grad(require_grad)
        })
    }
}

/// The rank-2 gradient of parameter `id`, if it has one (a tied parameter's).
pub(crate) fn matrix_grad(grads: &GradientsParams, id: ParamId) -> Option<Tensor<2>> {
    grads.get::<2>(id)
}

/// Replaces the rank-2 gradient of parameter `id` (or gives it one) with `grad`.
pub(crate) fn set_matrix_grad(grads: &mut GradientsParams, id: ParamId, grad: Tensor<2>) {
    grads.remove::<2>(id);
    grads.register::<2>(id, grad);
}

#[cfg(test)]
mod tests {
    use super::assign_owners;

    #[test]
    fn owners_are_balanced_and_deterministic() {
        assert_eq!(
            assign_owners(&[100, 10, 100, 10, 50], 2),
            vec![0, 1, 1, 1, 0]
        );
        assert_eq!(assign_owners(&[5, 5, 5], 1), vec![0, 0, 0]);
        // more owners than parameters: some own nothing
        assert_eq!(assign_owners(&[5], 3), vec![0]);
    }
}
