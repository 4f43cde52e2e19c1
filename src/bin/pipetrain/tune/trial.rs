//! Running one candidate for a few steps, in this process, from the same initial weights: its
//! measured samples/s (median of the timed steps, wall clock around `train_step`) and the
//! measured peak bytes of its fullest worker (`Pipeline::worker_memory`, a worker's chunks
//! summed).

use std::time::Instant;

use pipetrain::tune::Candidate;
use pipetrain::{Batch, CrossEntropy, Layer, OptimizerConfig, Pipeline};

use crate::failure::Failure;

/// What a run measured.
pub struct Trial {
    /// Median samples/s of the timed steps.
    pub samples_per_sec: f64,
    /// The fullest worker's bytes after the last step.
    pub peak_memory: u64,
}

/// Runs `candidate` on `layers` for one warm-up and `steps` timed steps of `batches` (cycled).
///
/// # Errors
/// A configuration the builder refuses, or a failed step.
pub fn run<L: Layer>(
    candidate: &Candidate,
    layers: Vec<L>,
    batches: &[Batch],
    optimizer: &OptimizerConfig,
    lr: f64,
    steps: usize,
) -> Result<Trial, Failure> {
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .configure(candidate)
        .optimizer(optimizer.clone())
        .learning_rate(lr)
        .loss(CrossEntropy)
        .build()
        .map_err(Failure::of_build)?;
    let mut rates = Vec::new();
    let mut last = None;
    for step in 0..=steps.max(1) {
        let batch = &batches[step % batches.len()];
        let t = Instant::now();
        let report = pipeline.train_step(batch)?;
        let seconds = t.elapsed().as_secs_f64().max(1e-12);
        if step > 0 {
            rates.push(batch.len() as f64 / seconds);
        }
        last = Some(report);
    }
    rates.sort_by(f64::total_cmp);
    let report = last.expect("at least one step");
    let k = candidate.knobs;
    let plan = k.schedule.plan(k.stages, k.micro_batches)?;
    let mut per_rank = vec![0u64; plan.ranks()];
    for w in pipeline.worker_memory(&report)? {
        let rank = plan
            .rank_of(w.worker.stage)
            .unwrap_or(w.worker.stage.index());
        if w.worker.replica.0 == 0 {
            per_rank[rank] += w.total();
        }
    }
    Ok(Trial {
        samples_per_sec: rates[rates.len() / 2],
        peak_memory: per_rank.into_iter().max().unwrap_or(0),
    })
}
