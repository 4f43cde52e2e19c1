//! Parameter values: read one by id, set some by id, read them all (for verification), or copy
//! them into buffers of their own.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;

/// A trainable parameter: what a layer built from loaded values (a Hugging Face checkpoint's
/// tensors, say) holds in each of its weights.
pub type Parameter<const D: usize> = Param<Tensor<D>>;

/// A trainable parameter of a fresh id holding `tensor`: for layers whose weights come from a
/// file rather than an initializer.
///
/// ```
/// use burn::prelude::*;
/// let w = pipetrain_engine::parameter(Tensor::<2>::ones([2, 3], &Device::flex()));
/// assert_eq!(w.val().dims(), [2, 3]);
/// ```
pub fn parameter<const D: usize>(tensor: Tensor<D>) -> Parameter<D> {
    Param::from_tensor(tensor)
}

/// The value of parameter `id` of `module` (plain, flattened to rank 1) and its shape.
pub(crate) fn value_of<M: Module>(module: &M, id: ParamId) -> Option<(Tensor<1>, Vec<usize>)> {
    struct Find {
        id: ParamId,
        found: Option<(Tensor<1>, Vec<usize>)>,
    }
    impl ModuleVisitor for Find {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.id == self.id {
                let value = param.val().inner();
                let dims = value.dims().to_vec();
                let n: usize = dims.iter().product();
                self.found = Some((value.reshape([n]), dims));
            }
        }
    }
    let mut find = Find { id, found: None };
    module.visit(&mut find);
    find.found
}

/// `module` with the parameters named in `values` set to them: each value (rank 1, as many
/// elements as the parameter) is copied onto the parameter's device in its shape, and the
/// parameter keeps whether it requires a gradient.
pub(crate) fn set_values<M: Module>(module: M, values: HashMap<ParamId, Tensor<1>>) -> M {
    struct Set(HashMap<ParamId, Tensor<1>>);
    impl ModuleMapper for Set {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let Some(value) = self.0.remove(&param.id) else {
                return param;
            };
            let data = value.into_data();
            param.map(|old| {
                let dims: [usize; D] = shape::<D>(&old.dims());
                let require_grad = old.is_require_grad();
                Tensor::<1>::from_data(data, &old.device())
                    .reshape(dims)
                    .set_require_grad(require_grad)
            })
        }
    }
    module.map(&mut Set(values))
}

/// `module` with every float parameter copied into a buffer of its own, through host memory,
/// on the parameter's device (ids and whether each requires a gradient kept).
///
/// Replicas built from one model would otherwise share its buffers until their first optimizer
/// step. On a GPU, the last replica to step could then update a shared weight in place, on its
/// own stream, while another replica's kernels that read it are still queued on theirs: a
/// stream waits only for the one that made a buffer (see `handoff`).
pub(crate) fn own_buffers<M: Module>(module: M) -> M {
    struct Copy;
    impl ModuleMapper for Copy {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(|t| {
                let (device, require_grad) = (t.device(), t.is_require_grad());
                Tensor::from_data(t.into_data(), &device).set_require_grad(require_grad)
            })
        }
    }
    module.map(&mut Copy)
}

/// `module` with `shift` added to every element of every trained parameter (buffers such as
/// running statistics are left as they are), on the parameter's device, ids and gradient
/// requirement kept: the test hook that makes a replica's weights leave the others'
/// (`Runtime::perturb_replica`).
pub(crate) fn shifted<M: Module>(module: M, shift: f32) -> M {
    struct Shift(f32);
    impl ModuleMapper for Shift {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let shift = self.0;
            param.map(|t| {
                if !t.is_require_grad() {
                    return t;
                }
                let device = t.device();
                Tensor::from_data(t.into_data(), &device)
                    .add_scalar(shift)
                    .set_require_grad(true)
            })
        }
    }
    module.map(&mut Shift(shift))
}

/// Folds burn's pending running-state updates into their values.
///
/// burn's `RunningState` (batch norm's running statistics) keeps each thread's latest update
/// aside and folds it in only at that thread's next update or at `valid()`/`train()`, while
/// visitors and mappers see the folded value. Without this a reader sees the statistics one
/// update late (the reference model and a gathered one then disagree), and a value set by a
/// mapper (replica 0's broadcast statistics) is overwritten by the pending update at the next
/// forward.
pub(crate) fn settle_running_states<M: Module>(module: &M) {
    // `valid()` folds every running state in place (they share their storage with the copy it
    // returns, which is dropped).
    drop(module.valid());
}

