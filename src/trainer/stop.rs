//! A graceful stop on SIGINT (Ctrl-C), SIGTERM, SIGHUP (the terminal closed) or SIGUSR1 (the
//! signal `mpirun` forwards): once a step has completed, the first signal lets the current step
//! finish, then the run writes its final checkpoint, flushes its metrics and ends with
//! [`Outcome::stopped`](crate::trainer::Outcome::stopped) (the binary then exits 128 + the
//! signal's number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, 138 for SIGUSR1). A second
//! signal exits the process at once with the same code, for a stop that takes too long.
//!
//! Under Open MPI's `mpirun` (4.x), SIGINT and SIGTERM never reach the ranks as such: `mpirun`
//! kills the job instead (SIGCONT, `odls_base_sigkill_timeout` seconds, SIGTERM, as long again,
//! SIGKILL; 1 s by default). SIGUSR1 and SIGUSR2 it forwards to every rank at once and kills
//! nothing, so `kill -USR1 <mpirun's pid>` is the graceful stop of a multi-process run. A rank
//! told to stop by SIGTERM under Open MPI says so at once, with the remedy
//! ([`Stop::install_for_rank`]; docs/mpi.md).
//!
//! Before the first step completes (the model still being built and allocated, or a first step
//! that takes minutes) there is nothing to save, so the first signal exits at once.
//!
//! A test hook makes the signal tests independent of the host's speed:
//! `PIPETRAIN_TEST_HOLD_STEP=<step>:<path>` holds step `<step>` (counted from 1) open before it
//! computes anything, until the file `<path>` exists. The run reports ([`Event::Held`]) when it
//! holds the step and when a signal arrives meanwhile ([`Event::SignalWhileHeld`]), so a test
//! signals a step that is certainly open, knows the signal was taken before it sends another,
//! and ends the step when it wants.

use crate::RunError;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::flag;

use crate::Error;
use crate::trainer::Event;

/// A signal that asks a run to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// SIGHUP: the terminal the run was started from closed.
    Hangup,
    /// SIGUSR1: the signal `mpirun` forwards to every rank without killing it.
    User1,
}

impl Signal {
    /// The exit code of a process that it ends: 128 + the signal's number (130, 143, 129, 138).
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
            Signal::Hangup => 129,
            Signal::User1 => 138,
        }
    }

    /// The signal as one byte (0: none), to agree on across processes.
    pub fn to_byte(signal: Option<Signal>) -> u8 {
        match signal {
            None => 0,
            Some(Signal::Interrupt) => 1,
            Some(Signal::Terminate) => 2,
            Some(Signal::Hangup) => 3,
            Some(Signal::User1) => 4,
        }
    }

    /// The inverse of [`to_byte`](Self::to_byte).
    pub fn from_byte(byte: u8) -> Option<Signal> {
        match byte {
            1 => Some(Signal::Interrupt),
            2 => Some(Signal::Terminate),
            3 => Some(Signal::Hangup),
            4 => Some(Signal::User1),
            _ => None,
        }
    }

    /// The signal's name: `SIGINT`, `SIGTERM`, `SIGHUP`, `SIGUSR1`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
            Signal::Hangup => "SIGHUP",
            Signal::User1 => "SIGUSR1",
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The signals asked to stop the run, as they arrive.
pub struct Stop {
    /// The first signal's number, 0 until one arrives.
    signal: Arc<AtomicUsize>,
    /// Set: the next signal exits at once.
    armed: Arc<AtomicBool>,
    /// The test hook: the step to hold open and the file that ends the hold.
    hold: Option<(u64, PathBuf)>,
}

/// The variable of the test hook (see the module's documentation).
pub const HOLD_VARIABLE: &str = "PIPETRAIN_TEST_HOLD_STEP";

/// The test hook's `<step>:<path>`, parsed.
fn parse_hold(value: &str) -> Result<(u64, PathBuf), Error> {
    let bad = || {
        Error::Run(RunError::Signals(format!(
            "{HOLD_VARIABLE}={value}: expected <step>:<path> with a step of 1 or more (a test \
             hook: unset it to train normally)"
        )))
    };
    let (step, path) = value.split_once(':').ok_or_else(bad)?;
    let step: u64 = step.trim().parse().map_err(|_| bad())?;
    if step == 0 || path.is_empty() {
        return Err(bad());
    }
    Ok((step, PathBuf::from(path)))
}

