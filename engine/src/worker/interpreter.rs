//! The interpreter: walks one stage's lowered program, action by action.
//!
//! The worker knows nothing of schedules. Each action kind has one meaning (see
//! `pipetrain_schedules::ActionKind`); the order is the plan's. Computing lives in
//! [`compute`](super::compute), summing and stepping in [`sync`](super::sync); what one program
//! builds up in its [`Scratch`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use pipetrain_schedules::{Action, ActionKind, WorkerId};

use super::job::{Feed, Finished, StepContext, Training};
use super::scratch::Scratch;
use super::state::WorkerState;
use crate::comm::fabric::Links;
use crate::comm::transport::{Flow, Tag};
use crate::error::{EngineError, panic_message};
use crate::model::layer::Layer;
use crate::optim::tie::TieSlot;
use crate::skips::StageSkips;
use crate::worker::timing::Timing;

/// An action failed (why: one of [`EngineError`]'s worker causes, from `Panic` on); `Stopped`
/// means another worker failed first.
pub(crate) enum Failure {
    Cause(EngineError),
    Stopped,
}

impl From<EngineError> for Failure {
    fn from(cause: EngineError) -> Self {
        match cause {
            EngineError::Aborted => Failure::Stopped,
            other => Failure::Cause(other),
        }
    }
}

/// One worker running one program: its state and links, lent for the step, the step's shared
/// context, and the program's scratch.
pub(crate) struct Worker<'a, L: Layer> {
    pub(crate) state: &'a mut WorkerState<L>,
    pub(crate) links: &'a mut Links,
    pub(crate) tie_slots: &'a [TieSlot],
    pub(crate) ctx: &'a StepContext,
    /// This stage's skips: the routes it stashes on and pops from.
    pub(crate) skips: StageSkips,
    pub(crate) scratch: Scratch<L>,
}

impl<'a, L: Layer> Worker<'a, L> {
    pub fn new(
        state: &'a mut WorkerState<L>,
        links: &'a mut Links,
        tie_slots: &'a [TieSlot],
        feed: Feed,
        ctx: &'a StepContext,
    ) -> Self {
        let weight_group = ctx.job.training().map_or(0, |t| t.weight_group);
        let skips = StageSkips::new(&ctx.skips, state.id.stage);
        Self {
            state,
            links,
            tie_slots,
            ctx,
            skips,
            scratch: Scratch::new(feed, weight_group, ctx.micro_batches),
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

    /// The training step's settings: only a training plan has the actions that ask for them.
    pub(crate) fn training(&self) -> &'a Training {
        let ctx: &'a StepContext = self.ctx;
        ctx.job
            .training()
            .expect("validated: an inference plan only forwards and transfers")
    }

    /// Runs `program`. On failure the error goes to the step's [`Abort`] (first wins); the
    /// return value says only whether this worker finished.
    pub fn run(mut self, program: &[Action]) -> Option<Finished> {
        // The compute action whose turn this worker still holds: it passes the turn on once
        // the sends that follow it are done (sends never block), so that the rank's next
        // chunk does not take the core while this one's outputs wait to be sent.
        let mut holding: Option<Action> = None;
        // The last compute action syncs the device under any timing: between steps the runtime
        // reads the weights on its own thread, and on a GPU that thread's stream waits only for
        // buffers another stream made, not for one this worker's stream wrote in place since
        // (a weight made on the runtime's thread, updated by the optimizer step). A no-op on a
        // CPU.
        let last_compute = program.iter().rposition(|a| !a.kind.is_transfer());
        for (index, &action) in program.iter().enumerate() {
            if self.ctx.abort.is_aborted() {
                return None; // fail at the first exception: stop before the next action
            }
            if !is_send(action.kind)
                && let (Some(turns), Some(done)) = (self.ctx.job.turns(), holding.take())
            {
                turns.done(self.id().replica, &done);
            }
            let turns = self.ctx.job.turns().filter(|_| action.kind.is_compute());
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
                phase = %self.ctx.job.phase(),
            )
            .entered();
            let started = Instant::now();
            let mut outcome = match (&self.ctx.serial, action.kind.is_compute()) {
                (Some(serial), true) => {
                    self.scratch.serialized += 1;
                    serial.run(|| catch_unwind(AssertUnwindSafe(|| self.interpret(action))))
                }
                _ => catch_unwind(AssertUnwindSafe(|| self.interpret(action))),
            };
            if !action.kind.is_transfer() {
                // Timing::Device: the action's time includes its device work (a no-op on a CPU);
                // the last compute action's does under any timing (see above).
                if (self.ctx.timing == Timing::Device || Some(index) == last_compute)
                    && matches!(outcome, Ok(Ok(())))
                {
                    // Counted once the sync has returned: the count is of syncs done (a CPU's
                    // sync is a no-op, so the count is all a CPU test can see of it).
                    match self.state.device.sync() {
                        Ok(()) => self.scratch.device_syncs += 1,
                        Err(e) => {
                            outcome = Ok(Err(Failure::Cause(EngineError::DeviceFailed(
                                e.to_string(),
                            ))));
                        }
                    }
                }
                let elapsed = started.elapsed();
                self.scratch.compute += elapsed;
                self.scratch.actions.record(action.kind, elapsed);
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
                Err(payload) => EngineError::Panic {
                    message: panic_message(payload.as_ref()),
                    context: self.scratch.input_context.take().unwrap_or_default(),
                },
            };
            let id = self.id();
            self.ctx.abort.fail(EngineError::StageFailed {
                replica: id.replica,
                stage: id.stage,
                micro_batch: action.micro_batch,
                action,
                source: Box::new(cause),
            });
            return None;
        }
        if let (Some(turns), Some(done)) = (self.ctx.job.turns(), holding) {
            turns.done(self.id().replica, &done);
        }
        let (id, wall) = (self.id(), self.ctx.start.elapsed());
        Some(self.scratch.finish(id, wall))
    }

