//! A graceful stop on SIGINT (Ctrl-C) or SIGTERM: once a step has completed, the first signal
//! lets the current step finish, then the run writes its final checkpoint (with
//! `--checkpoint`), flushes its metrics and trace, says what it saved and exits 130 (SIGINT) or
//! 143 (SIGTERM). A second signal exits at once with the same code, for a stop that takes too
//! long.
//!
//! Before the first step completes (the model still being built and allocated, or a first step
//! that takes minutes) there is nothing to save, so the first signal exits at once.
//!
//! A test hook makes the signal tests independent of the host's speed:
//! `PIPETRAIN_TEST_HOLD_STEP=<step>:<path>` holds step `<step>` (counted from 1) open before it
//! computes anything, until the file `<path>` exists. The run says on stderr when it holds the
//! step (`test hook: step N held until <path> exists`) and when a signal arrives meanwhile
//! (`test hook: SIGINT arrived during step N`), so a test signals a step that is certainly
//! open, knows the signal was taken before it sends another, and ends the step when it wants.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;

use crate::args::TrainArgs;
use crate::exit::Exit;
use crate::failure::Failure;

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
fn parse_hold(value: &str) -> Result<(u64, PathBuf), Failure> {
    let bad = || {
        Failure::usage(format!(
            "{HOLD_VARIABLE}={value}: expected <step>:<path> with a step of 1 or more (a test \
             hook: unset it to train normally)"
        ))
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
    /// The OS refused a handler (runtime); a malformed test hook (usage).
    pub fn install() -> Result<Self, Failure> {
        let hold = match std::env::var(HOLD_VARIABLE) {
            Ok(value) => Some(parse_hold(&value)?),
            Err(_) => None,
        };
        let signal = Arc::new(AtomicUsize::new(0));
        // Armed until a step completes (see the module docs and [`Stop::graceful`]).
        let armed = Arc::new(AtomicBool::new(true));
        for (sig, exit) in [(SIGINT, Exit::Interrupted), (SIGTERM, Exit::Terminated)] {
            // In this order: a second signal finds the flag the first one set, and exits.
            flag::register_conditional_shutdown(sig, i32::from(exit.code()), Arc::clone(&armed))?;
            flag::register_usize(sig, Arc::clone(&signal), sig as usize)?;
            flag::register(sig, Arc::clone(&armed))?;
        }
        Ok(Self {
            signal,
            armed,
            hold,
        })
    }

    /// From now on (a step has completed) the first signal lets the current step finish. A
    /// signal that arrived already keeps the next one exiting at once.
    pub fn graceful(&self) {
        if self.signal.load(Ordering::SeqCst) == 0 {
            self.armed.store(false, Ordering::SeqCst);
        }
    }

    /// The test hook: holds `step` (counted from 1) open until its release file exists, saying
    /// so on stderr, and saying when a signal arrives meanwhile. Returns at once for any other
    /// step, or without the hook.
    pub fn hold(&self, step: u64) {
        let Some((held, path)) = self.hold.as_ref().filter(|(held, _)| *held == step) else {
            return;
        };
        eprintln!(
            "test hook: step {held} held until {} exists",
            path.display()
        );
        let mut told = false;
        while !path.exists() {
            if let Some(exit) = self.requested().filter(|_| !told) {
                eprintln!("test hook: {} arrived during step {held}", name(exit));
                told = true;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// How the run should end if a signal has arrived: [`Exit::Interrupted`] or
    /// [`Exit::Terminated`].
    pub fn requested(&self) -> Option<Exit> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            s if s == SIGTERM as usize => Some(Exit::Terminated),
            _ => Some(Exit::Interrupted),
        }
    }
}

/// The signal behind `exit`, for messages.
pub fn name(exit: Exit) -> &'static str {
    match exit {
        Exit::Terminated => "SIGTERM",
        _ => "SIGINT",
    }
}

/// Ends a run stopped by `exit`'s signal after `step` optimizer steps: says on stderr what was
/// saved (the checkpoint just written, the metrics flushed every step; the trace is written
/// on the way out) and returns `exit`.
pub fn stopped(exit: Exit, step: u64, args: &TrainArgs) -> Exit {
    let mut saved = Vec::new();
    if let Some(path) = &args.checkpoint {
        saved.push(format!("checkpoint {} (step {step})", path.display()));
    }
    if let Some(path) = &args.metrics {
        saved.push(format!("metrics {}", path.display()));
    }
    if let Some(path) = &args.profile {
        saved.push(format!("trace {}", path.display()));
    }
    let saved = match saved.is_empty() {
        true => "nothing (no --checkpoint, --metrics or --profile)".to_string(),
        false => saved.join(", "),
    };
    eprintln!(
        "{}: stopped after step {step} of {}; saved: {saved}",
        name(exit),
        args.steps
    );
    exit
}

#[cfg(test)]
mod tests {
    use super::*;

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
