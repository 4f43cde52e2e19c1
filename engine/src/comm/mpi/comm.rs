//! The communication thread: the one thread per process that owns MPI.
//!
//! rsmpi's communicators are not `Send` and the workspace forbids `unsafe`, so MPI lives on one
//! thread (initialised there, `Threading::Serialized`), and everything else talks to it over
//! channels: workers and the launcher hand it [`Envelope`]s to send, and it delivers what
//! arrives to the inbox registered for the message's [`Route`] (buffering what comes before
//! its inbox is registered).
//!
//! ```text
//!   worker threads ──Command::Send──►  comm thread  ──MPI_Isend──►  other processes
//!   worker inboxes ◄──Envelope──────   (polls: Improbe + Mrecv, Test) ◄──────────
//! ```
//!
//! Nothing waits forever. The thread never blocks in MPI: it sends one message at a time with
//! `MPI_Isend` and polls it, probing for arrivals meanwhile (two processes sending each other
//! large messages cannot deadlock), and a send that makes no progress for the communication
//! timeout fails the step. Workers wait on their inboxes with the same timeout and also watch
//! the step's [`Abort`]. When a local worker fails, the thread tells every other process (a
//! failure notice naming this rank and the error); a notice from another process fails the
//! local step with [`EngineError::Peer`](crate::EngineError::Peer), so every rank stops.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, unbounded};

use super::notice::Notice;
use super::server::{Command, serve};
use super::wire::{Envelope, Route, channel};
use crate::comm::abort::Abort;
use crate::error::EngineError;

/// What MPI says about this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Rank in `MPI_COMM_WORLD`.
    pub rank: usize,
    /// Size of `MPI_COMM_WORLD`.
    pub size: usize,
    /// Rank among the processes of this node, as the launcher says
    /// (`OMPI_COMM_WORLD_LOCAL_RANK`, `MPI_LOCALRANKID` or `PMI_LOCAL_RANK`), if it does.
    pub local_rank: Option<usize>,
}

/// Control messages by (call, sender rank).
type Early = HashMap<(u32, u32), Vec<u8>>;

/// A handle on the communication thread (cheap to clone; every clone talks to the same thread).
#[derive(Clone)]
pub struct Comm {
    commands: Sender<Command>,
    identity: Identity,
    timeout: Duration,
    control: Receiver<Envelope>,
    /// Control messages that came before they were awaited, by (call, sender).
    early: Arc<std::sync::Mutex<Early>>,
    control_calls: Arc<AtomicU32>,
    thread: Arc<std::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl Comm {
    /// Initialises MPI on a new communication thread. `timeout` bounds every wait on another
    /// process (`--comm-timeout`).
    pub fn start(timeout: Duration) -> Result<Comm, EngineError> {
        let (commands, rx) = unbounded();
        let (ready_tx, ready_rx) = bounded(1);
        let thread = std::thread::Builder::new()
            .name("pipetrain-mpi".into())
            .spawn(move || serve(rx, ready_tx, timeout))
            .map_err(|e| {
                EngineError::MpiInit(format!("cannot start the communication thread: {e}"))
            })?;
        // The world's formation is bounded by the timeout too: MPI's start waits for every
        // process of the launch, and one that never joins (`mpirun ... : -np 1 pipetrain
        // plan`, which exits 0 without MPI) kept this one waiting for ever.
        let identity = match ready_rx.recv_timeout(timeout) {
            Ok(identity) => identity?,
            Err(RecvTimeoutError::Timeout) => {
                return Err(EngineError::MpiStartTimeout {
                    seconds: timeout.as_secs_f64(),
                });
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(EngineError::MpiInit(
                    "the communication thread ended at start".into(),
                ));
            }
        };
        let (inbox, control) = unbounded();
        let comm = Comm {
            commands,
            identity,
            timeout,
            control,
            early: Arc::default(),
            control_calls: Arc::new(AtomicU32::new(0)),
            thread: Arc::new(std::sync::Mutex::new(Some(thread))),
        };
        comm.register(Route::process(channel::CONTROL), inbox)?;
        Ok(comm)
    }

    /// What MPI says about this process.
    pub fn identity(&self) -> Identity {
        self.identity
    }

    /// The communication timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn command(&self, command: Command) -> Result<(), EngineError> {
        self.commands
            .send(command)
            .map_err(|_| EngineError::MpiGone("it stopped (see the error above)".into()))
    }

