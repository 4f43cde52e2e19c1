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
//! local step with [`EngineError::Peer`], so every rank stops.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, select, unbounded};
use mpi::Threading;
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::topology::{Communicator, SimpleCommunicator};

use super::error::MpiError;
use super::wire::{Envelope, Route, TAG, channel};
use crate::abort::Abort;
use crate::error::EngineError;

/// How long the thread sleeps waiting for a command when nothing arrives (its polling period).
const POLL: Duration = Duration::from_micros(200);

enum Command {
    /// Send to process `to` (this one: delivered locally).
    Send { to: usize, envelope: Envelope },
    /// Deliver messages for `route` to `inbox` from now on (and what was buffered for it).
    Register {
        route: Route,
        inbox: Sender<Envelope>,
    },
    /// The current step's abort signal: a peer's failure notice fails it; its failure is told
    /// to the peers.
    Watch(Arc<Abort>),
    /// Tell every other process that this one failed (unless a failure was told already).
    Fail(String),
    /// Send what is queued (within the timeout), then end; `finalize` calls `MPI_Finalize`
    /// (a clean exit), else MPI is left as it is (the process is about to exit with an error).
    Shutdown { finalize: bool, done: Sender<()> },
}

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
    pub fn start(timeout: Duration) -> Result<Comm, MpiError> {
        let (commands, rx) = unbounded();
        let (ready_tx, ready_rx) = bounded(1);
        let thread = std::thread::Builder::new()
            .name("pipetrain-mpi".into())
            .spawn(move || serve(rx, ready_tx, timeout))
            .map_err(|e| MpiError::Init(format!("cannot start the communication thread: {e}")))?;
        let identity = ready_rx
            .recv()
            .map_err(|_| MpiError::Init("the communication thread ended at start".into()))??;
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

    fn command(&self, command: Command) -> Result<(), MpiError> {
        self.commands
            .send(command)
            .map_err(|_| MpiError::Gone("it stopped (see the error above)".into()))
    }

    /// Queues `envelope` for process `to`.
    pub(crate) fn send(&self, to: usize, envelope: Envelope) -> Result<(), MpiError> {
        self.command(Command::Send { to, envelope })
    }

    /// Delivers messages for `route` to `inbox`.
    pub(crate) fn register(&self, route: Route, inbox: Sender<Envelope>) -> Result<(), MpiError> {
        self.command(Command::Register { route, inbox })
    }

    /// Makes `abort` the signal peers' failure notices go to, and whose failure is told to them.
    pub(crate) fn watch(&self, abort: &Arc<Abort>) -> Result<(), MpiError> {
        self.command(Command::Watch(Arc::clone(abort)))
    }

    /// Tells every other process that this one failed, with `message` (what it was doing and
    /// why); their current or next step fails with [`EngineError::Peer`] naming this rank. A
    /// failure of a step here is told without this call.
    pub fn notify_failure(&self, message: String) {
        let _ = self.command(Command::Fail(message));
    }

    /// Rank 0's `bytes` on every process (the others pass `None`).
    pub fn broadcast(&self, bytes: Option<Vec<u8>>) -> Result<Vec<u8>, MpiError> {
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
    pub fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, MpiError> {
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
            body,
        }
    }

    /// Control call `call`'s message from process `from` (others that come first wait in
    /// `early`: a gather's senders race each other, and a fast rank may start the next call).
    fn control_from(&self, call: u32, from: usize) -> Result<Vec<u8>, MpiError> {
        let mut early = self.early.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(body) = early.remove(&(call, from as u32)) {
            return Ok(body);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.control.recv_deadline(deadline) {
                Ok(e) if e.route.channel == channel::FAILURE => {
                    return Err(MpiError::Peer {
                        rank: e.from as usize,
                        message: String::from_utf8_lossy(&e.body).into_owned(),
                    });
                }
                Ok(e) if e.a == call && e.b as usize == from => return Ok(e.body),
                Ok(e) => {
                    if early.insert((e.a, e.b), e.body).is_some() {
                        return Err(MpiError::Wire(format!(
                            "control message {} from rank {} arrived twice",
                            e.a, e.b
                        )));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(MpiError::Peer {
                        rank: from,
                        message: format!(
                            "sent nothing for {} s (--comm-timeout) at a broadcast or gather of \
                             the launcher; it may be dead or stuck",
                            self.timeout.as_secs_f64()
                        ),
                    });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(MpiError::Gone("its control inbox closed".into()));
                }
            }
        }
    }

    /// Sends what is queued and ends the thread. With `finalize`, MPI is finalized (a clean
    /// exit); without, the process is expected to exit next (an error exit). Waits at most the
    /// communication timeout.
    pub fn shutdown(&self, finalize: bool) {
        let (done, wait) = bounded(1);
        if self.command(Command::Shutdown { finalize, done }).is_ok()
            && wait.recv_timeout(self.timeout).is_ok()
        {
            if let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = thread.join();
            }
        }
    }
}

