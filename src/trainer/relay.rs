//! Lines written on stdout by a thread: [`LineRelay`].
//!
//! Open MPI's `mpirun` (4.x) stops reading its ranks' output while it kills a job (it sleeps
//! `odls_base_sigkill_timeout` seconds, twice, inside its event loop: docs/mpi.md). A rank that
//! writes a line into the full pseudo-terminal then blocks there, short of the step's end where
//! it would stop and save, until the SIGKILL. Through a relay, the training thread only queues
//! its lines (dropping new ones when the queue is full); the relay's thread is the one that
//! blocks.

use std::io::Write;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// What the training thread hands the [`LineRelay`]'s thread.
enum Message {
    /// A line to write.
    Line(String),
    /// Answer once every line before this one is written.
    Drained(SyncSender<()>),
}

/// Lines written on stdout by a thread of their own, so that the training thread never waits
/// on a stdout that is not read (see the module's documentation).
///
/// ```
/// let relay = pipetrain::trainer::LineRelay::start().expect("a thread and a descriptor");
/// relay.send("step 1/2  loss 0.5");
/// relay.drain(); // written
/// ```
pub struct LineRelay {
    queue: SyncSender<Message>,
}

/// Lines the relay holds before it drops new ones: minutes of step lines.
const RELAY_LINES: usize = 4096;

impl LineRelay {
    /// Starts the thread, which writes through a descriptor of its own (not `std::io::stdout`'s
    /// lock, which the training thread takes too); `None` when there is no thread or no
    /// descriptor to be had (the caller then prints its lines itself).
    pub fn start() -> Option<Self> {
        use std::os::fd::AsFd;
        let out = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
        let (queue, lines) = sync_channel(RELAY_LINES);
        std::thread::Builder::new()
            .name("pipetrain-stdout".into())
            .spawn(move || Self::write(std::fs::File::from(out), &lines))
            .ok()?;
        Some(Self { queue })
    }

    /// The thread: each line as it comes, errors ignored (as `println!`).
    fn write(mut out: std::fs::File, lines: &Receiver<Message>) {
        for message in lines {
            match message {
                Message::Line(line) => {
                    let _ = writeln!(out, "{line}");
                }
                Message::Drained(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    /// Queues `line`; drops it if the queue is full (stdout not read for minutes).
    pub fn send(&self, line: &str) {
        if let Err(TrySendError::Disconnected(_)) = self.queue.try_send(Message::Line(line.into()))
        {
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }
    }

    /// Waits until every line queued is written.
    pub fn drain(&self) {
        let (done, written) = sync_channel(1);
        if self.queue.send(Message::Drained(done)).is_ok() {
            let _ = written.recv();
        }
    }
}

/// How long a relay dropped at the end of a run waits for its lines: a run that failed or
/// stopped exits soon after, and its last lines should not be lost to that; but a stdout that is
/// not read (`mpirun` killing the job) must not hold the exit for ever.
const DROP_WAIT: Duration = Duration::from_secs(5);

impl Drop for LineRelay {
    /// Waits (up to 5 s, `DROP_WAIT`) until the lines queued are written.
    fn drop(&mut self) {
        let (done, written) = sync_channel(1);
        if self.queue.try_send(Message::Drained(done)).is_ok() {
            let _ = written.recv_timeout(DROP_WAIT);
        }
    }
}
