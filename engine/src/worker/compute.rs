//! Computing: forward (with a graph, without one for inference and re-materialization), the
//! loss, and backward seeded by the downstream gradient.

use burn::prelude::*;
use pipetrain_schedules::MicroBatchId;

use super::interpreter::{Failure, Worker};
use crate::activation::Activation;
use crate::adapter;
use crate::error::Cause;
use crate::layer::Layer;
use crate::stash::{Output, Stashed};
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
    fn forward_layers(&mut self, layers: &[L], mut x: Activation) -> Result<Activation, Failure> {
        let shown = x.to_string();
        let from = if self.is_first() {
            String::new()
        } else {
            format!(" received from stage {}", self.id().stage.0 - 1)
        };
        self.input_context = Some(format!(" (input: {shown}{from})"));
        for layer in layers {
            x = layer.forward(x).map_err(|error| {
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

    fn scaled_loss(&self, output: Activation, target: Activation) -> Result<Tensor<1>, Failure> {
        let loss = self
            .ctx
            .loss
            .as_ref()
            .expect("a training step has a loss")
            .loss(output, target)
            .map_err(|e| Failure::Cause(Cause::Loss(e)))?;
        Ok(loss.mul_scalar(self.ctx.loss_scale))
    }

    /// The stage's layers without autodiff (cached until the next optimizer step).
    fn forward_plain(&mut self, input: Activation) -> Result<Activation, Failure> {
        let valid = self
            .valid
            .get_or_insert_with(|| self.state.layers.iter().map(|l| l.valid()).collect());
        let valid = std::mem::take(valid);
        let out = self.forward_layers(&valid, input);
        self.valid = Some(valid);
        Ok(out?.detach())
    }

    pub(super) fn forward(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
        let input = self.input(mb);
        let activation = Tag {
            flow: Flow::Activation,
            micro_batch: mb,
        };
        if self.ctx.loss.is_none() {
            // Inference: no graph, no stash; the last stage keeps the output.
            let out = self.forward_plain(input)?;
            if self.is_last() {
                self.outputs.push((mb, out));
            } else {
                self.outgoing.insert(activation, out);
            }
            return Ok(());
        }
        let target = self.target(mb);
        if self.ctx.remat.applies(mb.index(), self.ctx.micro_batches) {
            if !self.is_last() {
                // The forward's only consumer downstream: compute it without a graph.
                let out = self.forward_plain(input.clone())?;
                self.outgoing.insert(activation, out);
            }
            // On the last stage the output feeds only its own backward: nothing to do until then.
            self.stash.put(mb, Stashed::Input { input, target });
        } else {
            let stashed = self.forward_with_graph(mb, input, target)?;
            self.stash.put(mb, stashed);
        }
        Ok(())
    }

    fn forward_with_graph(
        &mut self,
        mb: MicroBatchId,
        input: Activation,
        target: Option<Activation>,
    ) -> Result<Stashed, Failure> {
        let leaf = adapter::leaf(input, !self.is_first());
        let layers = std::mem::take(&mut self.state.layers);
        let out = self.forward_layers(&layers, leaf.clone());
        self.state.layers = layers;
        let out = out?;
        let output = match target {
            Some(target) => Output::Loss(self.scaled_loss(out, target)?),
            None => {
                self.outgoing.insert(
                    Tag {
                        flow: Flow::Activation,
                        micro_batch: mb,
                    },
                    out.clone().detach(),
                );
                Output::Activation(out)
            }
        };
        Ok(Stashed::Graph {
            input: leaf,
            output,
        })
    }

    pub(super) fn backward(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
        let stashed = self
            .stash
            .take(mb)
            .expect("validated: forward before backward");
        let (input, output) = match stashed {
            Stashed::Graph { input, output } => (input, output),
            Stashed::Input { input, target } => match self.forward_with_graph(mb, input, target)? {
                Stashed::Graph { input, output } => {
                    // The recomputed output was queued for sending again; it was sent already.
                    self.outgoing.remove(&Tag {
                        flow: Flow::Activation,
                        micro_batch: mb,
                    });
                    (input, output)
                }
                Stashed::Input { .. } => unreachable!("forward_with_graph stashes a graph"),
            },
        };
        let grads = match output {
            Output::Loss(loss) => {
                self.loss += adapter::scalar(&loss);
                adapter::backward_loss(&loss)
            }
            Output::Activation(out) => {
                let grad = self
                    .received
                    .remove(&Tag {
                        flow: Flow::Gradient,
                        micro_batch: mb,
                    })
                    .expect("validated: gradient received before backward");
                adapter::backward_seeded(&out, grad)
                    .map_err(|e| Failure::Cause(Cause::Gradient(e)))?
            }
        };
        if !self.is_first() {
            let grad = adapter::input_grad(&input, &grads).ok_or_else(|| {
                Failure::Cause(Cause::Unsupported(format!(
                    "no gradient reached this stage's input ({input}); the stage's output does \
                     not depend on it"
                )))
            })?;
            self.outgoing.insert(
                Tag {
                    flow: Flow::Gradient,
                    micro_batch: mb,
                },
                grad,
            );
        }
        self.state.grads.add(&self.state.layers, grads);
        Ok(())
    }
}
