//! Persistent worker threads: one per local worker, started with the runtime, named
//! `pipetrain-r{replica}s{stage}`, fed by a command channel, joined when the runtime is
//! dropped.
//!
//! A step lends each thread its worker's state with an assignment and gets it back with the reply,
//! so between steps the runtime holds every state (checkpoints and inspection need no thread),
//! and no `Mutex` guards a model. The thread keeps its [`Links`] across steps.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use pipetrain_schedules::{Plan, WorkerId};

use crate::comm::fabric::Links;
use crate::error::{EngineError, panic_message};
use crate::model::layer::Layer;
use crate::optim::tie::TieSlot;
use crate::worker::{Feed, Finished, StepContext, Worker, WorkerState};

/// One program to run with a lent state: the step's plan, this worker's feed, and the step's
/// context (with its [`Job`](crate::worker::Job)).
pub(crate) struct Assignment {
    pub plan: Arc<Plan>,
    pub feed: Feed,
    pub ctx: Arc<StepContext>,
}

enum Command<L: Layer> {
    /// New links: the first connection, or fresh ones after a failed step.
    Connect {
        links: Links,
        tie_slots: Vec<TieSlot>,
    },
    /// Run an assignment; reply with the state and what the worker finished with.
    Run {
        state: Box<WorkerState<L>>,
        assignment: Assignment,
    },
}

/// What a thread hands back after an assignment: the state, always, and the worker's result (`None`
/// when it stopped on a failure, which is recorded in the step's abort).
pub(crate) struct Reply<L: Layer> {
    pub state: Box<WorkerState<L>>,
    pub finished: Option<Finished>,
}

/// The runtime's handle on one worker thread.
pub(crate) struct WorkerThread<L: Layer> {
    id: WorkerId,
    commands: Option<Sender<Command<L>>>,
    replies: Receiver<Reply<L>>,
    handle: Option<JoinHandle<()>>,
}

impl<L: Layer> WorkerThread<L> {
    /// Starts worker `id`'s thread.
    pub fn spawn(id: WorkerId) -> Result<Self, EngineError> {
        let (commands, inbox) = unbounded();
        let (outbox, replies) = bounded(1);
        let handle = std::thread::Builder::new()
            .name(format!("pipetrain-r{}s{}", id.replica.0, id.stage.0))
            .spawn(move || serve(id, inbox, outbox))
            .map_err(|e| EngineError::WorkerDied {
                replica: id.replica,
                stage: id.stage,
                message: format!("cannot start the worker thread: {e}"),
            })?;
        Ok(Self {
            id,
            commands: Some(commands),
            replies,
            handle: Some(handle),
        })
    }

    /// The worker it runs.
    pub fn worker(&self) -> WorkerId {
        self.id
    }

    /// The thread's id (stable for the runtime's life).
    pub fn thread_id(&self) -> Option<ThreadId> {
        self.handle.as_ref().map(|h| h.thread().id())
    }

    /// Hands the thread new links. False if the thread is gone.
    pub fn connect(&self, links: Links, tie_slots: Vec<TieSlot>) -> bool {
        self.send(Command::Connect { links, tie_slots })
    }

    /// Lends the thread `state` to run `assignment`. On failure (the thread is gone) gives the
    /// state back.
    pub fn run(
        &self,
        state: WorkerState<L>,
        assignment: Assignment,
    ) -> Result<(), Box<WorkerState<L>>> {
        let command = Command::Run {
            state: Box::new(state),
            assignment,
        };
        match self.commands.as_ref().map(|c| c.send(command)) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => match e.into_inner() {
                Command::Run { state, .. } => Err(state),
                Command::Connect { .. } => unreachable!("a run was sent"),
            },
            None => unreachable!("commands close only on drop"),
        }
    }

    /// Waits for the reply to the last [`run`](Self::run); `None` if the thread died.
    pub fn reply(&self) -> Option<Reply<L>> {
        self.replies.recv().ok()
    }

    fn send(&self, command: Command<L>) -> bool {
        self.commands
            .as_ref()
            .is_some_and(|c| c.send(command).is_ok())
    }
}

impl<L: Layer> Drop for WorkerThread<L> {
    /// Closes the command channel (the thread's loop ends) and joins the thread.
    fn drop(&mut self) {
        self.commands.take();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The thread's loop: one command at a time until the runtime closes the channel.
fn serve<L: Layer>(id: WorkerId, inbox: Receiver<Command<L>>, outbox: Sender<Reply<L>>) {
    let mut links: Option<Links> = None;
    let mut tie_slots = Vec::new();
    for command in inbox {
        match command {
            Command::Connect {
                links: fresh,
                tie_slots: slots,
            } => {
                links = Some(fresh);
                tie_slots = slots;
            }
            Command::Run {
                mut state,
                assignment,
            } => {
                let Some(links) = links.as_mut() else {
                    assignment.ctx.abort.fail(EngineError::WorkerDied {
                        replica: id.replica,
                        stage: id.stage,
                        message: "asked to run before it was connected".into(),
                    });
                    let _ = outbox.send(Reply {
                        state,
                        finished: None,
                    });
                    continue;
                };
                let finished = run(&mut state, links, &tie_slots, assignment);
                if outbox.send(Reply { state, finished }).is_err() {
                    return;
                }
            }
        }
    }
}

/// Runs one assignment inside the worker's compute pool. A panic outside any action (an engine bug)
/// is recorded as the worker's death; the state survives either way.
fn run<L: Layer>(
    state: &mut WorkerState<L>,
    links: &mut Links,
    tie_slots: &[TieSlot],
    assignment: Assignment,
) -> Option<Finished> {
    let Assignment { plan, feed, ctx } = assignment;
    let pool = Arc::clone(&state.pool);
    let id = state.id;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        pool.install(|| {
            Worker::new(state, links, tie_slots, feed, &ctx).run(plan.program(id.stage))
        })
    }));
    match outcome {
        Ok(finished) => finished,
        Err(payload) => {
            ctx.abort.fail(EngineError::WorkerDied {
                replica: id.replica,
                stage: id.stage,
                message: panic_message(payload.as_ref()),
            });
            None
        }
    }
}
