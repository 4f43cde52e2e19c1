//! The communication thread's loop (see [`Comm`](super::Comm)): commands in, MPI messages out
//! and in, one envelope at a time (`MPI_Isend`, polled against the timeout), arrivals probed
//! meanwhile, failure notices told and heard.
//!
//! A process that fails on its own tells the others, and at its error exit waits (at most
//! [`LINGER`], within the timeout) until each of them says it has ended (reported its error, the
//! failing rank named): a launcher ends the whole job once one process exits with an error, and
//! would otherwise kill the others before they could say which rank failed and why.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};
use mpi::Threading;
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use pipetrain_schedules::remedy::{Remedy, Setting, Value};

use super::comm::Identity;
use super::notice::Notice;
use super::wire::{Body, Envelope, Frames, Route, TAG, TAG_HEAD, TAG_VALUES, channel};
use crate::comm::abort::Abort;
use crate::error::EngineError;

/// How long the thread sleeps waiting for a command when nothing arrives (its polling period).
const POLL: Duration = Duration::from_micros(200);

/// The longest an error exit waits for the others to end (see the module docs). A process told
/// of a failure ends its step within a second (docs/design.md, "no hangs"); one that had
/// finished already never answers, and costs the failing process this wait.
const LINGER: Duration = Duration::from_secs(5);

/// How a wait on MPI (a send to complete, announced values to arrive) gives the CPU back: a
/// few yields first (a small message completes within microseconds), then sleeps that double up
/// to [`Backoff::MAX`]. A shared-memory transfer is done by the receiver (one copy, CMA), so the
/// sender only has to notice the end; over TCP each poll moves what the socket takes. Spinning
/// instead took a core from the workers whenever there are more threads than cores.
struct Backoff {
    waits: u32,
}

impl Backoff {
    const SPINS: u32 = 32;
    const MAX: Duration = Duration::from_micros(100);

    fn new() -> Self {
        Self { waits: 0 }
    }

    /// Something moved: wait briefly again next time.
    fn reset(&mut self) {
        self.waits = 0;
    }

    fn wait(&mut self) {
        self.waits = self.waits.saturating_add(1);
        if self.waits <= Self::SPINS {
            std::thread::yield_now();
        } else {
            let doublings = (self.waits - Self::SPINS).min(8);
            let pause = Duration::from_micros(1 << doublings).min(Self::MAX);
            std::thread::sleep(pause);
        }
    }
}

pub(super) enum Command {
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
    early_failure: Option<(usize, Notice)>,
    shutdown: Option<(bool, Sender<()>)>,
    /// Whether this process told the others a failure of its own.
    originated: bool,
    /// The processes that said they ended after an error.
    ended: HashSet<usize>,
    /// At an error exit: until when to wait for the others to end (see the module docs).
    linger_until: Option<Instant>,
}

