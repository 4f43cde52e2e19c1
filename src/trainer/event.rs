//! What a run tells its caller as it goes: [`Event`]s, to a callback. The library prints
//! nothing; the binary draws its progress bar and prints its lines from these.

use std::path::Path;

use crate::trainer::{Signal, StepTotals};
use crate::{Error, Layer, Pipeline, StepReport};

/// One optimizer step, done.
#[derive(Clone, Debug)]
pub struct StepRecord {
    /// The optimizer step, from 1.
    pub step: u64,
    /// The run's total steps.
    pub steps: u64,
    /// The learning rate it ran at.
    pub lr: f64,
    /// Its accumulated batches, summed.
    pub totals: StepTotals,
    /// Training samples per second of its wall time.
    pub samples_per_sec: f64,
    /// Steps skipped for a non-finite loss or gradient so far, this one included.
    pub skipped: u64,
    /// The report of its last batch (the one that ran the optimizer step).
    pub report: StepReport,
}

impl StepRecord {
    /// The step's log line: `step    3/20  loss 2.301000  ... samples/s  bubble  12.5%`, with
    /// the all-reduce's time and overlap where replicas reduced, and the gradient guard's
    /// norm (when `clipping`) and skip.
    pub fn line(&self, clipping: bool) -> String {
        let report = &self.report;
        let overlap = report
            .all_reduce_overlap
            .map(|o| {
                format!(
                    "  all-reduce {:>6.2} ms ({:.0}% overlapped)",
                    report.all_reduce.as_secs_f64() * 1e3,
                    100.0 * o
                )
            })
            .unwrap_or_default();
        format!(
            "step {:>4}/{}  loss {:.6}  {:>8.1} samples/s  bubble {:>5.1}%{overlap}{}",
            self.step,
            self.steps,
            self.totals.loss,
            self.samples_per_sec,
            100.0 * report.bubble_fraction(),
            self.totals.describe_guard(clipping)
        )
    }
}

/// Something went wrong with an output file; training goes on.
#[derive(Debug)]
pub enum Warning {
    /// A metrics row could not be written: the metrics file stops (the path keeps what it
    /// held).
    MetricsStopped(Error),
    /// The chrome trace's raw stream could not be written: the trace stops (no trace file will
    /// be written).
    TraceStopped(Error),
    /// A finished output could not be renamed into place: it was not written.
    NotWritten(Error),
}

impl Warning {
    /// The error behind the warning.
    pub fn error(&self) -> &Error {
        match self {
            Warning::MetricsStopped(e) | Warning::TraceStopped(e) | Warning::NotWritten(e) => e,
        }
    }

    /// What it means for the run, after the error: `; not written`, ….
    pub fn consequence(&self) -> &'static str {
        match self {
            Warning::MetricsStopped(_) => {
                "; metrics stopped (the file is left as it was), training goes on"
            }
            Warning::TraceStopped(_) => {
                "; the trace stops here (no trace file will be written), training goes on"
            }
            Warning::NotWritten(_) => "; not written",
        }
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.error(), self.consequence())
    }
}

/// What happened, as it happens.
pub enum Event<'a, L: Layer> {
    /// The run continues from a checkpoint: its `step`, of `steps`, and the data position it
    /// saved (if any).
    Resumed {
        /// The checkpoint.
        path: &'a Path,
        /// The step it holds.
        step: u64,
        /// The run's total steps.
        steps: u64,
        /// Where the next training batch comes from, as the checkpoint saved it.
        position: Option<&'a str>,
    },
    /// The run's first step ran. The pipeline's stage split was resolved when it was built,
    /// before any thread started (a measured one too, on a sample batch).
    FirstStep {
        /// The pipeline.
        pipeline: &'a Pipeline<L>,
    },
    /// An optimizer step finished.
    Step(&'a StepRecord),
    /// A checkpoint was written, holding `step`.
    Checkpoint {
        /// Its path.
        path: &'a Path,
        /// The step it holds.
        step: u64,
    },
    /// An output file failed; training goes on.
    Warning(&'a Warning),
    /// The stop test hook holds `step` open until `path` exists ([`Stop`](crate::trainer::Stop)).
    Held {
        /// The step held, from 1.
        step: u64,
        /// The file that ends the hold.
        path: &'a Path,
    },
    /// A signal arrived while the test hook held `step` open.
    SignalWhileHeld {
        /// The step held.
        step: u64,
        /// The signal.
        signal: Signal,
    },
}
