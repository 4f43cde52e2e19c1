//! Computing: a micro-batch's forward — recorded segment by segment for its backward (a
//! [`Tape`]), or without a graph for inference — the loss, and backward seeded by the downstream
//! gradient. Re-materialization is [`crate::worker::remat`]'s, the dense layers and deferred weight
//! gradients of a split backward [`crate::model::split`]'s, the skips' messages [`crate::skips`]'.

use burn::prelude::*;
use pipetrain_schedules::MicroBatchId;

use super::interpreter::{Failure, Worker};
use super::stash::Stashed;
use super::tape::{self, Segment, Tape};
use crate::adapter;
use crate::comm::transport::{Flow, Tag};
use crate::error::EngineError;
use crate::model::activation::Activation;
use crate::model::layer::Layer;
use crate::model::split::dense;
use crate::model::split::linears::{Linears, Tap};

impl<L: Layer> Worker<'_, L> {
    fn input(&mut self, mb: MicroBatchId) -> Activation {
        if self.is_first() {
            let input = self.scratch.feed.inputs[mb.index()]
                .take()
                .expect("each micro-batch is forwarded once");
            input.to_device(&self.state.device)
        } else {
            self.scratch
                .received
                .remove(&tag(Flow::Activation, mb))
                .expect("validated: receive before forward")
        }
    }

    fn target(&mut self, mb: MicroBatchId) -> Option<Activation> {
        self.is_last().then(|| {
            let t = self.scratch.feed.targets[mb.index()]
                .take()
                .expect("each micro-batch is forwarded once");
            t.to_device(&self.state.device)
        })
    }

    /// Forward through this stage's layers; a layer error names the input and where it came from.
    fn forward_layers(&mut self, layers: &[L], x: Activation) -> Result<Activation, Failure> {
        self.forward_layers_split(layers, x, Calls::Plain)
    }

    /// [`Self::forward_layers`], with the `Linear` calls of the layers that
    /// [split them](Layer::splits_linears) run as `calls` says.
    fn forward_layers_split(
        &mut self,
        layers: &[L],
        mut x: Activation,
        mut calls: Calls<'_>,
    ) -> Result<Activation, Failure> {
        let shown = x.to_string();
        let from = if self.is_first() {
            String::new()
        } else {
            format!(" received from stage {}", self.id().stage.0 - 1)
        };
        self.scratch.input_context = Some(format!(" (input: {shown}{from})"));
        for (i, layer) in layers.iter().enumerate() {
            let out = match &mut calls {
                Calls::Split(taps) if layer.splits_linears() => {
                    let mut linears = Linears::split();
                    let out = layer.forward_linears(x, &mut linears);
                    taps.push((i, linears.into_taps()));
                    out
                }
                Calls::Replay if layer.splits_linears() => {
                    layer.forward_linears(x, &mut Linears::replay())
                }
                _ => layer.forward(x),
            };
            x = out.map_err(|error| {
                Failure::Cause(EngineError::Layer {
                    error: Box::new(error),
                    input: shown.clone(),
                    from: from.clone(),
                })
            })?;
        }
        self.scratch.input_context = None;
        Ok(x)
    }

    fn scaled_loss(
        &self,
        mb: MicroBatchId,
        output: Activation,
        target: Activation,
    ) -> Result<Tensor<1>, Failure> {
        let training = self.training();
        let loss = training
            .loss
            .loss(self.ctx.precision.output(output), target)
            .map_err(|e| Failure::Cause(EngineError::Loss(Box::new(e))))?;
        Ok(loss.mul_scalar(training.loss_scale * self.scratch.feed.weights[mb.index()]))
    }

    /// The stage's forward without autodiff, for inference: the layers' inference copies (made
    /// once a step), and with a split backward the dense layers by hand as a training forward
    /// runs them.
    pub(crate) fn forward_plain(&mut self, input: Activation) -> Result<Activation, Failure> {
        let precision = self.ctx.precision;
        let valid = self.scratch.valid.get_or_insert_with(|| {
            let valid: Vec<L> = self
                .state
                .layers
                .iter()
                .map(adapter::inference_copy)
                .collect();
            precision.layers(&valid)
        });
        let valid = std::mem::take(valid);
        let out = self.forward_runs_plain(&valid, input);
        self.scratch.valid = Some(valid);
        Ok(out?.plain())
    }

    fn forward_runs_plain(
        &mut self,
        valid: &[L],
        mut x: Activation,
    ) -> Result<Activation, Failure> {
        for run in tape::runs(valid, self.ctx.job.split()) {
            let part = &valid[run.layers.clone()];
            x = if run.dense {
                self.forward_dense(part, x, false)?.0
            } else {
                self.forward_layers(part, x)?
            };
        }
        Ok(x)
    }

    /// `F`: the forward of micro-batch `mb`. Training keeps what the backward needs (the tape,
    /// or with re-materialization only the input); inference keeps nothing, and the last stage
    /// the output.
    pub(super) fn forward(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
        let mut input = self.input(mb);
        if self.skips.pops() {
            let received = &mut self.scratch.received;
            input = self
                .skips
                .join_input(mb, input, received, &self.state.device)?;
        }
        let input = self.ctx.precision.input(self.state.layers.first(), input);
        let Some(training) = self.ctx.job.training() else {
            let out = self.forward_plain(input)?;
            if self.is_last() {
                self.scratch.outputs.push((mb, out));
            } else {
                self.queue(Flow::Activation, mb, out)?;
            }
            return Ok(());
        };
        let target = self.target(mb);
        if training.remat.applies(mb.index(), self.ctx.micro_batches) {
            return self.forward_remat(mb, input, target);
        }
        let (tape, output) = self.forward_tape(mb, input, target)?;
        if let Some(output) = output {
            self.queue(Flow::Activation, mb, output.plain())?;
        }
        self.scratch.stash.put(mb, Stashed::Tape(tape));
        Ok(())
    }

    /// The training forward of one micro-batch, segment by segment (see [`super::tape`]), and
    /// an inner stage's output (still on the graph; the last stage's feeds the loss instead).
    pub(crate) fn forward_tape(
        &mut self,
        mb: MicroBatchId,
        input: Activation,
        target: Option<Activation>,
    ) -> Result<(Tape, Option<Activation>), Failure> {
        // A copy of the handles, not the layers taken out: a layer that panics must leave the
        // stage its layers, which a checkpoint loads into after the failed step.
        let layers = self.state.layers.clone();
        self.record(&layers, input, target, mb)
    }

    /// The training forward's output with nothing kept for a backward (re-materialization's
    /// first pass): the same runs and the same ops on the autodiff backend as
    /// [`Self::forward_tape`], so the same bits, on copies of the layers whose parameters
    /// require no gradient ([`adapter::untracked_copy`]), from an input that requires none,
    /// and with split `Linear`s [replayed](Linears::replay). No op records a backward step, so
    /// each intermediate is freed once the next op has read it: a recorded forward's dropped
    /// graph kept its saved values until the stage's next backward.
    pub(crate) fn forward_untracked(&mut self, input: Activation) -> Result<Activation, Failure> {
        let split = self.ctx.job.split();
        let layers: Vec<L> = self
            .state
            .layers
            .iter()
            .map(adapter::untracked_copy)
            .collect();
        let mut x = input;
        for run in tape::runs(&layers, split) {
            let part = &layers[run.layers.clone()];
            x = if run.dense {
                self.forward_dense(part, x, false)?.0
            } else {
                let leaf = crate::model::tracking::leaf(x.plain(), false);
                let part = self.ctx.precision.layers(part);
                let calls = match split {
                    true => Calls::Replay,
                    false => Calls::Plain,
                };
                self.forward_layers_split(&part, leaf, calls)?
            };
        }
        Ok(x)
    }

    fn record(
        &mut self,
        layers: &[L],
        input: Activation,
        target: Option<Activation>,
        mb: MicroBatchId,
    ) -> Result<(Tape, Option<Activation>), Failure> {
        let split = self.ctx.job.split();
        let mut segments = Vec::new();
        let mut x = input;
        for (i, run) in tape::runs(layers, split).into_iter().enumerate() {
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
                let leaf = crate::model::tracking::leaf(x.plain(), input_grad);
                let mut taps = Vec::new();
                // The compute copy: under bf16 the parameters cast on the graph, per forward.
                let part = self.ctx.precision.layers(part);
                let calls = match split {
                    true => Calls::Split(&mut taps),
                    false => Calls::Plain,
                };
                let out = self.forward_layers_split(&part, leaf.clone(), calls)?;
                let first = run.layers.start;
                segments.push(Segment::Graph {
                    input: leaf,
                    output: out.clone(),
                    taps: taps.into_iter().map(|(i, t)| (first + i, t)).collect(),
                });
                x = out;
            }
        }
        let Some(target) = target else {
            return Ok((
                Tape {
                    segments,
                    loss: None,
                },
                Some(x),
            ));
        };
        // A dense last segment ends in a plain tensor: the loss starts a graph of its own.
        let leaf = match segments.last() {
            Some(Segment::Dense { .. }) => Some(crate::model::tracking::leaf(x.clone(), true)),
            _ => None,
        };
        let output = leaf.clone().unwrap_or(x);
        let loss = Some((self.scaled_loss(mb, output, target)?, leaf));
        Ok((Tape { segments, loss }, None))
    }

    /// Queues `value` of `mb` for sending on `flow`: this stage's (plain) output downstream
    /// ([`Flow::Activation`]) or its input gradient upstream ([`Flow::Gradient`]), the skips'
    /// parts taken out first and sent straight to their peers.
    pub(crate) fn queue(
        &mut self,
        flow: Flow,
        mb: MicroBatchId,
        mut value: Activation,
    ) -> Result<(), Failure> {
        if self.skips.splits(flow) {
            value = self
                .skips
                .split(flow, mb, value, &mut self.scratch.outgoing)?;
        }
        self.scratch.outgoing.insert(tag(flow, mb), value);
        Ok(())
    }

    /// Backward of one micro-batch (`B`, or `I` when the backward is split): the input gradient,
    /// queued for sending upstream, and the parameter gradients of the layers on the autodiff
    /// path; the dense layers' and split `Linear`s' weight gradients wait for `W`
    /// ([`Self::backward_weight`]).
    pub(super) fn backward(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
        let tape = match self.scratch.stash.take(mb) {
            Some(Stashed::Tape(tape)) => tape,
            Some(Stashed::Input { input, target }) => self.recompute(mb, input, target)?,
            None => unreachable!("validated: forward before backward"),
        };
        let mut upstream = match tape.loss {
            Some((loss, leaf)) => {
                self.scratch.losses.push(adapter::detached(&loss));
                let grads = adapter::backward_loss(&loss);
                match leaf {
                    Some(leaf) => Upstream::Grad(
                        crate::model::tracking::input_grad(&leaf, &grads)
                            .expect("the loss leaf requires grad"),
                    ),
                    None => Upstream::Graph(grads),
                }
            }
            None => {
                let received = &mut self.scratch.received;
                let mut grad = received
                    .remove(&tag(Flow::Gradient, mb))
                    .expect("validated: gradient received before backward");
                if self.skips.stashes() {
                    grad = self
                        .skips
                        .join_grad(mb, grad, received, &self.state.device)?;
                }
                Upstream::Grad(grad)
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
                        Upstream::Grad(grad) => crate::model::tracking::backward_seeded(
                            &output,
                            grad.cast_like(&output),
                        )
                        .map_err(|e| Failure::Cause(EngineError::Gradient(Box::new(e))))?,
                    };
                    self.defer_taps(mb, taps, &grads);
                    let grad = crate::model::tracking::input_grad(&input, &grads);
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
            let grad = input_grad.ok_or(Failure::Cause(EngineError::NoInputGradient))?;
            self.queue(Flow::Gradient, mb, grad)?;
        }
        Ok(())
    }
}

/// The message of `flow` for micro-batch `mb`.
/// How a forward runs the `Linear` calls of the layers that
/// [split them](Layer::splits_linears).
enum Calls<'a> {
    /// As burn runs them.
    Plain,
    /// Split: per such layer, its index among the layers and its calls' kept values.
    Split(&'a mut Vec<(usize, Vec<Tap>)>),
    /// The split arithmetic, nothing kept ([`Linears::replay`]).
    Replay,
}

fn tag(flow: Flow, micro_batch: MicroBatchId) -> Tag {
    Tag { flow, micro_batch }
}

/// The gradient flowing into a segment from above: a tensor, or the graph's own gradients when
/// the segment's output fed the loss directly.
// One value at a time, on the stack of one backward.
#[allow(clippy::large_enum_variant)]
enum Upstream {
    Grad(Activation),
    Graph(adapter::Gradients),
}