/// The thread's state between polls.
struct Server {
    world: SimpleCommunicator,
    rank: usize,
    timeout: Duration,
    routes: HashMap<Route, Sender<Envelope>>,
    unrouted: HashMap<Route, Vec<Envelope>>,
    queue: VecDeque<(usize, Envelope)>,
    abort: Option<Arc<Abort>>,
    /// Whether the current abort's failure was told to the peers (or came from one).
    told: bool,
    /// A failure notice that came before any abort was watched.
    early_failure: Option<(usize, String)>,
    shutdown: Option<(bool, Sender<()>)>,
}

fn serve(rx: Receiver<Command>, ready: Sender<Result<Identity, MpiError>>, timeout: Duration) {
    let Some((universe, granted)) = mpi::initialize_with_threading(Threading::Serialized) else {
        let _ = ready.send(Err(MpiError::Init(
            "MPI_Init_thread failed or MPI is already initialised".into(),
        )));
        return;
    };
    if granted < Threading::Serialized {
        let _ = ready.send(Err(MpiError::Threading {
            granted: format!("{granted:?}"),
        }));
        return;
    }
    let world = universe.world();
    // The launcher's node-local rank (Open MPI, MPICH). Not MPI_Comm_split_type(SHARED): on
    // hosts that share a host name (containers, network namespaces) it hung.
    let local_rank = [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "PMI_LOCAL_RANK",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse().ok());
    let identity = Identity {
        rank: world.rank() as usize,
        size: world.size() as usize,
        local_rank,
    };
    if ready.send(Ok(identity)).is_err() {
        return;
    }
    let mut server = Server {
        world,
        rank: identity.rank,
        timeout,
        routes: HashMap::new(),
        unrouted: HashMap::new(),
        queue: VecDeque::new(),
        abort: None,
        told: false,
        early_failure: None,
        shutdown: None,
    };
    let finalize = server.run(&rx);
    if finalize {
        drop(universe);
    } else {
        // An error exit: MPI_Finalize could wait for ranks that will never get there. The
        // process exits next; the launcher sees it end without finalizing.
        std::mem::forget(universe);
    }
}

impl Server {
    /// Serves until shut down; returns whether to finalize.
    fn run(&mut self, rx: &Receiver<Command>) -> bool {
        loop {
            let mut busy = self.drain(rx);
            busy |= self.poll_incoming();
            self.tell_failure();
            if let Some((to, envelope)) = self.queue.pop_front() {
                self.send(to, envelope, rx);
                busy = true;
            }
            if let Some((finalize, done)) = &self.shutdown {
                if self.queue.is_empty() {
                    let _ = done.send(());
                    return *finalize;
                }
            }
            if !busy {
                select! {
                    recv(rx) -> command => match command {
                        Ok(command) => self.handle(command),
                        // Every handle is gone without a shutdown: end without finalizing.
                        Err(_) => return false,
                    },
                    default(POLL) => {}
                }
            }
        }
    }

