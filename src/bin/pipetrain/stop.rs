//! A graceful stop on SIGINT (Ctrl-C) or SIGTERM: once a step has completed, the first signal
//! lets the current step finish, then the run writes its final checkpoint (with
//! `--checkpoint`), flushes its metrics and trace, says what it saved and exits 130 (SIGINT) or
//! 143 (SIGTERM). A second signal exits at once with the same code, for a stop that takes too
//! long.
//!
//! Before the first step completes (the model still being built and allocated, or a first step
//! that takes minutes) there is nothing to save, so the first signal exits at once.

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
}

impl Stop {
    /// Installs the handlers for this process.
    ///
    /// # Errors
    /// The OS refused a handler (runtime).
    pub fn install() -> Result<Self, Failure> {
        let signal = Arc::new(AtomicUsize::new(0));
        // Armed until a step completes (see the module docs and [`Stop::graceful`]).
        let armed = Arc::new(AtomicBool::new(true));
        for (sig, exit) in [(SIGINT, Exit::Interrupted), (SIGTERM, Exit::Terminated)] {
            // In this order: a second signal finds the flag the first one set, and exits.
            flag::register_conditional_shutdown(sig, i32::from(exit.code()), Arc::clone(&armed))?;
            flag::register_usize(sig, Arc::clone(&signal), sig as usize)?;
            flag::register(sig, Arc::clone(&armed))?;
        }
        Ok(Self { signal, armed })
    }

    /// From now on (a step has completed) the first signal lets the current step finish. A
    /// signal that arrived already keeps the next one exiting at once.
    pub fn graceful(&self) {
        if self.signal.load(Ordering::SeqCst) == 0 {
            self.armed.store(false, Ordering::SeqCst);
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
