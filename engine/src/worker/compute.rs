//! Computing: forward (with a graph, without one for inference and re-materialization), the
//! loss, and backward seeded by the downstream gradient.

use burn::prelude::*;
use pipetrain_schedules::MicroBatchId;

use super::interpreter::{Failure, Worker};
use std::ops::Range;

use crate::activation::Activation;
use crate::adapter;
use crate::deferred::Owner;
use crate::dense;
use crate::error::Cause;
use crate::layer::Layer;
use crate::linears::{Linears, Tap};
use crate::stash::Stashed;
use crate::tape::{self, Saved, Segment, Tape};
use crate::transport::{Flow, Tag};

impl<L: Layer> Worker<'_, L> {
    fn input(&mut self, mb: MicroBatchId) -> Activation {
        if self.is_first() {
            let input = self.feed.inputs[mb.index()]
                .take()
                .expect("each micro-batch is forwarded once");
            input.to_device(&self.state.device)
        } else {
            self.received
                .remove(&Tag {
                    flow: Flow::Activation,
                    micro_batch: mb,
                })
                .expect("validated: receive before forward")
        }
    }

    fn target(&mut self, mb: MicroBatchId) -> Option<Activation> {
        self.is_last().then(|| {
            let t = self.feed.targets[mb.index()]
                .take()
                .expect("each micro-batch is forwarded once");
            t.to_device(&self.state.device)
        })
    }

    /// Forward through this stage's layers; a layer error names the input and where it came from.
    fn forward_layers(&mut self, layers: &[L], x: Activation) -> Result<Activation, Failure> {
        self.forward_layers_split(layers, x, None)
    }

    /// [`Self::forward_layers`], with the `Linear` calls of the layers that
    /// [split them](Layer::splits_linears) split when `split` collects them: per such layer, its
    /// index among `layers` and its calls' kept values.
    fn forward_layers_split(
        &mut self,
        layers: &[L],
        mut x: Activation,
        mut split: Option<&mut Vec<(usize, Vec<Tap>)>>,
    ) -> Result<Activation, Failure> {
        let shown = x.to_string();
        let from = if self.is_first() {
            String::new()
        } else {
            format!(" received from stage {}", self.id().stage.0 - 1)
        };
        self.input_context = Some(format!(" (input: {shown}{from})"));
        for (i, layer) in layers.iter().enumerate() {
            let out = match split.as_deref_mut() {
                Some(taps) if layer.splits_linears() => {
                    let mut linears = Linears::split();
                    let out = layer.forward_linears(x, &mut linears);
                    taps.push((i, linears.into_taps()));
                    out
                }
                _ => layer.forward(x),
            };
            x = out.map_err(|error| {
                Failure::Cause(Cause::Layer {
                    error,
                    input: shown.clone(),
                    from: from.clone(),
                })
            })?;
        }
        self.input_context = None;
        Ok(x)
    }

    fn scaled_loss(
        &self,
        mb: MicroBatchId,
        output: Activation,
        target: Activation,
    ) -> Result<Tensor<1>, Failure> {
        let loss = self
            .ctx
            .loss
            .as_ref()
            .expect("a training step has a loss")
            .loss(output, target)
            .map_err(|e| Failure::Cause(Cause::Loss(e)))?;
        Ok(loss.mul_scalar(self.ctx.loss_scale * self.feed.weights[mb.index()]))
    }

    /// The stage's forward without autodiff: the layers' `valid()` copies (cached until the next
    /// optimizer step), and with a split backward the dense layers by hand exactly as a
    /// training forward runs them (so a re-materialized forward sends the same bits).
    fn forward_plain(&mut self, input: Activation) -> Result<Activation, Failure> {
        let valid = self
            .valid
            .get_or_insert_with(|| self.state.layers.iter().map(|l| l.valid()).collect());
        let valid = std::mem::take(valid);
        let out = self.forward_runs_plain(&valid, input);
        self.valid = Some(valid);
        Ok(out?.detach())
    }

    fn forward_runs_plain(
        &mut self,
        valid: &[L],
        mut x: Activation,
    ) -> Result<Activation, Failure> {
        for run in tape::runs(valid, self.ctx.split) {
            let part = &valid[run.layers.clone()];
            x = if run.dense {
                self.forward_dense(part, x, false)?.0
            } else {
                self.forward_layers(part, x)?
            };
        }
        Ok(x)
    }

    pub(super) fn forward(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
        let input = self.input(mb);
        let input = self.with_skips(mb, input)?;
        if self.ctx.loss.is_none() {
            // Inference: no graph, no stash; the last stage keeps the output.
            let out = self.forward_plain(input)?;
            if self.is_last() {
                self.outputs.push((mb, out));
            } else {
                self.queue_output(mb, out)?;
            }
            return Ok(());
        }
        let target = self.target(mb);
        if self.ctx.remat.applies(mb.index(), self.ctx.micro_batches) {
            if !self.is_last() {
                // The forward's only consumer downstream: compute it without a graph.
                let out = self.forward_plain(input.clone())?;
                self.queue_output(mb, out)?;
            }
            // On the last stage the output feeds only its own backward: nothing to do until then.
            self.stash.put(mb, Stashed::Input { input, target });
        } else {
            let stashed = self.forward_tape(mb, input, target)?;
            self.stash.put(mb, stashed);
        }
        Ok(())
    }

    /// The training forward of one micro-batch, segment by segment (see [`crate::tape`]); an
    /// inner stage's output is queued for sending.
    fn forward_tape(
        &mut self,
        mb: MicroBatchId,
        input: Activation,
        target: Option<Activation>,
    ) -> Result<Stashed, Failure> {
        let layers = std::mem::take(&mut self.state.layers);
        let tape = self.record(&layers, input, target, mb);
        self.state.layers = layers;
        Ok(Stashed::Tape(tape?))
    }

    fn record(
        &mut self,
        layers: &[L],
        input: Activation,
        target: Option<Activation>,
        mb: MicroBatchId,
    ) -> Result<Tape, Failure> {
        let mut segments = Vec::new();
        let mut x = input;
        for (i, run) in tape::runs(layers, self.ctx.split).into_iter().enumerate() {
            // Stage 0's input is data: no gradient flows to it.
            let input_grad = i > 0 || !self.is_first();
            let part = &layers[run.layers.clone()];
            if run.dense {
                let (out, saved, lead) = self.forward_dense(part, x, true)?;
                segments.push(Segment::Dense {
                    layers: run.layers,
                    saved,
                    lead,
                    input_grad,
                });
                x = out;
            } else {
                let leaf = adapter::leaf(x.detach(), input_grad);
                let mut taps = Vec::new();
                let split = self.ctx.split.then_some(&mut taps);
                let out = self.forward_layers_split(part, leaf.clone(), split)?;
                let first = run.layers.start;
                segments.push(Segment::Graph {
                    input: leaf,
                    output: out.clone(),
                    taps: taps.into_iter().map(|(i, t)| (first + i, t)).collect(),
                });
                x = out;
            }
        }
        let loss = match target {
            Some(target) => {
                // A dense last segment ends in a plain tensor: the loss starts a graph of its own.
                let leaf = match segments.last() {
                    Some(Segment::Dense { .. }) => Some(adapter::leaf(x.clone(), true)),
                    _ => None,
                };
                let output = leaf.clone().unwrap_or(x);
                Some((self.scaled_loss(mb, output, target)?, leaf))
            }
            None => {
                self.queue_output(mb, x.detach())?;
                None
            }
        };
        Ok(Tape { segments, loss })
    }

    /// Dense layers of the stage (`layers`: the layers or their `valid()` copies) by hand; with `save`, each layer's input and output for the backward.
    fn forward_dense(
        &mut self,
        layers: &[L],
        input: Activation,
        save: bool,
    ) -> Result<(Activation, Vec<Saved>, Vec<usize>), Failure> {
        let shown = input.to_string();
        let layer_error = |error| {
            Failure::Cause(Cause::Layer {
                error,
                input: shown.clone(),
                from: String::new(),
            })
        };
        let (mut x, lead) = dense::to_rows(input.detach()).map_err(layer_error)?;
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

    /// Backward of one micro-batch (`B`, or `I` when the backward is split): the input gradient,
    /// queued for sending upstream, and the parameter gradients of the layers on the autodiff
    /// path; the dense layers' weight gradients wait for `W` ([`Self::backward_weight`]).
    pub(super) fn backward(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
        let stashed = self
            .stash
            .take(mb)
            .expect("validated: forward before backward");
        let tape = match stashed {
            Stashed::Tape(tape) => tape,
            Stashed::Input { input, target } => match self.forward_tape(mb, input, target)? {
                Stashed::Tape(tape) => {
                    // The recomputed output was queued for sending again; it was sent already.
                    self.drop_queued_output(mb);
                    tape
                }
                Stashed::Input { .. } => unreachable!("forward_tape records a tape"),
            },
        };
        let mut upstream = match tape.loss {
            Some((loss, leaf)) => {
                self.losses.push(adapter::detached(&loss));
                let grads = adapter::backward_loss(&loss);
                match leaf {
                    Some(leaf) => Upstream::Grad(
                        adapter::input_grad(&leaf, &grads).expect("the loss leaf requires grad"),
                    ),
                    None => Upstream::Graph(grads),
                }
            }
            None => {
                let grad = self
                    .received
                    .remove(&Tag {
                        flow: Flow::Gradient,
                        micro_batch: mb,
                    })
                    .expect("validated: gradient received before backward");
                Upstream::Grad(self.with_skip_grads(mb, grad)?)
            }
        };
        let mut segments = tape.segments;
        let mut input_grad = None;
        while let Some(segment) = segments.pop() {
            input_grad = match segment {
                Segment::Graph {
                    input,
                    output,
                    taps,
                } => {
                    let grads = match upstream {
                        Upstream::Graph(grads) => grads,
                        Upstream::Grad(grad) => adapter::backward_seeded(&output, grad)
                            .map_err(|e| Failure::Cause(Cause::Gradient(e)))?,
                    };
                    self.defer_taps(mb, taps, &grads);
                    let grad = adapter::input_grad(&input, &grads);
                    self.state.grads.add(&self.state.layers, grads);
                    grad
                }
                Segment::Dense {
                    layers,
                    saved,
                    lead,
                    input_grad,
                } => {
                    let Upstream::Grad(grad) = upstream else {
                        unreachable!("a dense segment's gradient is a tensor")
                    };
                    self.backward_dense(mb, layers, saved, grad, input_grad)?
                        .map(|g| dense::from_rows(g, &lead))
                }
            };
            upstream = match &input_grad {
                Some(grad) => Upstream::Grad(grad.clone()),
                None => break,
            };
        }
        self.state.grads.count_micro_batch();
        if !self.is_first() {
            let grad = input_grad.ok_or(Failure::Cause(Cause::NoInputGradient))?;
            self.queue_input_grad(mb, grad)?;
        }
        Ok(())
    }

    /// The input gradients of a dense segment, last layer first; each layer's input and
    /// pre-activation gradient wait for `W`.
    fn backward_dense(
        &mut self,
        mb: MicroBatchId,
        layers: Range<usize>,
        saved: Vec<Saved>,
        grad: Activation,
        input_grad: bool,
    ) -> Result<Option<Tensor<2>>, Failure> {
        let (mut grad, _) = dense::to_rows(grad).map_err(|e| Failure::Cause(Cause::Gradient(e)))?;
        let first = layers.start;
        for (i, Saved { input, output }) in layers.zip(saved).rev() {
            let dense = self.state.layers[i].dense().expect("a dense layer");
            let pre = dense.pre_activation_grad(&output, grad);
            let wanted = i > first || input_grad;
            let next = wanted.then(|| dense.input_grad(pre.clone()));
            self.deferred
                .put(mb, Owner::Dense { layer: i }, dense.params(), input, pre);
            match next {
                Some(next) => grad = next,
                None => return Ok(None),
            }
        }
        Ok(Some(grad))
    }

    /// The split `Linear` calls of a graph segment, after its backward: each call's input and
    /// output gradient wait for `W` (zeros for a call whose output did not reach the loss).
    fn defer_taps(
        &mut self,
        mb: MicroBatchId,
        taps: Vec<(usize, Vec<Tap>)>,
        grads: &adapter::Gradients,
    ) {
        for (layer, calls) in taps {
            for (call, tap) in calls.into_iter().enumerate() {
                let grad = tap
                    .output
                    .grad(grads)
                    .unwrap_or_else(|| tap.output.zeros_like().inner());
                let owner = Owner::Linear { layer, call };
                self.deferred.put(mb, owner, tap.params, tap.input, grad);
            }
        }
    }

    /// `W`: the weight gradients of the dense layers and split `Linear` calls, once `mb`
    /// completes its group.
    pub(super) fn backward_weight(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
        let Some(group) = self.deferred.release(mb) else {
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

/// The gradient flowing into a segment from above: a tensor, or the graph's own gradients when
/// the segment's output fed the loss directly.
// One value at a time, on the stack of one backward.
#[allow(clippy::large_enum_variant)]
enum Upstream {
    Grad(Activation),
    Graph(adapter::Gradients),
}
