//! What the sweep tells its caller while it runs ([`Event`]), and where it stands now
//! ([`Progress`], read by the heartbeat).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::libraries::Finding;
use super::table::Case;

/// One thing the doctor has to say, in the order it happens. The caller prints it: the library
/// prints nothing.
#[derive(Clone, Debug)]
pub enum Event {
    /// A library or cache found (or not) on the device, before the sweep.
    Found(Finding),
    /// A section of the sweep starts.
    Section(&'static str),
    /// A case ended, with its verdict.
    Case(Case),
    /// The sweep is still running a case: said every
    /// [`DoctorSettings::heartbeat`](super::DoctorSettings::heartbeat).
    Heartbeat(Heartbeat),
    /// A line of the speed check beside PyTorch (`--compare-pytorch`).
    Speed(String),
}

/// Where the sweep stands, as the heartbeat says it.
#[derive(Clone, Debug, PartialEq)]
pub struct Heartbeat {
    /// The section running.
    pub section: &'static str,
    /// The case running (the last one begun).
    pub case: String,
    /// What the case is doing: `single-device reference, step 2/3`, `pipeline: build`, ...
    pub phase: String,
    /// Cases ended so far.
    pub done: usize,
    /// Time since the case began.
    pub in_case: Duration,
    /// Time since the sweep began.
    pub elapsed: Duration,
    /// Kernels compiled and shapes tuned so far, where the backend tells; `None` where it does
    /// not (the CPU compiles nothing at run time; cubecl 0.11.3 exposes no counter).
    pub kernels: Option<(u64, u64)>,
}

impl std::fmt::Display for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "heartbeat: {:.0} s, section {}, case {:?} ({}) running for {:.0} s ({} ended); ",
            self.elapsed.as_secs_f64(),
            self.section,
            self.case,
            self.phase,
            self.in_case.as_secs_f64(),
            self.done
        )?;
        match self.kernels {
            Some((compiled, tuned)) => {
                write!(f, "{compiled} kernels compiled, {tuned} shapes tuned")
            }
            None => f.write_str("kernels compiled / shapes tuned: not told by this backend"),
        }
    }
}

/// The sweep's state, shared by the thread running the cases and the heartbeat's.
pub(super) struct Progress<'a> {
    sink: &'a (dyn Fn(Event) + Sync),
    now: Mutex<Now>,
    started: Instant,
}

/// What runs now.
struct Now {
    section: &'static str,
    case: String,
    phase: String,
    case_started: Instant,
    done: usize,
}

impl<'a> Progress<'a> {
    /// A sweep starting now, telling `sink`.
    pub(super) fn new(sink: &'a (dyn Fn(Event) + Sync)) -> Self {
        let started = Instant::now();
        Self {
            sink,
            now: Mutex::new(Now {
                section: "start",
                case: String::new(),
                phase: String::new(),
                case_started: started,
                done: 0,
            }),
            started,
        }
    }

    /// Hands `event` to the caller.
    pub(super) fn tell(&self, event: Event) {
        (self.sink)(event);
    }

    fn now(&self) -> std::sync::MutexGuard<'_, Now> {
        // A panic while holding it leaves only counters behind: still readable.
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Section `name` starts.
    pub(super) fn section(&self, name: &'static str) {
        {
            let mut now = self.now();
            now.section = name;
            now.case = format!("{name}: setting up");
            now.phase = "setting up".into();
            now.case_started = Instant::now();
        }
        self.tell(Event::Section(name));
    }

    /// Case `case` starts.
    pub(super) fn begin(&self, case: &str) {
        let mut now = self.now();
        now.case = case.to_string();
        now.phase = "starting".into();
        now.case_started = Instant::now();
    }

    /// The running case is now doing `phase`.
    pub(super) fn phase(&self, phase: String) {
        self.now().phase = phase;
    }

    /// `case` ended: told at once.
    pub(super) fn ended(&self, case: &Case) {
        {
            let mut now = self.now();
            now.done += 1;
            now.case_started = Instant::now();
            now.case = format!("after {}", case.name);
            now.phase = "between cases".into();
        }
        self.tell(Event::Case(case.clone()));
    }

    /// Where the sweep stands.
    pub(super) fn heartbeat(&self) -> Heartbeat {
        let now = self.now();
        Heartbeat {
            section: now.section,
            case: now.case.clone(),
            phase: now.phase.clone(),
            done: now.done,
            in_case: now.case_started.elapsed(),
            elapsed: self.started.elapsed(),
            kernels: None,
        }
    }
}
