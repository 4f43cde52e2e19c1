//! SIGINT, SIGTERM and SIGHUP in the commands that have no training step to finish (`bench`,
//! `tune`, `plan`): they write their outputs at the end, so a signal ends them at once, saying so
//! and what it leaves unwritten, with `train`'s exit codes (130, 143, 129). Their handlers are
//! installed, not left to the default: a signal inherited as ignored (SIGINT in a background job
//! of a script) stops them too, where `bench` once ran on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pipetrain::trainer::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::failure::Failure;

/// The signals handled, with their [`Signal`].
const SIGNALS: [(i32, Signal); 3] = [
    (SIGINT, Signal::Interrupt),
    (SIGTERM, Signal::Terminate),
    (SIGHUP, Signal::Hangup),
];

/// From now on, the first of [`SIGNALS`] ends this process: `{SIGNAL}: {command} stopped;
/// {unwritten}` on stderr, then exit 128 + the signal's number.
///
/// # Errors
/// The OS refused a handler (runtime).
pub fn exit_on_signal(command: &'static str, unwritten: String) -> Result<(), Failure> {
    let arrived = Arc::new(AtomicUsize::new(0));
    for (number, _) in SIGNALS {
        signal_hook::flag::register_usize(number, Arc::clone(&arrived), number as usize)
            .map_err(|e| Failure::runtime(format!("cannot handle signals: {e}")))?;
    }
    std::thread::Builder::new()
        .name("pipetrain-signals".into())
        .spawn(move || {
            loop {
                let number = arrived.load(Ordering::SeqCst);
                if let Some((_, signal)) = SIGNALS.iter().find(|(n, _)| *n as usize == number) {
                    eprintln!("{signal}: {command} stopped; {unwritten}");
                    std::process::exit(i32::from(signal.exit_code()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })?;
    Ok(())
}

/// The test hook that holds `bench`, `tune` and `plan` once their handlers are installed, so
/// that a test's signal lands inside the command on any host: `PIPETRAIN_TEST_HOLD_COMMAND=PATH`
/// says `test hook: COMMAND held until PATH exists` on stderr and waits for that file.
pub const HOLD_VARIABLE: &str = "PIPETRAIN_TEST_HOLD_COMMAND";

/// Holds `command` as [`HOLD_VARIABLE`] says; nothing without it.
pub fn hold_for_test(command: &str) {
    let Some(path) = std::env::var_os(HOLD_VARIABLE).map(std::path::PathBuf::from) else {
        return;
    };
    eprintln!("test hook: {command} held until {} exists", path.display());
    while !path.exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a command that writes `output` (named by its flag) at the end leaves unwritten.
pub fn unwritten(flag: &str, output: Option<&std::path::Path>) -> String {
    match output {
        Some(path) => format!("{flag} {} not written", path.display()),
        None => "nothing was written".into(),
    }
}
