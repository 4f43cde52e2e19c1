//! How a [`Trainer`](crate::trainer::Trainer) run ended.

use std::time::Duration;

use crate::trainer::{Reference, Signal};
use crate::{Layer, StepReport};

/// A finished (or stopped) run.
pub struct Outcome<L: Layer> {
    /// The step the run started from (0, or the resumed checkpoint's).
    pub first_step: u64,
    /// The optimizer steps done by the end, counting the resumed ones.
    pub step: u64,
    /// The signal that stopped the run after `step`, if one did (its checkpoint was written).
    pub stopped: Option<Signal>,
    /// The report of the last batch trained.
    pub last: Option<StepReport>,
    /// The loss of each step this run took.
    pub losses: Vec<f64>,
    /// The learning rate of each step this run took.
    pub rates: Vec<f64>,
    /// The median samples per second over the steps, the first one excluded (it builds and
    /// measures).
    pub median_samples_per_sec: f64,
    /// Wall time of the loop.
    pub elapsed: Duration,
    /// Wall time of this run's first step, left out of the median: it builds and measures,
    /// and on a GPU compiles its kernels and autotunes them.
    pub first_step_time: Option<Duration>,
    /// In a multi-process run, on the leader: the whole trained model, gathered from every
    /// process.
    pub gathered: Option<Vec<L>>,
    /// The per-step verification's single-device copy, with its findings
    /// ([`verify::verdict`](crate::trainer::verify::verdict)).
    pub reference: Option<Reference<L>>,
}

/// The side outputs of a run that could not be written (`--metrics`, `--profile`, `--plot`),
/// each as its warning said: the run goes on, and ends with [`LostOutputs::error`].
#[derive(Debug, Default)]
pub struct LostOutputs(std::cell::RefCell<Vec<String>>);

impl LostOutputs {
    /// One more output lost, as its warning said.
    pub fn push(&self, warning: String) {
        self.0.borrow_mut().push(warning);
    }

    /// The error of a run that otherwise succeeded when an output was lost (issue 47: a full
    /// disk under `--metrics` ended with rc 0, an older file left in place looking current):
    /// [`RunError::OutputsLost`](crate::RunError::OutputsLost), a runtime error.
    pub fn error(&self) -> Option<crate::Error> {
        let lost = self.0.borrow();
        lost.first().map(|first| {
            crate::Error::Run(crate::RunError::OutputsLost {
                count: lost.len(),
                first: first.clone(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::LostOutputs;

    #[test]
    fn lost_outputs_are_an_error_naming_the_first_and_the_count() {
        let lost = LostOutputs::default();
        assert!(lost.error().is_none());
        lost.push("--metrics m.csv: no space left on device".into());
        lost.push("--plot p.png: no space left on device".into());
        let error = lost.error().expect("an error").to_string();
        assert!(
            error.starts_with("2 output(s) not written, the first: --metrics m.csv"),
            "{error}"
        );
        assert_eq!(
            lost.error().map(|e| e.class()),
            Some(crate::ErrorClass::Runtime)
        );
    }
}
