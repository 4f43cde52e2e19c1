//! What the training loop adds up per optimizer step (its accumulated batches).

use std::time::Duration;

use crate::StepReport;

/// Sums of one optimizer step's batches.
#[derive(Clone, Debug, Default)]
pub struct StepTotals {
    /// The mean loss over the batches.
    pub loss: f64,
    /// Training samples.
    pub samples: usize,
    /// Wall time.
    pub wall: Duration,
    /// Time in all-reduce.
    pub all_reduce: Duration,
    /// `(compute, idle)` of each stage of replica 0.
    pub stages: Vec<(Duration, Duration)>,
    /// The global gradient norm before clipping, of the batch that ran the optimizer step.
    pub grad_norm: Option<f64>,
    /// Whether that step was skipped for a non-finite gradient.
    pub skipped: bool,
}

impl StepTotals {
    /// Adds one of the step's `batches` batches.
    pub fn add(&mut self, report: &StepReport, batches: usize) {
        self.loss += report.loss / batches as f64;
        self.samples += report.samples;
        self.wall += report.wall;
        self.all_reduce += report.all_reduce;
        self.grad_norm = report.grad_norm.or(self.grad_norm);
        self.skipped |= report.skipped;
        let replica0 = report
            .workers
            .iter()
            .filter(|s| s.worker.replica.index() == 0);
        for (i, s) in replica0.enumerate() {
            if self.stages.len() <= i {
                self.stages.push(Default::default());
            }
            self.stages[i].0 += s.compute;
            self.stages[i].1 += s.idle;
        }
    }

    /// `  grad-norm x` (with `clipping`) and `  skipped (non-finite)` for a step's line; empty
    /// without clipping or skips.
    pub fn describe_guard(&self, clipping: bool) -> String {
        let norm = match (self.grad_norm, clipping) {
            (Some(n), true) => format!("  grad-norm {n:.4}"),
            _ => String::new(),
        };
        norm + if self.skipped {
            "  skipped (non-finite)"
        } else {
            ""
        }
    }

    /// The mean over replica 0's stages of idle / (compute + idle).
    pub fn bubble(&self) -> f64 {
        let fractions: Vec<f64> = self
            .stages
            .iter()
            .map(|(c, i)| i.as_secs_f64() / (c.as_secs_f64() + i.as_secs_f64()).max(1e-12))
            .collect();
        fractions.iter().sum::<f64>() / fractions.len().max(1) as f64
    }
}
