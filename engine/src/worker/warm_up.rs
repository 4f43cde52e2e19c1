//! The warm-up: a step whose compute actions run one at a time across the process's workers.
//!
//! On a GPU, burn's autotune times a shape's candidate kernels the first time the shape runs,
//! and while one thread tunes a shape another thread that needs it runs candidate 0 (cubecl
//! 0.11.3): two workers could then run different kernels for one shape during the first steps,
//! and break bitwise equality between schedules and `--verify` there. Run one at a time, every
//! shape of the step is tuned by one thread, wholly, before any other thread uses it, and from
//! then on every thread reads the same tuned kernel from autotune's cache. Only compute actions
//! are serialised (forward, backward, `I`, `W`): transfers and all-reduces, which wait for other
//! workers, never hold the turn, so nothing can wait on a worker that waits on it.
//!
//! [`WarmUp::Auto`] (the default) serialises the first training step and the first inference
//! of a runtime whose devices include a GPU; a CPU has no autotune, and its first step runs as
//! every other.

use std::sync::Mutex;

/// When a step's compute actions run one at a time (see the module docs).
///
/// ```
/// use pipetrain_engine::WarmUp;
/// assert_eq!(WarmUp::default(), WarmUp::Auto);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarmUp {
    /// The first training step and the first inference, when a device is a GPU.
    #[default]
    Auto,
    /// The first training step and the first inference, on any device (a CPU too: for tests
    /// of the mechanism, at the price of a slower first step).
    Always,
    /// Never: every step's workers run at once from the first.
    Never,
}

impl WarmUp {
    /// Whether a runtime whose devices include a GPU (`gpu`) serialises its first steps.
    pub(crate) fn applies(self, gpu: bool) -> bool {
        match self {
            WarmUp::Auto => gpu,
            WarmUp::Always => true,
            WarmUp::Never => false,
        }
    }
}

/// The turn a warm-up step's compute actions take one at a time.
#[derive(Debug, Default)]
pub(crate) struct Serial {
    turn: Mutex<()>,
}

impl Serial {
    /// `f`, while no other worker of the step runs a compute action.
    pub(crate) fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        let _turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        f()
    }
}
