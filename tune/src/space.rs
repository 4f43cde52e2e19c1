//! [`Space`]: what the search may choose from, and [`Recompute`], the re-materialization modes.

use std::fmt;

use pipetrain_schedules::remedy::{Remedy, Setting, Value};
use pipetrain_schedules::{ScheduleKind, Zero};

use crate::error::{Result, TuneError};

/// Re-materialization, as `pipetrain train --remat` names it (the engine's `Remat`; this crate
/// has no burn dependency, so it keeps its own copy of the three names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Recompute {
    /// Keep every stashed micro-batch's activations.
    Never,
    /// Recompute every micro-batch's forward in its backward but the last one's.
    ExceptLast,
    /// Recompute every micro-batch's forward in its backward.
    Always,
}

impl Recompute {
    /// All three.
    pub const ALL: [Recompute; 3] = [Recompute::Never, Recompute::ExceptLast, Recompute::Always];

    /// Micro-batches of `m` whose forward runs twice.
    pub fn recomputed(self, m: usize) -> usize {
        match self {
            Recompute::Never => 0,
            Recompute::ExceptLast => m.saturating_sub(1),
            Recompute::Always => m,
        }
    }

    /// Micro-batches whose activations each layer holds when `stashed` are in flight (the
    /// accounting of `pipetrain::memory`: one under re-materialization).
    pub fn charged(self, stashed: usize) -> u64 {
        match self {
            Recompute::Never => stashed as u64,
            Recompute::ExceptLast | Recompute::Always => 1.min(stashed as u64),
        }
    }
}

impl fmt::Display for Recompute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Recompute::Never => "never",
            Recompute::ExceptLast => "except_last",
            Recompute::Always => "always",
        })
    }
}

/// The choices: every replicas × stages with at most `workers` workers, every power-of-two
/// micro-batch count up to `max_micro_batches` that splits the batch evenly, every schedule and
/// re-materialization mode listed.
#[derive(Clone, Debug, PartialEq)]
pub struct Space {
    /// Rows per step (the global batch).
    pub batch: usize,
    /// Workers (cores or devices) available; one compute thread each.
    pub workers: usize,
    /// Bytes each worker may hold (`None`: no limit).
    pub memory_budget: Option<u64>,
    /// Schedules to try.
    pub schedules: Vec<ScheduleKind>,
    /// Re-materialization modes to try.
    pub remats: Vec<Recompute>,
    /// ZeRO levels to try where there are replicas (one replica tries level 0 only). Level 1
    /// charges each worker its share of the optimizer state; level 3 also its share of the
    /// values beside the whole gradients, where the schedule makes the weight gradients at the
    /// step's end (GPipe, 1F1B, interleaved: the stage is resharded before them), else the whole
    /// values as level 1. Level 2's peak is level 1's (it saves only between accumulation
    /// steps, which the search does not model), so it need not be tried.
    pub zeros: Vec<Zero>,
    /// Largest micro-batch count to try.
    pub max_micro_batches: usize,
}

impl Space {
    /// Every (replicas, stages) pair with at most `workers` workers and at most `layers`
    /// stages.
    pub fn layouts(&self, layers: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for r in 1..=self.workers {
            for s in 1..=(self.workers / r).min(layers) {
                out.push((r, s));
            }
        }
        out
    }

    /// The micro-batch counts tried with `replicas` replicas: powers of two up to
    /// `max_micro_batches` whose micro-batches have equal rows.
    pub fn micro_batches(&self, replicas: usize) -> Vec<usize> {
        std::iter::successors(Some(1usize), |m| m.checked_mul(2))
            .take_while(|&m| m <= self.max_micro_batches)
            .filter(|&m| replicas * m <= self.batch && self.batch % (replicas * m) == 0)
            .collect()
    }

    /// Every micro-batch size (rows) the search can meet on a model of `layers` layers: what
    /// the cost table must hold, sorted from the largest.
    pub fn rows_in_play(&self, layers: usize) -> Vec<usize> {
        let mut rows: Vec<usize> = self
            .layouts(layers)
            .into_iter()
            .flat_map(|(r, _)| {
                self.micro_batches(r)
                    .into_iter()
                    .map(move |m| self.batch / (r * m))
            })
            .collect();
        rows.sort_unstable_by(|a, b| b.cmp(a));
        rows.dedup();
        rows
    }

    /// Checks that there is something to search.
    ///
    /// # Errors
    /// [`TuneError::EmptySpace`] naming what is zero or empty.
    pub fn check(&self) -> Result<()> {
        let empty = |what: &str, remedy| {
            Err(TuneError::EmptySpace {
                what: what.to_string(),
                remedy,
            })
        };
        if self.batch == 0 {
            return empty(
                "batch 0: a step needs at least one row",
                Remedy::set(Setting::Batch, Value::Count(1)),
            );
        }
        if self.workers == 0 {
            return empty(
                "0 workers: the search needs at least one",
                Remedy::set(Setting::Workers, Value::Count(1)),
            );
        }
        if self.schedules.is_empty() || self.remats.is_empty() {
            return empty(
                "no schedule or re-materialization mode to try",
                Remedy::sentence("list at least one of each"),
            );
        }
        if self.max_micro_batches == 0 {
            return empty(
                "at most 0 micro-batches",
                Remedy::sentence("allow at least 1"),
            );
        }
        Ok(())
    }
}
