//! The interpreter: walks one stage's lowered program, action by action.
//!
//! The worker knows nothing of schedules. Each action kind has one meaning (see
//! `pipetrain_schedules::ActionKind`); the order is the plan's. Computing lives in
//! [`compute`](super::compute), summing and stepping in [`sync`](super::sync).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pipetrain_schedules::{Action, ActionKind, MicroBatchId, WorkerId};

use super::state::WorkerState;
use super::sync::Reduced;
use crate::abort::Abort;
use crate::activation::Activation;
use crate::collective::CollectiveError;
use crate::error::{Cause, EngineError, panic_message};
use crate::fabric::Links;
use crate::grad_guard::GradGuard;
use crate::layer::Layer;
use crate::loss::Loss;
use crate::remat::Remat;
use crate::report::{ActionTimes, WorkerReport};
use crate::runtime::Timing;
use crate::skips::SkipRoutes;
use crate::split::deferred::Deferred;
use crate::tie::TieSlot;
use crate::transport::{Flow, Tag, TransportError};
use crate::turns::Turns;
use crate::worker::stash::Stash;

/// What the whole step shares.
pub(crate) struct StepContext {
    pub stages: usize,
    pub micro_batches: usize,
    pub learning_rate: f64,
    pub remat: Remat,
    /// The loss on the last stage; `None` for an inference run.
    pub loss: Option<Arc<dyn Loss>>,
    /// 1 / k (accumulation): with each micro-batch's row weight ([`Feed::weights`]), makes the
    /// summed gradients the mean gradient of the accumulated batches.
    pub loss_scale: f64,
    pub abort: Arc<Abort>,
    pub start: Instant,
    /// Values per all-reduce bucket.
    pub bucket_elems: usize,
    /// ZeRO-1: each replica keeps optimizer state for its own share of the parameters.
    pub zero: bool,
    /// Split backward: dense layers run by hand, their weight gradients deferred to `W`.
    pub split: bool,
    /// Micro-batches whose deferred weight gradients are computed together (0: the step's).
    pub weight_group: usize,
    /// The compute order across the stages of each rank, when ranks hold several (interleaved
    /// plans).
    pub turns: Option<Turns>,
    /// Checks and clipping of the summed gradients before the optimizer step.
    pub guard: GradGuard,
    /// Whether each compute action synchronises the device before its time is read.
    pub timing: Timing,
    /// The index in the whole model of each stage's first layer (names in errors).
    pub layer_offsets: Vec<usize>,
    /// The skips sent straight between stages.
    pub skips: SkipRoutes,
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
    /// The last stage's loss weight per micro-batch: its rows / the batch's rows.
    pub weights: Vec<f64>,
}

/// An action failed; `Stopped` means another worker failed first.
pub(crate) enum Failure {
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
            other => Failure::Cause(Cause::Transport(other)),
        }
    }
}

/// One worker running one program: its state and links, lent for the step.
pub(crate) struct Worker<'a, L: Layer> {
    pub(crate) state: &'a mut WorkerState<L>,
    pub(crate) links: &'a mut Links,
    pub(crate) tie_slots: &'a [TieSlot],
    pub(crate) ctx: &'a StepContext,
    pub(crate) feed: Feed,
    pub(crate) reduced: Option<Reduced>,
    pub(crate) all_reduce: Option<(Duration, Duration)>,
    pub(crate) backward_end: Option<Duration>,
    pub(crate) stash: Stash,
    pub(crate) deferred: Deferred,
    pub(crate) received: HashMap<Tag, Activation>,
    pub(crate) outgoing: HashMap<Tag, Activation>,
    /// The layers without autodiff, cached until the next optimizer step.
    pub(crate) valid: Option<Vec<L>>,
    /// The last stage's scaled micro-batch losses, read back once when the program ends.
    pub(crate) losses: Vec<burn::tensor::Tensor<1>>,
    pub(crate) outputs: Vec<(MicroBatchId, Activation)>,
    pub(crate) compute: Duration,
    pub(crate) actions: ActionTimes,
    /// Set while layers run: the input and its origin, for panic messages.
    pub(crate) input_context: Option<String>,
    /// The global gradient norm the optimizer step saw.
    pub(crate) grad_norm: Option<f64>,
    /// Whether the optimizer step skipped a non-finite step.
    pub(crate) skipped: bool,
}

impl<'a, L: Layer> Worker<'a, L> {
    pub fn new(
        state: &'a mut WorkerState<L>,
        links: &'a mut Links,
        tie_slots: &'a [TieSlot],
        feed: Feed,
        ctx: &'a StepContext,
    ) -> Self {
        Self {
            state,
            links,
            tie_slots,
            ctx,
            feed,
            reduced: None,
            all_reduce: None,
            backward_end: None,
            stash: Stash::default(),
            deferred: Deferred::new(ctx.weight_group, ctx.micro_batches),
            received: HashMap::new(),
            outgoing: HashMap::new(),
            valid: None,
            losses: Vec::new(),
            outputs: Vec::new(),
            compute: Duration::ZERO,
            actions: ActionTimes::default(),
            input_context: None,
            grad_norm: None,
            skipped: false,
        }
    }

