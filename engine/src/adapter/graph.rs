//! In and out of autodiff: devices, tensors and modules moved between burn's autodiff and plain
//! execution, and the graph surgery of the split `Linear` product. Every call of burn's autodiff
//! API outside the backward itself ([`super::autodiff`]) is here, so that the rest of the engine
//! says what it wants (a plain copy, a training copy) and not how burn 0.22 spells it.

use burn::module::Module;
use burn::prelude::*;
use burn::tensor::kind::Autodiff;

use super::autodiff::Gradients;

/// `device` without autodiff: where plain tensors (activations between stages, collectives'
/// buffers, hand-computed gradients) live.
pub(crate) fn plain_device(device: &Device) -> Device {
    device.clone().inner()
}

/// `device` with autodiff: where a stage's layers train.
pub(crate) fn autodiff_device(device: &Device) -> Device {
    device.clone().autodiff()
}

/// `t` without autodiff (its values; no graph, no gradient): what crosses a thread or process
/// boundary.
pub(crate) fn plain<const D: usize, K: Autodiff>(t: Tensor<D, K>) -> Tensor<D, K> {
    t.inner()
}

/// A copy of `module` without autodiff and in inference mode (dropout off, batch norm on its
/// running statistics): for forwards that need no backward, and for saving weights.
pub(crate) fn inference_copy<M: Module>(module: &M) -> M {
    module.valid()
}

/// A copy of `module` whose parameters require no gradient, still on the autodiff backend and
/// in training mode: a forward with it runs the training forward's ops (the same inner kernels,
/// so the same bits) and, given an input that requires none either, records no backward step.
/// burn 0.22.1 keeps a recorded step's saved values until a later backward sweeps its graph, so
/// a recorded forward whose graph is merely dropped keeps them that long; an untracked one frees
/// each intermediate with its last handle.
pub(crate) fn untracked_copy<M: Module>(module: &M) -> M {
    module.clone().no_grad()
}

/// `module` on `device` (an autodiff device) in training mode: as a stage's layers train.
pub(crate) fn trainable<M: Module>(module: M, device: &Device) -> M {
    module.to_device(device).train()
}

/// The gradient that reached the leaf `t` in `grads`, plain; zeros of its shape when none did
/// (its value fed nothing that reached the loss).
pub(crate) fn grad_or_zeros<const D: usize>(t: &Tensor<D>, grads: &Gradients) -> Tensor<D> {
    t.grad(grads).unwrap_or_else(|| t.zeros_like().inner())
}

/// What a split `Linear` call leaves for its weight-gradient pass.
pub(crate) struct SplitProduct {
    /// `x·W + z`, on the graph: its backward reaches `x` (`dX = dY·Wᵀ`) and `z`, not `W`.
    pub output: Tensor<2>,
    /// The call's input, plain.
    pub input: Tensor<2>,
    /// The leaf `z` (the bias broadcast over the rows, or zeros): its gradient is `dY`.
    pub leaf: Tensor<2>,
}

/// The product `x·W (+ b)` of a `Linear` with its weight a constant of the graph and its sum
/// with `z` — the bias broadcast to `[rows, fan_out]`, or zeros — a fresh leaf that requires
/// grad (see [`Linears`](crate::Linears)). The same product and the same sum as the plain call,
/// so the same bits. Without `track` the leaf requires no grad: the same arithmetic, recorded
/// nowhere (re-materialization's first pass).
pub(crate) fn split_product(
    x: Tensor<2>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
    track: bool,
) -> SplitProduct {
    let [rows, _] = x.dims();
    let [_, fan_out] = weight.dims();
    let weight = weight.inner().autodiff();
    let device = x.device().inner();
    let leaf = match bias {
        Some(bias) => bias.inner().unsqueeze::<2>().expand([rows, fan_out]),
        None => Tensor::zeros([rows, fan_out], &device),
    }
    .autodiff();
    let leaf = if track { leaf.require_grad() } else { leaf };
    SplitProduct {
        input: x.clone().detach().inner(),
        output: super::gemm::product_rows(x, weight) + leaf.clone(),
        leaf,
    }
}

/// `module` with every float parameter cast to `dtype` on the graph (those in it already as
/// they are): a forward with it computes
/// in `dtype`, and the cast's backward brings each parameter's gradient back to the dtype of its
/// leaf (the fp32 master), where [`Gradients`] find it under the master's id.
pub(crate) fn cast_parameters<M: Module>(module: M, dtype: burn::tensor::FloatDType) -> M {
    struct Cast(burn::tensor::FloatDType);
    impl burn::module::ModuleMapper for Cast {
        fn map_float<const D: usize>(
            &mut self,
            param: burn::module::Param<Tensor<D>>,
        ) -> burn::module::Param<Tensor<D>> {
            let dtype = self.0;
            if param.val().dtype() == burn::tensor::DType::from(dtype) {
                return param;
            }
            param.map(|t| t.cast(dtype))
        }
    }
    module.map(&mut Cast(dtype))
}

/// Bytes of `module`'s float parameters held in a dtype other than fp32: the cast copy a
/// compute copy ([`crate::Layer::compute_copy`]) made (its fp32 parameters share the masters'
/// buffers).
pub(crate) fn cast_copy_bytes<M: Module>(module: &M) -> u64 {
    struct Bytes(u64);
    impl burn::module::ModuleVisitor for Bytes {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
            let t = param.val();
            if t.dtype() != burn::tensor::DType::F32 {
                self.0 += (t.shape().num_elements() * t.dtype().size()) as u64;
            }
        }
    }
    let mut bytes = Bytes(0);
    module.visit(&mut bytes);
    bytes.0
}

/// The container types (burn's `"Struct:LayerNorm"` and the like, without the `Struct:` or
/// `Enum:` prefix) of every module inside `module`, in visiting order.
pub(crate) fn module_types<M: Module>(module: &M) -> Vec<String> {
    struct Types(Vec<String>);
    impl burn::module::ModuleVisitor for Types {
        fn enter_module(&mut self, _name: &str, container_type: &str) {
            let name = container_type
                .strip_prefix("Struct:")
                .or_else(|| container_type.strip_prefix("Enum:"));
            if let Some(name) = name {
                self.0.push(name.to_string());
            }
        }
    }
    let mut types = Types(Vec::new());
    module.visit(&mut types);
    types.0
}

/// Reads every parameter of `module` (burn's module visitor), which draws the lazily initialised
/// ones.
pub(crate) fn materialize<M: Module>(module: &M) {
    struct Materialize;
    impl burn::module::ModuleVisitor for Materialize {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
            let _ = param.val();
        }

        fn visit_int<const D: usize>(
            &mut self,
            param: &burn::module::Param<Tensor<D, burn::tensor::Int>>,
        ) {
            let _ = param.val();
        }
    }
    module.visit(&mut Materialize);
}
