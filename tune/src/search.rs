//! [`search`]: every configuration of a [`Space`], evaluated and ranked.

use std::cmp::Ordering;

use crate::candidate::{Knobs, Ranking};
use crate::error::Result;
use crate::evaluate::evaluate;
use crate::space::Space;
use crate::table::CostTable;

/// Evaluates every replicas × stages × micro-batches × schedule × re-materialization of
/// `space` on `table`: the feasible ones ranked by predicted samples/s (ties: fewer workers,
/// then less memory, then search order), the others with their reason.
///
/// # Errors
/// A malformed table or empty space, or a table without a micro-batch size in play
/// ([`Space::rows_in_play`]).
pub fn search(table: &CostTable, space: &Space) -> Result<Ranking> {
    table.check()?;
    space.check()?;
    let mut ranking = Ranking::default();
    for knobs in knobs(space, table.layers()) {
        match evaluate(table, space, knobs)? {
            Ok(candidate) => ranking.candidates.push(candidate),
            Err(infeasible) => ranking.infeasible.push(infeasible),
        }
    }
    ranking.candidates.sort_by(|a, b| {
        b.samples_per_sec
            .partial_cmp(&a.samples_per_sec)
            .unwrap_or(Ordering::Equal)
            .then(a.knobs.workers().cmp(&b.knobs.workers()))
            .then(a.peak_memory().cmp(&b.peak_memory()))
    });
    Ok(ranking)
}

/// Every point of `space` for a model of `layers` layers, in search order.
pub fn knobs(space: &Space, layers: usize) -> Vec<Knobs> {
    let mut out = Vec::new();
    for (replicas, stages) in space.layouts(layers) {
        for micro_batches in space.micro_batches(replicas) {
            for &schedule in &space.schedules {
                for &remat in &space.remats {
                    out.push(Knobs {
                        replicas,
                        stages,
                        micro_batches,
                        schedule,
                        remat,
                    });
                }
            }
        }
    }
    out
}