impl Stop {
    /// Installs the handlers for this process.
    ///
    /// # Errors
    /// [`|e| Error::Run(RunError::Signals(e))`]: the OS refused a handler, or the test hook is malformed.
    pub fn install() -> Result<Self, Error> {
        Self::install_with(true)
    }

    /// Installs the handlers for one rank of a multi-process run: as [`install`](Self::install),
    /// except that once a step has completed a second signal does not exit at once: the ranks
    /// must reach the step's end together to agree and save (`Processes::agree_stop`), and a
    /// rank that left at once would leave the others waiting. `mpirun` itself ends a stop that
    /// takes too long.
    ///
    /// Under Open MPI (`OMPI_COMM_WORLD_SIZE` set), the `leader` says on stderr as soon as a
    /// SIGTERM or SIGINT arrives that `mpirun` kills the ranks `odls_base_sigkill_timeout`
    /// seconds later (the module's documentation), so that the run is saved only if the step
    /// and the save end within that grace, and names the graceful stop: SIGUSR1 to `mpirun`;
    /// and no rank's stdout blocks from then on (`before_the_kill`).
    ///
    /// # Errors
    /// As [`install`](Self::install).
    pub fn install_for_rank(leader: bool) -> Result<Self, Error> {
        let stop = Self::install_with(false)?;
        if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
            stop.before_the_kill(leader)
                .map_err(|e| Error::Run(RunError::Signals(e.to_string())))?;
        }
        Ok(stop)
    }

    fn install_with(second_exits: bool) -> Result<Self, Error> {
        let hold = match std::env::var(HOLD_VARIABLE) {
            Ok(value) => Some(parse_hold(&value)?),
            Err(_) => None,
        };
        let signal = Arc::new(AtomicUsize::new(0));
        // Armed until a step completes (see the module docs and [`Stop::graceful`]).
        let armed = Arc::new(AtomicBool::new(true));
        let refused = |e: std::io::Error| Error::Run(RunError::Signals(e.to_string()));
        for (sig, exit) in [
            (SIGINT, Signal::Interrupt),
            (SIGTERM, Signal::Terminate),
            (SIGHUP, Signal::Hangup),
            (SIGUSR1, Signal::User1),
        ] {
            // In this order: a second signal finds the flag the first one set, and exits.
            flag::register_conditional_shutdown(
                sig,
                i32::from(exit.exit_code()),
                Arc::clone(&armed),
            )
            .map_err(refused)?;
            flag::register_usize(sig, Arc::clone(&signal), sig as usize).map_err(refused)?;
            if second_exits {
                flag::register(sig, Arc::clone(&armed)).map_err(refused)?;
            }
        }
        Ok(Self {
            signal,
            armed,
            hold,
        })
    }

    /// Starts the thread that readies this rank for Open MPI's kill when SIGTERM or SIGINT
    /// arrives: the `leader` prints [`open_mpi_kill_warning`], and every rank makes its stdout
    /// non-blocking, since `mpirun` reads no output until the SIGKILL: a line written into the
    /// full pseudo-terminal would otherwise hold the rank there, short of the step's end and the
    /// save (its lines are lost instead). The handler writes a byte into a socket and the
    /// thread, which reads it, does the rest (nothing else runs in the handler).
    fn before_the_kill(&self, leader: bool) -> std::io::Result<()> {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        use std::os::unix::net::UnixStream;
        let (mut read, write) = UnixStream::pair()?;
        signal_hook::low_level::pipe::register(SIGTERM, write.try_clone()?)?;
        signal_hook::low_level::pipe::register(SIGINT, write)?;
        let signal = Arc::clone(&self.signal);
        std::thread::Builder::new()
            .name("open-mpi-kill".into())
            .spawn(move || {
                let mut byte = [0u8];
                if read.read_exact(&mut byte).is_err() {
                    return;
                }
                let stdout = std::io::stdout();
                let fd = stdout.as_fd();
                if let Ok(flags) = rustix::fs::fcntl_getfl(fd) {
                    let _ = rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK);
                }
                if leader {
                    let signal = match signal.load(Ordering::SeqCst) {
                        s if s == SIGINT as usize => Signal::Interrupt,
                        _ => Signal::Terminate,
                    };
                    // Not `eprintln!`, which panics on a closed stderr.
                    let _ = writeln!(std::io::stderr(), "{}", open_mpi_kill_warning(signal));
                }
            })?;
        Ok(())
    }

    /// From now on (a step has completed) the first signal lets the current step finish. A
    /// signal that arrived already keeps the next one exiting at once.
    pub fn graceful(&self) {
        if self.signal.load(Ordering::SeqCst) == 0 {
            self.armed.store(false, Ordering::SeqCst);
        }
    }

    /// The test hook: holds `step` (counted from 1) open until its release file exists, telling
    /// `report` so, and when a signal arrives meanwhile. Returns at once for any other step, or
    /// without the hook.
    pub fn hold<L: crate::Layer>(&self, step: u64, report: &mut dyn FnMut(Event<'_, L>)) {
        let Some((held, path)) = self.hold.as_ref().filter(|(held, _)| *held == step) else {
            return;
        };
        report(Event::Held { step, path });
        let mut told = false;
        while !path.exists() {
            if let Some(signal) = self.requested().filter(|_| !told) {
                report(Event::SignalWhileHeld {
                    step: *held,
                    signal,
                });
                told = true;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// The signal that asked the run to stop, if one has arrived.
    pub fn requested(&self) -> Option<Signal> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            s if s == SIGTERM as usize => Some(Signal::Terminate),
            s if s == SIGHUP as usize => Some(Signal::Hangup),
            s if s == SIGUSR1 as usize => Some(Signal::User1),
            _ => Some(Signal::Interrupt),
        }
    }
}

/// The kill's grace under Open MPI: `odls_base_sigkill_timeout` as `mpirun` passes its MCA
/// parameters to the ranks (`OMPI_MCA_…`), 1 s when unset.
pub fn open_mpi_kill_grace() -> String {
    std::env::var("OMPI_MCA_odls_base_sigkill_timeout").unwrap_or_else(|_| "1".to_string())
}

/// What the leader says when SIGTERM or SIGINT reaches it under Open MPI.
pub fn open_mpi_kill_warning(signal: Signal) -> String {
    let grace = open_mpi_kill_grace();
    format!(
        "{signal} under Open MPI's mpirun: mpirun sends every rank SIGTERM and kills it {grace} s \
         later (--mca odls_base_sigkill_timeout {grace}), so the run is saved only if this step \
         and the save end within {grace} s. For a graceful stop, signal mpirun with SIGUSR1 \
         (kill -USR1 <mpirun's pid>), which it forwards to every rank without killing any; or \
         give mpirun --mca odls_base_sigkill_timeout <seconds> above a step and a save \
         (docs/mpi.md)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signal_crosses_processes_as_one_byte_and_back() {
        use Signal::{Hangup, Interrupt, Terminate, User1};
        for signal in [
            None,
            Some(Interrupt),
            Some(Terminate),
            Some(Hangup),
            Some(User1),
        ] {
            assert_eq!(Signal::from_byte(Signal::to_byte(signal)), signal);
        }
        assert_eq!(User1.exit_code(), 128 + 10);
    }

    #[test]
    fn the_kill_warning_names_the_grace_and_the_graceful_stop() {
        let warning = open_mpi_kill_warning(Signal::Terminate);
        let grace = open_mpi_kill_grace();
        assert!(
            warning.starts_with("SIGTERM under Open MPI's mpirun")
                && warning.contains(&format!("kills it {grace} s later"))
                && warning.contains("kill -USR1 <mpirun's pid>"),
            "{warning}"
        );
    }

    #[test]
    fn the_hold_hook_parses_a_step_and_a_path() {
        let (step, path) = parse_hold("3:/tmp/go").unwrap();
        assert_eq!((step, path), (3, PathBuf::from("/tmp/go")));
        for bad in ["3", "0:/tmp/go", "x:/tmp/go", "3:"] {
            let e = parse_hold(bad).err().unwrap().to_string();
            assert!(e.contains(&format!("{HOLD_VARIABLE}={bad}")), "{e}");
        }
    }
}