    /// Queues `envelope` for process `to`.
    pub(crate) fn send(&self, to: usize, envelope: Envelope) -> Result<(), EngineError> {
        self.command(Command::Send { to, envelope })
    }

    /// Delivers messages for `route` to `inbox`.
    pub(crate) fn register(
        &self,
        route: Route,
        inbox: Sender<Envelope>,
    ) -> Result<(), EngineError> {
        self.command(Command::Register { route, inbox })
    }

    /// Makes `abort` the signal peers' failure notices go to, and whose failure is told to them.
    pub(crate) fn watch(&self, abort: &Arc<Abort>) -> Result<(), EngineError> {
        self.command(Command::Watch(Arc::clone(abort)))
    }

    /// Tells every other process that this one failed, with `message` (what it was doing and
    /// why); their current or next step fails with [`EngineError::Peer`](crate::EngineError::Peer) naming this rank. A
    /// failure of a step here is told without this call.
    pub fn notify_failure(&self, message: String) {
        let _ = self.command(Command::Fail(message));
    }

    /// Rank 0's `bytes` on every process (the others pass `None`).
    pub fn broadcast(&self, bytes: Option<Vec<u8>>) -> Result<Vec<u8>, EngineError> {
        let call = self.control_calls.fetch_add(1, Ordering::SeqCst);
        let me = self.identity.rank;
        if me == 0 {
            let bytes = bytes.unwrap_or_default();
            for to in 1..self.identity.size {
                self.send(to, self.control_envelope(call, bytes.clone()))?;
            }
            Ok(bytes)
        } else {
            self.control_from(call, 0)
        }
    }

    /// Every process's `bytes`, by rank, on rank 0 (`None` elsewhere).
    pub fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, EngineError> {
        let call = self.control_calls.fetch_add(1, Ordering::SeqCst);
        let me = self.identity.rank;
        if me != 0 {
            self.send(0, self.control_envelope(call, bytes))?;
            return Ok(None);
        }
        let mut all = vec![bytes];
        for from in 1..self.identity.size {
            all.push(self.control_from(call, from)?);
        }
        Ok(Some(all))
    }

    fn control_envelope(&self, call: u32, body: Vec<u8>) -> Envelope {
        Envelope {
            route: Route::process(channel::CONTROL),
            a: call,
            b: self.identity.rank as u32,
            from: self.identity.rank as u32,
            body: body.into(),
        }
    }

    /// Control call `call`'s message from process `from` (others that come first wait in
    /// `early`: a gather's senders race each other, and a fast rank may start the next call).
    fn control_from(&self, call: u32, from: usize) -> Result<Vec<u8>, EngineError> {
        let mut early = self.early.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(body) = early.remove(&(call, from as u32)) {
            return Ok(body);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.control.recv_deadline(deadline) {
                Ok(e) if e.route.channel == channel::FAILURE => {
                    let notice = Notice::decode(e.body.as_bytes());
                    return Err(EngineError::Peer {
                        rank: e.from as usize,
                        message: notice.message,
                        remedy: notice.remedy,
                    });
                }
                Ok(e) if e.a == call && e.b as usize == from => return Ok(e.body.into_bytes()),
                Ok(e) => {
                    if early.insert((e.a, e.b), e.body.into_bytes()).is_some() {
                        return Err(EngineError::MalformedMessage(format!(
                            "control message {} from rank {} arrived twice",
                            e.a, e.b
                        )));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(EngineError::Silent {
                        rank: from,
                        seconds: self.timeout.as_secs_f64(),
                        during: "at a broadcast or gather of the launcher",
                    });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(EngineError::MpiGone("its control inbox closed".into()));
                }
            }
        }
    }

    /// Sends what is queued and ends the thread. With `finalize`, MPI is finalized (a clean
    /// exit); without, the process is expected to exit next (an error exit), the others are
    /// told it ended, and a process whose own failure it told waits for theirs (see
    /// `server`). Waits at most the communication timeout.
    ///
    /// Without `finalize` the thread is not joined: it may still be polling a send to a peer
    /// that never receives (a stopped process: the send cannot be abandoned inside its MPI
    /// scope), and the process exits next anyway. Joining it hung rank 0 of a 2-rank run whose
    /// other rank was stopped with SIGSTOP (tests/mpi.rs).
    pub fn shutdown(&self, finalize: bool) {
        let (done, wait) = bounded(1);
        if self.command(Command::Shutdown { finalize, done }).is_ok()
            && wait.recv_timeout(self.timeout).is_ok()
            && finalize
        {
            if let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = thread.join();
            }
        }
    }
}
