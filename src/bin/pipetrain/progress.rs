//! Progress of a training run: an indicatif bar (loss, samples/s, ETA) when stdout is a
//! terminal, one `step i/N loss ...` line per step otherwise (logs, pipes, tests).
//!
//! Rank 0 of a multi-process run writes its lines through a thread (the library's
//! [`LineRelay`]), so that a `mpirun` that stops reading while it kills the job never holds the
//! training (docs/mpi.md).

use std::io::IsTerminal;

use pipetrain::trainer::LineRelay;

use indicatif::{ProgressBar, ProgressStyle};

/// How steps are shown.
pub enum Progress {
    /// A live bar; the step lines are not printed.
    Bar(ProgressBar),
    /// One line per step on stdout.
    Lines,
    /// One line per step, written by a thread: rank 0 of a multi-process run.
    Relayed(LineRelay),
    /// Nothing: a process other than rank 0 of a multi-process run.
    Silent,
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
    /// [`LineRelay`], and nothing from the others.
    pub fn of_process(steps: u64, multi_process: bool, leader: bool) -> Self {
        match (multi_process, leader) {
            (false, _) => Progress::new(steps),
            (true, true) => LineRelay::start().map_or(Progress::Lines, Progress::Relayed),
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
