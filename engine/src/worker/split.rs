//! The split backward on a worker: dense layers forwarded and backpropagated by hand, the
//! split `Linear` calls' output gradients picked from their graph, and `W`, which computes the
//! weight gradients they all left in [`Deferred`](crate::model::split::deferred::Deferred) once a group of
//! micro-batches is complete.

use std::ops::Range;

use burn::prelude::*;
use pipetrain_schedules::MicroBatchId;

use crate::adapter;
use crate::error::EngineError;
use crate::model::activation::Activation;
use crate::model::layer::Layer;
use crate::model::split::deferred::Owner;
use crate::model::split::dense;
use crate::model::split::linears::Tap;
use crate::worker::{Failure, Saved, Worker};

impl<L: Layer> Worker<'_, L> {
    /// Dense layers of the stage (`layers`: the layers or their inference copies) by hand; with
    /// `save`, each layer's input and output for the backward.
    pub(crate) fn forward_dense(
        &mut self,
        layers: &[L],
        input: Activation,
        save: bool,
    ) -> Result<(Activation, Vec<Saved>, Vec<usize>), Failure> {
        let shown = input.to_string();
        let layer_error = |error: EngineError| {
            Failure::Cause(EngineError::Layer {
                error: Box::new(error),
                input: shown.clone(),
                from: String::new(),
            })
        };
        let (mut x, lead) = dense::to_rows(input.plain()).map_err(layer_error)?;
        let mut saved = Vec::with_capacity(if save { layers.len() } else { 0 });
        for layer in layers {
            let dense = layer.dense().expect("a dense run holds dense layers");
            let y = dense.forward(x.clone()).map_err(layer_error)?;
            if save {
                saved.push(Saved {
                    input: x,
                    output: y.clone(),
                });
            }
            x = y;
        }
        Ok((dense::from_rows(x, &lead), saved, lead))
    }

    /// The input gradients of a dense segment, last layer first; each layer's input and
    /// pre-activation gradient wait for `W`.
    pub(crate) fn backward_dense(
        &mut self,
        mb: MicroBatchId,
        layers: Range<usize>,
        saved: Vec<Saved>,
        grad: Activation,
        input_grad: bool,
    ) -> Result<Option<Tensor<2>>, Failure> {
        let (mut grad, _) =
            dense::to_rows(grad).map_err(|e| Failure::Cause(EngineError::Gradient(Box::new(e))))?;
        let first = layers.start;
        for (i, Saved { input, output }) in layers.zip(saved).rev() {
            let dense = self.state.layers[i].dense().expect("a dense layer");
            let pre = dense.pre_activation_grad(&output, grad);
            let wanted = i > first || input_grad;
            let next = wanted.then(|| dense.input_grad(pre.clone()));
            self.scratch.deferred.put(
                mb,
                Owner::Dense { layer: i },
                dense.params(),
                (input, false),
                pre,
            );
            match next {
                Some(next) => grad = next,
                None => return Ok(None),
            }
        }
        Ok(Some(grad))
    }

    /// The split `Linear` calls of a graph segment, after its backward: each call's input and
    /// output gradient wait for `W` (zeros for a call whose output did not reach the loss).
    pub(crate) fn defer_taps(
        &mut self,
        mb: MicroBatchId,
        taps: Vec<(usize, Vec<Tap>)>,
        grads: &adapter::Gradients,
    ) {
        for (layer, calls) in taps {
            for (call, tap) in calls.into_iter().enumerate() {
                let grad = adapter::grad_or_zeros(&tap.output, grads);
                let owner = Owner::Linear { layer, call };
                self.scratch.deferred.put(
                    mb,
                    owner,
                    tap.params,
                    (tap.input, tap.shared_input),
                    grad,
                );
            }
        }
    }

    /// `W`: the weight gradients of the dense layers and split `Linear` calls, once `mb`
    /// completes its group.
    pub(crate) fn backward_weight(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
        let Some(group) = self.scratch.deferred.release(mb) else {
            return Ok(());
        };
        let mut grads = adapter::Grads::new();
        for w in group.owners {
            let (weight, bias) = dense::weight_grads(w.inputs, w.grads, w.params.has_bias());
            w.params.register(&mut grads, weight, bias);
        }
        self.state.grads.add_params(&self.state.layers, grads);
        Ok(())
    }
}
