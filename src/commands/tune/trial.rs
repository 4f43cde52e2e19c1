//! Running the top candidates for a few steps, in this process, from the same initial weights,
//! alternating: every pipeline is built, then in each of [`ROUNDS`] rounds each pipeline in turn
//! runs one untimed step (its caches warm again after the others ran) and its share of the
//! timed steps, so a change in the machine's load falls on all of them alike. Per candidate: the
//! median samples/s of its timed steps (wall clock around `train_step`) and the measured peak
//! bytes of its fullest worker (`Pipeline::worker_memory`, a worker's chunks summed).

use std::time::Instant;

use pipetrain_engine::{Batch, CrossEntropy, Layer, OptimizerConfig};
use pipetrain_tune::Candidate;

use crate::error::Result;
use crate::pipeline::Pipeline;
use crate::step_report::StepReport;

/// Rounds the timed steps are spread over.
pub const ROUNDS: usize = 4;

/// What a trial run of a candidate measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trial {
    /// Median samples/s of the timed steps.
    pub samples_per_sec: f64,
    /// The fullest worker's bytes after the last step.
    pub peak_memory: u64,
}

/// Runs every candidate on a copy of `layers` for `steps` timed steps (at least one per round),
/// cycling through `batches`.
///
/// # Errors
/// A configuration the builder refuses, or a failed step.
pub fn trials<L: Layer>(
    candidates: &[Candidate],
    layers: &[L],
    batches: &[Batch],
    optimizer: &OptimizerConfig,
    lr: f64,
    steps: usize,
) -> Result<Vec<Trial>> {
    let mut pipelines = candidates
        .iter()
        .map(|c| {
            Pipeline::builder()
                .layers(layers.to_vec())
                .configure(c)
                .optimizer(optimizer.clone())
                .learning_rate(lr)
                .loss(CrossEntropy)
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut rates = vec![Vec::new(); candidates.len()];
    let mut last: Vec<Option<StepReport>> = vec![None; candidates.len()];
    let per_round = steps.div_ceil(ROUNDS).max(1);
    for _ in 0..ROUNDS {
        for (i, pipeline) in pipelines.iter_mut().enumerate() {
            for step in 0..=per_round {
                let batch = &batches[step % batches.len()];
                let t = Instant::now();
                let report = pipeline.train_step(batch)?;
                if step > 0 {
                    rates[i].push(batch.len() as f64 / t.elapsed().as_secs_f64().max(1e-12));
                }
                last[i] = Some(report);
            }
        }
    }
    let mut trials = Vec::with_capacity(candidates.len());
    for ((c, pipeline), (mut rates, report)) in candidates
        .iter()
        .zip(&pipelines)
        .zip(rates.into_iter().zip(last))
    {
        rates.sort_by(f64::total_cmp);
        let report = report.expect("at least one step");
        let plan = c
            .knobs
            .schedule
            .plan(c.knobs.stages, c.knobs.micro_batches)?;
        let mut per_rank = vec![0u64; plan.ranks()];
        for w in pipeline.worker_memory(&report)? {
            let rank = plan
                .rank_of(w.worker.stage)
                .unwrap_or(w.worker.stage.index());
            if w.worker.replica.0 == 0 {
                per_rank[rank] += w.total();
            }
        }
        trials.push(Trial {
            samples_per_sec: rates[rates.len() / 2],
            peak_memory: per_rank.into_iter().max().unwrap_or(0),
        });
    }
    Ok(trials)
}
