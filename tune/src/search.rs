//! [`search`]: every configuration of a [`Space`], evaluated and ranked.

use std::cmp::Ordering;

use pipetrain_schedules::Zero;

use crate::candidate::{Candidate, Knobs, Ranking};
use crate::error::Result;
use crate::evaluate::evaluate;
use crate::space::Space;
use crate::table::CostTable;

/// Evaluates every replicas × stages × micro-batches × schedule × re-materialization × ZeRO
/// level of
/// `space` on `table`: the feasible ones ranked by predicted samples/s (ties: fewer workers,
/// then less memory, then search order), the others with their reason. A feasible
/// configuration the model cannot tell from an earlier one in search order (same layout, split,
/// predicted step and memory: e.g. any schedule on one stage, or any remat mode at m = 1) is
/// listed in [`Ranking::equivalent`] instead of the ranking.
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
            Ok(candidate) => match ranking.candidates.iter().find(|c| same(c, &candidate)) {
                Some(kept) => ranking.equivalent.push((candidate.knobs, kept.knobs)),
                None => ranking.candidates.push(candidate),
            },
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

/// Whether the model predicts `a` and `b` alike: same layout and split, same step and memory.
fn same(a: &Candidate, b: &Candidate) -> bool {
    (a.knobs.replicas, a.knobs.stages, a.knobs.micro_batches)
        == (b.knobs.replicas, b.knobs.stages, b.knobs.micro_batches)
        && a.partition == b.partition
        && a.step_seconds.to_bits() == b.step_seconds.to_bits()
        && a.memory == b.memory
}

/// Every point of `space` for a model of `layers` layers, in search order. Schedules with
/// several chunks per worker (interleaved, ZB-V) are tried on two stages or more: on one they
/// only add hand-overs between the chunks of the one worker.
pub fn knobs(space: &Space, layers: usize) -> Vec<Knobs> {
    let mut out = Vec::new();
    for (replicas, stages) in space.layouts(layers) {
        for micro_batches in space.micro_batches(replicas) {
            for &schedule in &space.schedules {
                if stages == 1 && schedule.virtual_stages() > 1 {
                    continue;
                }
                for &remat in &space.remats {
                    let zeros = space
                        .zeros
                        .iter()
                        .filter(|z| replicas > 1 || **z == Zero::Off);
                    for &zero in zeros {
                        out.push(Knobs {
                            replicas,
                            stages,
                            micro_batches,
                            schedule,
                            remat,
                            zero,
                        });
                    }
                }
            }
        }
    }
    out
}
