//! Progress of a training run: an indicatif bar (loss, samples/s, ETA) when stdout is a
//! terminal, one `step i/N loss ...` line per step otherwise (logs, pipes, tests).
//!
//! Rank 0 of a multi-process run writes its lines through a thread ([`Relay`]): Open MPI's
//! `mpirun` stops reading the ranks' output while it kills a job (it sleeps
//! `odls_base_sigkill_timeout` seconds twice: docs/mpi.md), and a rank writing into the full
//! pseudo-terminal would block there, never reaching the step's end to stop and save before the
//! SIGKILL. The training thread only queues its lines (dropping them when the queue is full).

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use indicatif::{ProgressBar, ProgressStyle};

/// How steps are shown.
pub enum Progress {
    /// A live bar; the step lines are not printed.
    Bar(ProgressBar),
    /// One line per step on stdout.
    Lines,
    /// One line per step, written by a thread: rank 0 of a multi-process run.
    Relayed(Relay),
    /// Nothing: a process other than rank 0 of a multi-process run.
    Silent,
}

/// What the training thread hands the [`Relay`]'s thread.
enum Message {
    /// A line to write.
    Line(String),
    /// Answer once every line before this one is written.
    Drained(SyncSender<()>),
}

/// Lines written on stdout by a thread of their own, so that the training thread never waits
/// on a stdout that is not read (see the module's documentation).
pub struct Relay {
    queue: SyncSender<Message>,
}

/// Lines the relay holds before it drops new ones: minutes of step lines.
const RELAY_LINES: usize = 4096;

impl Relay {
    /// Starts the thread, which writes through a descriptor of its own (not `std::io::stdout`'s
    /// lock, which the training thread takes too). Without a thread or a descriptor, the lines
    /// go to stdout at once.
    fn start() -> Option<Self> {
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
    fn send(&self, line: &str) {
        if let Err(TrySendError::Disconnected(_)) = self.queue.try_send(Message::Line(line.into()))
        {
            println!("{line}");
        }
    }

    /// Waits until every line queued is written.
    fn drain(&self) {
        let (done, written) = sync_channel(1);
        if self.queue.send(Message::Drained(done)).is_ok() {
            let _ = written.recv();
        }
    }
}

impl Progress {
    /// A bar over `steps` steps if stdout is a terminal, else plain lines.
    pub fn new(steps: u64) -> Self {
        if !std::io::stdout().is_terminal() {
            return Progress::Lines;
        }
        let bar = ProgressBar::new(steps);
        let style = ProgressStyle::with_template(
            "{bar:30.cyan/blue} {pos}/{len} [{elapsed_precise} < {eta_precise}] {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Progress::Bar(bar)
    }

    /// [`new`](Self::new) for a one-process run; in a multi-process one, plain lines from rank
    /// 0 (`leader`; mpirun gives ranks a pseudo-terminal but forwards no bar) through a
    /// [`Relay`], and nothing from the others.
    pub fn of_process(steps: u64, multi_process: bool, leader: bool) -> Self {
        match (multi_process, leader) {
            (false, _) => Progress::new(steps),
            (true, true) => Relay::start().map_or(Progress::Lines, Progress::Relayed),
            (true, false) => Progress::Silent,
        }
    }

    /// Reports one finished step: `line` is the full log line, `loss` and `samples_per_sec`
    /// feed the bar.
    pub fn step(&self, line: &str, loss: f64, samples_per_sec: f64) {
        match self {
            Progress::Bar(bar) => {
                bar.set_message(format!("loss {loss:.4}  {samples_per_sec:.0} samples/s"));
                bar.inc(1);
            }
            Progress::Lines => println!("{line}"),
            Progress::Relayed(relay) => relay.send(line),
            Progress::Silent => {}
        }
    }

    /// Prints a line that stays above the bar (or just prints it).
    pub fn println(&self, line: &str) {
        match self {
            Progress::Bar(bar) => bar.println(line),
            Progress::Lines => println!("{line}"),
            Progress::Relayed(relay) => relay.send(line),
            Progress::Silent => {}
        }
    }

    /// Prints a line on every process, in order with the progress lines.
    pub fn println_everywhere(&self, line: &str) {
        match self {
            Progress::Relayed(relay) => relay.send(line),
            _ => println!("{line}"),
        }
    }

    /// Waits until the lines given are written, before a line printed otherwise. Not on a
    /// stop: stdout may not be read then (see the module's documentation).
    pub fn drain(&self) {
        if let Progress::Relayed(relay) = self {
            relay.drain();
        }
    }

    /// Removes the bar, leaving its last state on screen.
    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish();
        }
    }
}
