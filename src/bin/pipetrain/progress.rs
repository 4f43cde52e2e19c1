//! Progress of a training run: an indicatif bar (loss, samples/s, ETA) when stdout is a
//! terminal, one `step i/N loss ...` line per step otherwise (logs, pipes, tests).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// How steps are shown.
pub enum Progress {
    /// A live bar; the step lines are not printed.
    Bar(ProgressBar),
    /// One line per step on stdout.
    Lines,
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
    /// 0 (`leader`; mpirun gives ranks a pseudo-terminal but forwards no bar) and nothing from
    /// the others.
    pub fn of_process(steps: u64, multi_process: bool, leader: bool) -> Self {
        match (multi_process, leader) {
            (false, _) => Progress::new(steps),
            (true, true) => Progress::Lines,
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
            Progress::Silent => {}
        }
    }

    /// Prints a line that stays above the bar (or just prints it).
    pub fn println(&self, line: &str) {
        match self {
            Progress::Bar(bar) => bar.println(line),
            Progress::Lines => println!("{line}"),
            Progress::Silent => {}
        }
    }

    /// Removes the bar, leaving its last state on screen.
    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish();
        }
    }
}
