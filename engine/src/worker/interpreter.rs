//! The worker: interprets one stage's lowered program, action by action.
//!
//! The worker knows nothing of schedules. Each action kind has one meaning (see
//! `pipetrain_schedules::ActionKind`); the order is the plan's.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::prelude::*;
use pipetrain_schedules::{Action, ActionKind, MicroBatchId, WorkerId};

use crate::abort::Abort;
use crate::activation::Activation;
use crate::adapter::{self, Buffers, Slots};
use crate::collective::{Collective, CollectiveError};
use crate::error::{Cause, EngineError, panic_message};
use crate::loss::Loss;
use crate::remat::Remat;
use crate::report::WorkerReport;
use crate::stash::{Output, Stash, Stashed};
use crate::tie::{self, TieSlot};
use crate::transport::{Flow, Tag, Transport, TransportError};
use crate::worker::WorkerState;
use burn::optim::GradientsParams;

/// What the whole step shares.
pub(crate) struct StepContext<'a> {
    pub stages: usize,
    pub micro_batches: usize,
    pub learning_rate: f64,
    pub remat: Remat,
    /// The loss on the last stage; `None` for an inference run.
    pub loss: Option<&'a dyn Loss>,
    /// 1 / (m · R): makes the summed gradients the full-batch mean gradient.
    pub loss_scale: f64,
    pub abort: Arc<Abort>,
    pub start: Instant,
    /// Values per all-reduce bucket.
    pub bucket_elems: usize,
    /// ZeRO-1: each replica keeps optimizer state for its own share of the parameters.
    pub zero: bool,
}

/// What a worker that finished its program hands back.
pub(crate) struct Finished {
    /// Its share of the step's loss (last stage of a training step), else 0.
    pub loss: f64,
    pub report: WorkerReport,
    /// The last stage's outputs of an inference run, by micro-batch.
    pub outputs: Vec<(MicroBatchId, Activation)>,
}

/// Stage 0 reads micro-batch inputs from here, the last stage targets.
#[derive(Default)]
pub(crate) struct Feed {
    pub inputs: Vec<Option<Activation>>,
    pub targets: Vec<Option<Activation>>,
}

/// An action failed; `Stopped` means another worker failed first.
enum Failure {
    Cause(Cause),
    Stopped,
}

impl From<CollectiveError> for Failure {
    fn from(e: CollectiveError) -> Self {
        match e {
            CollectiveError::Aborted => Failure::Stopped,
            other => Failure::Cause(Cause::Collective(other)),
        }
    }
}

impl From<TransportError> for Failure {
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::Aborted => Failure::Stopped,
            other => Failure::Cause(Cause::Transport(other.to_string())),
        }
    }
}

/// Gradients after the all-reduce, waiting for the optimizer step.
struct Reduced {
    grads: GradientsParams,
    /// With ZeRO-1: which replica owns (updates) which parameter.
    sharded: Option<Sharded>,
}

/// ZeRO-1 ownership of a stage's parameters.
struct Sharded {
    slots: Slots,
    owners: Vec<usize>,
}

/// This worker's share of the step's tied parameters.
pub(crate) struct Tied<'a> {
    /// The tied parameters it holds.
    pub slots: Vec<TieSlot>,
    /// Per tie held also by another worker of this replica: the group of the two.
    pub links: HashMap<usize, Box<dyn Collective + 'a>>,
}

pub(crate) struct Worker<'a, L: Layer, T: Transport> {
    pub state: &'a mut WorkerState<L>,
    pub transport: T,
    collective: Box<dyn Collective + 'a>,
    tied: Tied<'a>,
    reduced: Option<Reduced>,
    all_reduce: Option<(Duration, Duration)>,
    backward_end: Option<Duration>,
    pub feed: Feed,
    pub ctx: &'a StepContext<'a>,
    stash: Stash,
    received: HashMap<Tag, Activation>,
    outgoing: HashMap<Tag, Activation>,
    valid: Option<Vec<L>>,
    loss: f64,
    outputs: Vec<(MicroBatchId, Activation)>,
    compute: Duration,
    /// Set while layers run: the input and its origin, for panic messages.
    input_context: Option<String>,
}

use crate::layer::Layer;