    pub(crate) fn id(&self) -> WorkerId {
        self.state.id
    }

    pub(crate) fn is_first(&self) -> bool {
        self.id().stage.index() == 0
    }

    pub(crate) fn is_last(&self) -> bool {
        self.id().stage.index() + 1 == self.ctx.stages
    }

    /// Runs `program`. On failure the error goes to the step's [`Abort`] (first wins); the
    /// return value says only whether this worker finished.
    pub fn run(mut self, program: &[Action]) -> Option<Finished> {
        // The compute action whose turn this worker still holds: it passes the turn on once
        // the sends that follow it are done (sends never block), so that the rank's next
        // chunk does not take the core while this one's outputs wait to be sent.
        let mut holding: Option<Action> = None;
        for &action in program {
            if self.ctx.abort.is_aborted() {
                return None; // fail at the first exception: stop before the next action
            }
            if !is_send(action.kind)
                && let (Some(turns), Some(done)) = (self.ctx.turns.as_ref(), holding.take())
            {
                turns.done(self.id().replica, &done);
            }
            let turns = self.ctx.turns.as_ref().filter(|_| action.kind.is_compute());
            if turns.is_some_and(|t| t.wait(self.id().replica, &action, &self.ctx.abort).is_err()) {
                return None; // another worker failed while this one waited for its turn
            }
            // After the turn: a profile's slice is the action itself, not the wait for its turn
            // (a rank's chunks would seem to compute at once).
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
            let mut outcome = catch_unwind(AssertUnwindSafe(|| self.interpret(action)));
            if !action.kind.is_transfer() {
                // Timing::Device: the action's time includes its device work (a no-op on a CPU).
                if self.ctx.timing == Timing::Device
                    && matches!(outcome, Ok(Ok(())))
                    && let Err(e) = self.state.device.sync()
                {
                    outcome = Ok(Err(Failure::Cause(Cause::Device(e.to_string()))));
                }
                let elapsed = started.elapsed();
                self.compute += elapsed;
                self.actions.record(action.kind, elapsed);
            }
            let cause = match outcome {
                Ok(Ok(())) => {
                    if turns.is_some() {
                        holding = Some(action);
                    }
                    continue;
                }
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
        if let (Some(turns), Some(done)) = (self.ctx.turns.as_ref(), holding) {
            turns.done(self.id().replica, &done);
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
            peak_deferred_bytes: self.deferred.peak_bytes(),
            all_reduce: self.all_reduce,
            backward_end: self.backward_end,
            actions: std::mem::take(&mut self.actions),
            grad_norm: self.grad_norm,
            skipped: self.skipped,
        };
        Some(Finished {
            loss: crate::adapter::sum_scalars(std::mem::take(&mut self.losses)),
            report,
            outputs: self.outputs,
        })
    }

    /// One action: one meaning per kind.
    fn interpret(&mut self, action: Action) -> Result<(), Failure> {
        let tag = |flow| Tag {
            flow,
            micro_batch: action.mb(),
        };
        match action.kind {
            ActionKind::RecvActivation
            | ActionKind::RecvGradient
            | ActionKind::RecvSkip
            | ActionKind::RecvSkipGradient => {
                let flow = Flow::of(&action);
                let payload = self
                    .links
                    .transport
                    .recv(tag(flow))?
                    .receive(&self.state.device);
                self.received.insert(tag(flow), payload);
            }
            ActionKind::SendActivation
            | ActionKind::SendGradient
            | ActionKind::SendSkip
            | ActionKind::SendSkipGradient => {
                let flow = Flow::of(&action);
                let payload = self
                    .outgoing
                    .remove(&tag(flow))
                    .expect("validated: send after compute");
                self.links.transport.send(tag(flow), payload)?;
            }
            ActionKind::Forward => self.forward(action.mb())?,
            ActionKind::Backward => {
                self.backward(action.mb())?;
                self.backward_weight(action.mb())?;
                self.backward_end = Some(self.ctx.start.elapsed());
            }
            ActionKind::BackwardInput => self.backward(action.mb())?,
            ActionKind::BackwardWeight => {
                self.backward_weight(action.mb())?;
                self.backward_end = Some(self.ctx.start.elapsed());
            }
            ActionKind::AllReduce => self.all_reduce()?,
            ActionKind::OptimizerStep => self.optimizer_step()?,
        }
        Ok(())
    }
}

/// Whether `kind` sends (to a neighbouring stage or a skip's peer): it never blocks.
fn is_send(kind: ActionKind) -> bool {
    matches!(
        kind,
        ActionKind::SendActivation
            | ActionKind::SendGradient
            | ActionKind::SendSkip
            | ActionKind::SendSkipGradient
    )
}