/// Every float parameter of `module`, flattened to `f32`, in visiting order; with
/// `trainable_only`, only those that require a gradient (no buffers). Running statistics are
/// read settled (see [`settle_running_states`]).
pub(crate) fn float_values<M: Module>(module: &M, trainable_only: bool) -> Vec<Vec<f32>> {
    settle_running_states(module);
    struct Collect {
        values: Vec<Vec<f32>>,
        trainable_only: bool,
    }
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let value = param.val();
            if self.trainable_only && !value.is_require_grad() {
                return;
            }
            let values = value.inner().into_data().convert::<f32>();
            self.values
                .push(values.try_to_vec::<f32>().expect("f32 parameter data"));
        }
    }
    let mut c = Collect {
        values: Vec::new(),
        trainable_only,
    };
    module.visit(&mut c);
    c.values
}

/// `dims` as a rank-`D` shape.
pub(super) fn shape<const D: usize>(dims: &[usize]) -> [usize; D] {
    dims.try_into().expect("a parameter keeps its rank")
}

#[cfg(test)]
mod tests {
    use burn::module::Module;
    use burn::nn::LinearConfig;
    use burn::prelude::*;

    use burn::backend::Flex;
    use burn::module::{ModuleMapper, ModuleVisitor, Param};

    use super::{float_values, own_buffers};
    use crate::adapter::{autodiff_device, trainable};

    /// Where each float parameter of `module` keeps its values: the address of its flex buffer.
    fn buffers<M: Module>(module: &M) -> Vec<usize> {
        struct Buffers(Vec<usize>);
        impl ModuleVisitor for Buffers {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let flex = param.val().inner().try_into_primitive::<Flex>();
                let data = flex.expect("a flex tensor").data_arc();
                self.0.push(std::sync::Arc::as_ptr(&data) as usize);
            }
        }
        let mut b = Buffers(Vec::new());
        module.visit(&mut b);
        b.0
    }

    /// Writes 1000 into the first value of each float parameter of `module`, in place in its
    /// buffer, as a GPU kernel writes a weight it holds alone. Panics where the buffer is
    /// shared (flex copies a shared buffer before a write: that would hide the sharing).
    fn write_in_place<M: Module>(module: M) -> M {
        struct Write;
        impl ModuleMapper for Write {
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                param.map(|t| {
                    let require_grad = t.is_require_grad();
                    let mut flex = t.inner().try_into_primitive::<Flex>().expect("flex");
                    let values = flex.try_storage_mut::<f32>().expect("a buffer of its own");
                    values[0] = 1000.0;
                    let plain = Tensor::<D>::from_primitive::<Flex>(flex);
                    Tensor::from_inner(plain).set_require_grad(require_grad)
                })
            }
        }
        module.map(&mut Write)
    }

    /// A replica's copy holds every parameter in a buffer of its own: none is the original's,
    /// and a write into the copy's buffers leaves the original's values as they were (with
    /// shared buffers, as replicas built from one model start, it would not on a GPU).
    #[test]
    fn own_buffers_writes_to_the_copy_leave_the_original_unchanged() {
        let device = autodiff_device(&Device::flex());
        let layer = trainable(LinearConfig::new(3, 2).init(&Device::flex()), &device);
        let before = float_values(&layer, false);
        let copy = own_buffers(layer.clone());
        let (ours, theirs) = (buffers(&layer), buffers(&copy));
        assert_eq!(ours.len(), 2);
        assert!(
            ours.iter().all(|b| !theirs.contains(b)),
            "the copy shares a buffer with the original: {ours:?} {theirs:?}"
        );
        let written = write_in_place(copy);
        assert!(float_values(&written, false).iter().all(|v| v[0] == 1000.0));
        assert_eq!(float_values(&layer, false), before);
    }

    /// A replica's own copy trains like the original: same values, same parameter ids, every
    /// parameter still requiring a gradient.
    #[test]
    fn own_buffers_keeps_values_ids_and_gradients() {
        let device = autodiff_device(&Device::flex());
        let layer = trainable(LinearConfig::new(3, 2).init(&Device::flex()), &device);
        let copy = own_buffers(layer.clone());
        let ids = |m: &burn::nn::Linear| -> Vec<_> {
            let mut ids = Vec::new();
            struct Ids<'a>(&'a mut Vec<burn::module::ParamId>);
            impl burn::module::ModuleVisitor for Ids<'_> {
                fn visit_float<const D: usize>(&mut self, p: &burn::module::Param<Tensor<D>>) {
                    self.0.push(p.id);
                }
            }
            m.visit(&mut Ids(&mut ids));
            ids
        };
        assert_eq!(ids(&copy), ids(&layer));
        assert_eq!(float_values(&copy, true), float_values(&layer, false));
        assert_eq!(float_values(&copy, true).len(), 2, "weight and bias train");
    }
}