impl<'a, L: Layer, T: Transport> Worker<'a, L, T> {
    pub fn new(
        state: &'a mut WorkerState<L>,
        transport: T,
        collective: Box<dyn Collective + 'a>,
        tied: Tied<'a>,
        feed: Feed,
        ctx: &'a StepContext<'a>,
    ) -> Self {
        Self {
            state,
            transport,
            collective,
            tied,
            reduced: None,
            all_reduce: None,
            backward_end: None,
            feed,
            ctx,
            stash: Stash::default(),
            received: HashMap::new(),
            outgoing: HashMap::new(),
            valid: None,
            loss: 0.0,
            outputs: Vec::new(),
            compute: Duration::ZERO,
            input_context: None,
        }
    }

    fn id(&self) -> WorkerId {
        self.state.id
    }

    fn is_first(&self) -> bool {
        self.id().stage.index() == 0
    }

    fn is_last(&self) -> bool {
        self.id().stage.index() + 1 == self.ctx.stages
    }

    /// Runs `program`. On failure the error goes to the step's [`Abort`] (first wins); the
    /// return value says only whether this worker finished.
    pub fn run(mut self, program: &[Action]) -> Option<Finished> {
        for &action in program {
            if self.ctx.abort.is_aborted() {
                return None; // fail at the first exception: stop before the next action
            }
            let _span = tracing::info_span!(
                "action",
                name = %action,
                replica = self.id().replica.0,
                stage = self.id().stage.0,
                micro_batch = action.micro_batch.map(|m| m.0 as i64).unwrap_or(-1),
                phase = %if self.ctx.loss.is_some() { "train" } else { "inference" },
            )
            .entered();
            let started = Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| self.interpret(action)));
            if !action.kind.is_transfer() {
                self.compute += started.elapsed();
            }
            let cause = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(Failure::Stopped)) => return None,
                Ok(Err(Failure::Cause(cause))) => cause,
                Err(payload) => Cause::Panic {
                    message: panic_message(payload.as_ref()),
                    context: self.input_context.take().unwrap_or_default(),
                },
            };
            let id = self.id();
            self.ctx.abort.fail(EngineError::StageFailed {
                replica: id.replica,
                stage: id.stage,
                micro_batch: action.micro_batch,
                action,
                source: cause,
            });
            return None;
        }
        let wall = self.ctx.start.elapsed();
        let idle = wall.saturating_sub(self.compute);
        let report = WorkerReport {
            worker: self.id(),
            compute: self.compute,
            idle,
            bubble_fraction: if wall.is_zero() {
                0.0
            } else {
                idle.as_secs_f64() / wall.as_secs_f64()
            },
            peak_stash: self.stash.peak(),
            all_reduce: self.all_reduce,
            backward_end: self.backward_end,
        };
        Some(Finished {
            loss: self.loss,
            report,
            outputs: self.outputs,
        })
    }

    fn interpret(&mut self, action: Action) -> Result<(), Failure> {
        let tag = |flow| Tag {
            flow,
            micro_batch: action.mb(),
        };
        match action.kind {
            ActionKind::RecvActivation | ActionKind::RecvGradient => {
                let flow = Flow::of(action.kind);
                let payload = self
                    .transport
                    .recv(tag(flow))?
                    .to_device(&self.state.device);
                self.received.insert(tag(flow), payload);
            }
            ActionKind::SendActivation | ActionKind::SendGradient => {
                let flow = Flow::of(action.kind);
                let payload = self
                    .outgoing
                    .remove(&tag(flow))
                    .expect("validated: send after compute");
                self.transport.send(tag(flow), payload)?;
            }
            ActionKind::Forward => self.forward(action.mb())?,
            ActionKind::Backward => {
                self.backward(action.mb())?;
                self.backward_end = Some(self.ctx.start.elapsed());
            }
            ActionKind::BackwardInput | ActionKind::BackwardWeight => {
                return Err(Failure::Cause(Cause::Unsupported(format!(
                    "{} is not supported by this engine yet (zero-bubble schedules)",
                    action.kind
                ))));
            }
            ActionKind::AllReduce => {
                let started = self.ctx.start.elapsed();
                let mut grads = self.state.grads.take();
                if !self.tied.slots.is_empty() {
                    let device = self.state.device.clone().inner();
                    grads =
                        tie::sum_gradients(grads, &self.tied.slots, &mut self.tied.links, &device)?;
                }
                self.reduced = Some(if self.collective.size() > 1 {
                    let reduced = self.all_reduce_grads(grads)?;
                    self.all_reduce = Some((started, self.ctx.start.elapsed()));
                    reduced
                } else {
                    // One replica: its gradients are already the sum.
                    Reduced {
                        grads,
                        sharded: None,
                    }
                });
            }
            ActionKind::OptimizerStep => self.optimizer_step()?,
        }
        Ok(())
    }

    /// Sums this stage's gradients over its replicas (two or more). Plain data parallelism: an
    /// all-reduce, bucket by bucket in module order. ZeRO-1: a reduce, so each replica holds the
    /// summed gradients of the parameters it owns.
    fn all_reduce_grads(&mut self, grads: GradientsParams) -> Result<Reduced, Failure> {
        let layers = &self.state.layers;
        let (slots, tensors) = Slots::of_grads(layers, &grads);
        drop(grads);
        if self.ctx.zero {
            let owners = slots.owners(layers, self.collective.size());
            let reduced = self.collective.reduce_tensors(tensors, &owners)?;
            return Ok(Reduced {
                grads: slots.grads(layers, reduced),
                sharded: Some(Sharded { slots, owners }),
            });
        }
        let mut summed = Vec::with_capacity(tensors.len());
        let mut tensors = tensors.into_iter();
        for bucket in slots.buckets(self.ctx.bucket_elems) {
            let part: Vec<Tensor<1>> = tensors.by_ref().take(bucket.len()).collect();
            summed.extend(
                self.collective
                    .all_reduce_tensors(part)?
                    .into_iter()
                    .map(Some),
            );
        }
        Ok(Reduced {
            grads: slots.grads(layers, summed),
            sharded: None,
        })
    }

    /// The optimizer step on the summed gradients; with ZeRO-1 each replica updates its own
    /// parameters, then they exchange the updated values.
    fn optimizer_step(&mut self) -> Result<(), Failure> {
        let (grads, sharded) = match self.reduced.take() {
            Some(Reduced { grads, sharded }) => (grads, sharded),
            None => (self.state.grads.take(), None),
        };
        adapter::step(
            &mut self.state.optimizer,
            self.ctx.learning_rate,
            &mut self.state.layers,
            grads,
        );
        if let Some(Sharded { slots, owners }) = sharded {
            let me = self.collective.rank();
            let mine: Vec<bool> = owners.iter().map(|&o| o == me).collect();
            let values = slots.params(&self.state.layers, &mine);
            let device = self.state.device.clone().inner();
            let all =
                self.collective
                    .broadcast_tensors(values, &owners, &slots.sizes(), &device)?;
            let theirs: Vec<bool> = mine.iter().map(|m| !m).collect();
            let layers = std::mem::take(&mut self.state.layers);
            self.state.layers = slots.load_params(layers, all, &theirs);
        }
        if self.collective.size() > 1 {
            self.broadcast_buffers()?;
        }
        self.valid = None;
        Ok(())
    }

    /// Replica 0's buffers (batch-norm running statistics) to every replica, as PyTorch DDP's
    /// `broadcast_buffers` does: replicas stay identical, parameters and buffers.
    fn broadcast_buffers(&mut self) -> Result<(), Failure> {
        let buffers = Buffers::of(&self.state.layers);
        if buffers.ids.is_empty() {
            return Ok(());
        }
        let owners = vec![0; buffers.ids.len()];
        let lens: Vec<usize> = buffers.values.iter().map(|t| t.dims()[0]).collect();
        let values = if self.collective.rank() == 0 {
            buffers.values.iter().cloned().map(Some).collect()
        } else {
            vec![None; lens.len()]
        };
        let device = self.state.device.clone().inner();
        let all = self
            .collective
            .broadcast_tensors(values, &owners, &lens, &device)?;
        if self.collective.rank() != 0 {
            let layers = std::mem::take(&mut self.state.layers);
            self.state.layers = buffers.load(layers, all);
        }
        Ok(())
    }

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

    fn forward(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
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

    fn backward(&mut self, mb: MicroBatchId) -> Result<(), Failure> {
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