    /// Handles every waiting command; returns whether there were any.
    fn drain(&mut self, rx: &Receiver<Command>) -> bool {
        let mut any = false;
        while let Ok(command) = rx.try_recv() {
            self.handle(command);
            any = true;
        }
        any
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Send { to, envelope } if to == self.rank => self.deliver(envelope),
            Command::Send { to, envelope } => self.queue.push_back((to, envelope)),
            Command::Register { route, inbox } => {
                // The same inbox of an older connection is gone.
                self.routes.retain(|r, _| {
                    (r.to, r.channel) != (route.to, route.channel) || r.epoch >= route.epoch
                });
                self.unrouted.retain(|r, _| {
                    (r.to, r.channel) != (route.to, route.channel) || r.epoch >= route.epoch
                });
                for envelope in self.unrouted.remove(&route).unwrap_or_default() {
                    let _ = inbox.send(envelope);
                }
                self.routes.insert(route, inbox);
            }
            Command::Watch(abort) => {
                self.abort = Some(abort);
                self.told = false;
                if let Some((rank, message)) = self.early_failure.take() {
                    self.peer_failed(rank, message);
                }
            }
            Command::Fail(message) => {
                if !self.told {
                    self.told = true;
                    self.tell(message);
                }
            }
            Command::Shutdown { finalize, done } => {
                self.tell_failure();
                self.shutdown = Some((finalize, done));
            }
        }
    }

    /// Hands an arrived message to its inbox (or buffers it, or acts on a failure notice).
    fn deliver(&mut self, envelope: Envelope) {
        if envelope.route.channel == channel::FAILURE {
            let message = String::from_utf8_lossy(&envelope.body).into_owned();
            self.peer_failed(envelope.from as usize, message);
            // The launcher may be waiting in a broadcast or gather: it learns of it too.
            if let Some(inbox) = self.routes.get(&Route::process(channel::CONTROL)) {
                let _ = inbox.send(envelope);
            }
            return;
        }
        match self.routes.get(&envelope.route) {
            Some(inbox) => {
                if let Err(back) = inbox.send(envelope) {
                    // The inbox's owner is gone (fresh links replaced it): drop the message.
                    drop(back);
                }
            }
            None => self
                .unrouted
                .entry(envelope.route)
                .or_default()
                .push(envelope),
        }
    }

    fn peer_failed(&mut self, rank: usize, message: String) {
        match &self.abort {
            Some(abort) => {
                abort.fail(EngineError::Peer { rank, message });
                // Not told back: the failure came from a peer.
                self.told = true;
            }
            None => self.early_failure = Some((rank, message)),
        }
    }

    /// Receives whatever has arrived; returns whether anything did.
    fn poll_incoming(&mut self) -> bool {
        let mut any = false;
        while let Some(probed) = self
            .world
            .any_process()
            .immediate_matched_probe_with_tag(TAG)
        {
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            any = true;
            match Envelope::decode(bytes) {
                Ok(envelope) => self.deliver(envelope),
                Err(e) => self.peer_failed(status.source_rank() as usize, e.to_string()),
            }
        }
        any
    }

    /// Tells every other process that the current step failed here (once per abort).
    fn tell_failure(&mut self) {
        let Some(abort) = &self.abort else { return };
        if self.told || !abort.is_aborted() || abort.is_from_peer() {
            return;
        }
        self.told = true;
        let message = abort
            .describe()
            .unwrap_or_else(|| "a worker failed".to_string());
        self.tell(message);
    }

    /// Queues a failure notice with `message` to every other process, ahead of other data.
    fn tell(&mut self, message: String) {
        for to in (0..self.world.size() as usize).filter(|&p| p != self.rank) {
            let envelope = Envelope {
                route: Route::process(channel::FAILURE),
                a: 0,
                b: 0,
                from: self.rank as u32,
                body: message.clone().into_bytes(),
            };
            // Ahead of whatever data is queued: the peers should stop, not compute.
            self.queue.push_front((to, envelope));
        }
    }

    /// Sends one message, polling it against the timeout; meanwhile receives what arrives and
    /// queues new commands' sends.
    fn send(&mut self, to: usize, envelope: Envelope, rx: &Receiver<Command>) {
        let bytes = envelope.encode();
        let deadline = Instant::now() + self.timeout;
        mpi::request::scope(|scope| {
            let mut request = self
                .world
                .process_at_rank(to as i32)
                .immediate_send_with_tag(scope, &bytes[..], TAG);
            let mut reported = false;
            loop {
                match request.test() {
                    Ok(_) => break,
                    Err(pending) => request = pending,
                }
                let busy = self.drain(rx) | self.poll_incoming();
                self.tell_failure();
                if !reported && Instant::now() > deadline {
                    reported = true;
                    let message = format!(
                        "could not send {} bytes to it for {} s (--comm-timeout); it may be dead \
                         or stuck",
                        bytes.len(),
                        self.timeout.as_secs_f64()
                    );
                    self.peer_failed(to, message);
                    if let Some((_, done)) = &self.shutdown {
                        // The process exits with an error next; the send stays pending.
                        let _ = done.send(());
                    }
                }
                if !busy {
                    std::thread::sleep(POLL / 4);
                }
            }
        });
    }
}
