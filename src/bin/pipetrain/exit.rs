//! The exit codes of `pipetrain`, defined once: [`Exit`] is the process status, and its
//! [`Exit::table`] is shown under `--help`; `tests/cli/exit.rs` checks that the table in
//! docs/exit-codes.md says the same.
//!
//! The split between 1 and 2 is by cause, not by time: 2 means "fix the command line" (a
//! flag, the `--config` file, a path that does not exist, a combination the pipeline builder
//! refuses), 1 means the inputs, the training or the outputs failed while the command ran.

use std::process::ExitCode;

/// How a `pipetrain` command ended, as its process exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: the command did what was asked.
    Success,
    /// 1: the run started and failed (a [`crate::failure::Failure`] of this kind).
    Runtime,
    /// 2: the command line was refused before anything was trained (clap's own errors too).
    Usage,
    /// 3: `--verify` ran to the end and the weights differ by more than the tolerance.
    VerifyFailed,
    /// 4: `doctor` ran its sweep to the end and at least one case failed.
    DoctorFailed,
    /// 129 (128 + SIGHUP): stopped because its terminal closed, after saving what it could.
    HungUp,
    /// 138 (128 + SIGUSR1): stopped by SIGUSR1 (the signal `mpirun` forwards) after saving what
    /// it could.
    User1,
    /// 130 (128 + SIGINT): stopped by Ctrl-C after saving what it could.
    Interrupted,
    /// 143 (128 + SIGTERM): stopped by SIGTERM after saving what it could.
    Terminated,
}

impl Exit {
    /// Every exit code, in numeric order.
    pub const ALL: [Exit; 9] = [
        Exit::Success,
        Exit::Runtime,
        Exit::Usage,
        Exit::VerifyFailed,
        Exit::DoctorFailed,
        Exit::HungUp,
        Exit::Interrupted,
        Exit::User1,
        Exit::Terminated,
    ];

    /// The process exit status.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Runtime => 1,
            Exit::Usage => 2,
            Exit::VerifyFailed => 3,
            Exit::DoctorFailed => 4,
            Exit::HungUp => 129,
            Exit::Interrupted => 130,
            Exit::User1 => 138,
            Exit::Terminated => 143,
        }
    }

    /// What the code means, one sentence for `--help` and docs/exit-codes.md.
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Success => {
                "success (with --verify: the weights matched within --verify-tolerance)"
            }
            Exit::Runtime => {
                "runtime error: the run started and failed: an unreadable or corrupt --data, \
                 --init or --resume file, a failed training step, or an output file that cannot \
                 be written (a side output lost to a full disk too: the training and its \
                 checkpoint are done, but --metrics, --profile or --plot is not this run's)"
            }
            Exit::Usage => {
                "usage error, nothing was trained: an unknown flag or value, a bad --config \
                 file, flags that contradict each other or the files they name (the data's \
                 shapes and labels, the --init weights, the --resume checkpoint's run), a \
                 configuration the pipeline builder refuses, an input file or output directory \
                 that does not exist, or an output path that cannot be written"
            }
            Exit::VerifyFailed => {
                "--verify failed: the run finished, but the pipelined weights differ from \
                 single-device training by more than --verify-tolerance"
            }
            Exit::DoctorFailed => {
                "doctor: the sweep ran to the end and at least one case failed (the table names \
                 it)"
            }
            Exit::HungUp => "hung up (SIGHUP: the terminal closed): the same graceful stop as 130",
            Exit::Interrupted => {
                "interrupted (SIGINT, Ctrl-C): train finished the current step, saved the final \
                 --checkpoint, flushed --metrics and --profile and said what it saved; a second \
                 signal exits at once"
            }
            Exit::User1 => {
                "stopped by SIGUSR1, the signal mpirun forwards to every rank (kill -USR1 \
                 <mpirun's pid>): the same graceful stop as 130, every rank after the same step"
            }
            Exit::Terminated => "terminated (SIGTERM): the same graceful stop as 130",
        }
    }

    /// The table shown under `--help`: `Exit codes:` and one wrapped entry per code.
    pub fn table() -> String {
        let mut out = String::from("Exit codes:");
        for exit in Exit::ALL {
            out += &format!("\n  {:<3}  ", exit.code());
            let mut column = 7;
            for (i, word) in exit.meaning().split(' ').enumerate() {
                if i > 0 && column + 1 + word.len() > 96 {
                    out += "\n       ";
                    column = 7;
                } else if i > 0 {
                    out.push(' ');
                    column += 1;
                }
                out += word;
                column += word.len();
            }
        }
        out
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn codes_are_distinct_and_in_order() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 129, 130, 138, 143]);
    }

    #[test]
    fn the_table_lists_every_code_within_96_columns() {
        let table = Exit::table();
        for exit in Exit::ALL {
            assert!(
                table.contains(&format!("\n  {:<3}  ", exit.code())),
                "{table}"
            );
        }
        assert!(table.lines().all(|l| l.len() <= 96), "{table}");
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        for exit in Exit::ALL {
            assert!(words(&table).contains(exit.meaning()), "{table}");
        }
    }
}