    /// One action: one meaning per kind.
    ///
    /// An overlap runs as its forward, then its backward: a CPU worker cannot run two
    /// computations at once (nor does a GPU worker on its one stream), and this order keeps
    /// the results bitwise those of the same plan with the pair written in sequence. The
    /// runtime's per-stage programs hold no overlap (`Plan::by_stage` gives each half to its
    /// stage's worker, and [`Turns`](super::turns::Turns) orders them); a program that holds
    /// one whose halves are both this worker's runs it here.
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
                    .receive(&self.state.device, self.ctx.handoff);
                self.scratch.received.insert(tag(flow), payload);
            }
            ActionKind::SendActivation
            | ActionKind::SendGradient
            | ActionKind::SendSkip
            | ActionKind::SendSkipGradient => {
                let flow = Flow::of(&action);
                let payload = self
                    .scratch
                    .outgoing
                    .remove(&tag(flow))
                    .expect("validated: send after compute")
                    .hand_off(self.ctx.handoff);
                self.scratch.sent_bytes += payload.value_bytes() as u64;
                self.links.transport.send(tag(flow), payload)?;
            }
            ActionKind::Forward => self.forward(action.mb())?,
            ActionKind::Backward => {
                self.backward(action.mb())?;
                self.backward_weight(action.mb())?;
                self.scratch.backward_end = Some(self.ctx.start.elapsed());
            }
            ActionKind::BackwardInput => self.backward(action.mb())?,
            ActionKind::BackwardWeight => {
                self.backward_weight(action.mb())?;
                self.scratch.backward_end = Some(self.ctx.start.elapsed());
            }
            ActionKind::AllReduce => self.all_reduce()?,
            ActionKind::OptimizerStep => self.optimizer_step()?,
            ActionKind::ReduceGrad => self.reduce_grad()?,
            ActionKind::Unshard => self.unshard()?,
            ActionKind::Reshard => self.reshard()?,
            ActionKind::Overlap => {
                for half in action.in_sequence() {
                    self.interpret(half)?;
                }
            }
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