pub(super) fn serve(
    rx: Receiver<Command>,
    ready: Sender<Result<Identity, EngineError>>,
    timeout: Duration,
) {
    let Some((universe, granted)) = mpi::initialize_with_threading(Threading::Serialized) else {
        let _ = ready.send(Err(EngineError::MpiInit(
            "MPI_Init_thread failed or MPI is already initialised".into(),
        )));
        return;
    };
    if granted < Threading::Serialized {
        let _ = ready.send(Err(EngineError::MpiThreading {
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
        originated: false,
        ended: HashSet::new(),
        linger_until: None,
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
                if self.queue.is_empty() && !self.lingering() {
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
                if let Some((rank, notice)) = self.early_failure.take() {
                    self.peer_failed(rank, notice);
                }
            }
            Command::Fail(message) => {
                if !self.told {
                    self.told = true;
                    self.tell(&Notice {
                        message,
                        remedy: None,
                    });
                }
            }
            Command::Shutdown { finalize, done } => {
                self.tell_failure();
                if !finalize {
                    // This process has reported its error: a failing peer may end now.
                    self.queue_to_peers(channel::ENDED, &[]);
                    self.linger_until = Some(Instant::now() + LINGER.min(self.timeout));
                }
                self.shutdown = Some((finalize, done));
            }
        }
    }

    /// Whether an error exit still waits: this process's own failure was told, and some peer
    /// has not said it ended yet, within the timeout.
    fn lingering(&self) -> bool {
        let peers = self.world.size() as usize - 1;
        self.originated
            && self.ended.len() < peers
            && self.linger_until.is_some_and(|t| Instant::now() < t)
    }

    /// Hands an arrived message to its inbox (or buffers it, or acts on a failure notice).
    fn deliver(&mut self, envelope: Envelope) {
        if envelope.route.channel == channel::ENDED {
            self.ended.insert(envelope.from as usize);
            return;
        }
        if envelope.route.channel == channel::FAILURE {
            let notice = Notice::decode(envelope.body.as_bytes());
            self.peer_failed(envelope.from as usize, notice);
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

    fn peer_failed(&mut self, rank: usize, notice: Notice) {
        match &self.abort {
            Some(abort) => {
                abort.fail(EngineError::Peer {
                    rank,
                    message: notice.message,
                    remedy: notice.remedy,
                });
                // Not told back: the failure came from a peer.
                self.told = true;
            }
            None => self.early_failure = Some((rank, notice)),
        }
    }

    /// Receives whatever has arrived; returns whether anything did.
    fn poll_incoming(&mut self) -> bool {
        let mut any = false;
        loop {
            let world = &self.world;
            if let Some(probed) = world.any_process().immediate_matched_probe_with_tag(TAG) {
                let (bytes, status) = probed.matched_receive_vec::<u8>();
                match Envelope::decode(bytes) {
                    Ok(envelope) => self.deliver(envelope),
                    Err(e) => self.peer_failed(
                        status.source_rank() as usize,
                        Notice {
                            message: e.to_string(),
                            remedy: None,
                        },
                    ),
                }
            } else if let Some(probed) = world
                .any_process()
                .immediate_matched_probe_with_tag(TAG_HEAD)
            {
                let (head, status) = probed.matched_receive_vec::<u8>();
                let from = status.source_rank() as usize;
                match Envelope::decode_head(&head).and_then(|(e, count)| {
                    let values = self.receive_values(from, count)?;
                    Ok(Envelope {
                        body: Body::Values(values),
                        ..e
                    })
                }) {
                    Ok(envelope) => self.deliver(envelope),
                    Err(e) => self.peer_failed(
                        from,
                        Notice {
                            message: e.to_string(),
                            remedy: None,
                        },
                    ),
                }
            } else {
                return any;
            }
            any = true;
        }
    }

    /// The `count` values that follow a value header from process `from` (next on
    /// [`TAG_VALUES`]: it sends them right after the header), waited for within the timeout.
    fn receive_values(&mut self, from: usize, count: usize) -> Result<Vec<f32>, EngineError> {
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Backoff::new();
        loop {
            if let Some(probed) = self
                .world
                .process_at_rank(from as i32)
                .immediate_matched_probe_with_tag(TAG_VALUES)
            {
                let (values, _) = probed.matched_receive_vec::<f32>();
                if values.len() != count {
                    return Err(EngineError::MalformedMessage(format!(
                        "a header announced {count} values, {} came",
                        values.len()
                    )));
                }
                return Ok(values);
            }
            if Instant::now() > deadline {
                return Err(EngineError::MalformedMessage(format!(
                    "the {count} values announced by a header did not come within {} s \
                     (the communication timeout)",
                    self.timeout.as_secs_f64()
                )));
            }
            backoff.wait();
        }
    }

    /// Tells every other process that the current step failed here (once per abort).
    fn tell_failure(&mut self) {
        let Some(abort) = &self.abort else { return };
        if self.told || !abort.is_aborted() || abort.is_from_peer() {
            return;
        }
        self.told = true;
        let (message, remedy) = abort
            .describe()
            .unwrap_or_else(|| ("a worker failed".to_string(), None));
        self.tell(&Notice { message, remedy });
    }

    /// Queues a failure notice of this process's own to every other process.
    fn tell(&mut self, notice: &Notice) {
        self.originated = true;
        self.queue_to_peers(channel::FAILURE, &notice.encode());
    }

    /// Queues a process-level message on `channel` with `body` to every other process.
    fn queue_to_peers(&mut self, channel: u32, body: &[u8]) {
        for to in (0..self.world.size() as usize).filter(|&p| p != self.rank) {
            let envelope = Envelope {
                route: Route::process(channel),
                a: 0,
                b: 0,
                from: self.rank as u32,
                body: Body::Bytes(body.to_vec()),
            };
            // Behind what is queued: a broadcast already queued must arrive first, so that a peer
            // waiting in it goes on to find the same error itself (and exits with its code).
            self.queue.push_back((to, envelope));
        }
    }

    /// Sends one envelope (one or two MPI messages), each polled against the timeout;
    /// meanwhile receives what arrives and queues new commands' sends.
    fn send(&mut self, to: usize, envelope: Envelope, rx: &Receiver<Command>) {
        match envelope.frames() {
            Frames::Bytes(bytes) => {
                self.send_frame(to, &bytes[..], TAG, rx);
            }
            Frames::Values { head, values } => {
                if self.send_frame(to, &head[..], TAG_HEAD, rx) {
                    self.send_frame(to, &values[..], TAG_VALUES, rx);
                }
            }
        }
    }

    /// Sends one MPI message, polling it until it completes; returns whether it completed
    /// within the timeout (if not, the peer was reported failed meanwhile).
    fn send_frame<T: mpi::datatype::Equivalence>(
        &mut self,
        to: usize,
        buffer: &[T],
        tag: i32,
        rx: &Receiver<Command>,
    ) -> bool {
        let deadline = Instant::now() + self.timeout;
        let bytes = std::mem::size_of_val(buffer);
        mpi::request::scope(|scope| {
            let mut request = self
                .world
                .process_at_rank(to as i32)
                .immediate_send_with_tag(scope, buffer, tag);
            let mut reported = false;
            let mut backoff = Backoff::new();
            loop {
                match request.test() {
                    Ok(_) => return !reported,
                    Err(pending) => request = pending,
                }
                let busy = self.drain(rx) | self.poll_incoming();
                self.tell_failure();
                if !reported && Instant::now() > deadline {
                    reported = true;
                    let message = format!(
                        "could not send {bytes} bytes to it for {} s (the communication \
                         timeout); it may be dead or stuck, or waiting on a rank that is",
                        self.timeout.as_secs_f64()
                    );
                    let remedy = Some(Remedy::set(Setting::CommTimeout, Value::Larger));
                    self.peer_failed(to, Notice { message, remedy });
                    if let Some((_, done)) = &self.shutdown {
                        // The process exits with an error next; the send stays pending.
                        let _ = done.send(());
                    }
                }
                if busy {
                    backoff.reset();
                } else {
                    backoff.wait();
                }
            }
        })
    }
}
