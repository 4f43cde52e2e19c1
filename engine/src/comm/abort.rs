//! First error wins: the signal that ends a step for every worker.
//!
//! torchgpipe's two driver rules, kept here: *hold the first exception* (the first failure is
//! recorded, later ones are dropped) and *fail at the first exception* (every worker learns of
//! it at once: workers blocked in a receive or a collective wake up, the others stop before their
//! next action). No wait in the engine blocks without also watching [`Abort::watch`].

use std::convert::Infallible;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, Sender, bounded};

use pipetrain_schedules::remedy::{Remedied, Remedy};

use crate::error::EngineError;

/// Shared by all workers of one step.
#[derive(Debug)]
pub struct Abort {
    flag: AtomicBool,
    // Dropping the only sender disconnects every clone of `watch`: a broadcast wake-up that a
    // `select!` can wait on next to a data channel.
    signal: Mutex<Option<Sender<Infallible>>>,
    watch: Receiver<Infallible>,
    first: Mutex<Option<EngineError>>,
}

impl Default for Abort {
    fn default() -> Self {
        let (tx, rx) = bounded(0);
        Self {
            flag: AtomicBool::new(false),
            signal: Mutex::new(Some(tx)),
            watch: rx,
            first: Mutex::new(None),
        }
    }
}

impl Abort {
    /// A fresh signal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `error` if it is the first, and wakes everyone. Returns whether it was first.
    pub fn fail(&self, error: EngineError) -> bool {
        let first = {
            let mut slot = self.first.lock().unwrap_or_else(|e| e.into_inner());
            let first = slot.is_none();
            if first {
                *slot = Some(error);
            }
            first
        };
        self.flag.store(true, Ordering::SeqCst);
        self.signal.lock().unwrap_or_else(|e| e.into_inner()).take();
        first
    }

    /// Whether some worker failed.
    pub fn is_aborted(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// A receiver that never yields a value and disconnects when the step is aborted: select on
    /// it beside any blocking receive.
    pub fn watch(&self) -> &Receiver<Infallible> {
        &self.watch
    }

    /// The first error's message and remedy, if any, without taking it (a multi-process fabric
    /// tells the other processes what failed here).
    pub fn describe(&self) -> Option<(String, Option<Remedy>)> {
        self.first
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|e| (e.to_string(), e.remedy()))
    }

    /// Whether the first error came from another process ([`EngineError::Peer`]): it need not
    /// be told back.
    pub fn is_from_peer(&self) -> bool {
        matches!(
            *self.first.lock().unwrap_or_else(|e| e.into_inner()),
            Some(EngineError::Peer { .. })
        )
    }

    /// The first error, if any (taken: a second call returns `None`).
    pub fn take_error(&self) -> Option<EngineError> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
