//! What the search returns: [`Candidate`]s ranked by predicted throughput, and the
//! [`Infeasible`] ones with their [`Reason`].

use std::fmt;

use pipetrain_partitioner::Partition;
use pipetrain_schedules::{ScheduleKind, StageId, Zero};

use crate::space::Recompute;

/// One point of the search space: the knobs a user sets on `pipetrain train`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Knobs {
    /// Data-parallel replicas.
    pub replicas: usize,
    /// Pipeline stages (ranks: workers per replica).
    pub stages: usize,
    /// Micro-batches per replica per step.
    pub micro_batches: usize,
    /// The schedule.
    pub schedule: ScheduleKind,
    /// Re-materialization.
    pub remat: Recompute,
    /// The ZeRO level: 1 shards each stage's optimizer state across its replicas.
    pub zero: Zero,
}

impl Knobs {
    /// Workers the configuration runs: replicas × stages.
    pub fn workers(&self) -> usize {
        self.replicas * self.stages
    }
}

impl fmt::Display for Knobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} replica(s) x {} stage(s), m={}, {}, remat {}",
            self.replicas, self.stages, self.micro_batches, self.schedule, self.remat
        )?;
        match self.zero {
            Zero::Off => Ok(()),
            zero => write!(f, ", {zero}"),
        }
    }
}

/// A feasible configuration with its split and what the simulator predicts for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The knobs.
    pub knobs: Knobs,
    /// The layers of each chunk: `stages` of them, `stages × v` for interleaved and ZB-V.
    pub partition: Partition,
    /// Predicted samples per second.
    pub samples_per_sec: f64,
    /// Predicted seconds per step.
    pub step_seconds: f64,
    /// Predicted bubble (idle over worker time).
    pub bubble: f64,
    /// Bytes each worker of a replica holds at its peak (parameters, gradients, optimizer
    /// state, stash, deferred weight-gradient inputs), per rank.
    pub memory: Vec<u64>,
}

impl Candidate {
    /// The fullest worker's bytes.
    pub fn peak_memory(&self) -> u64 {
        self.memory.iter().copied().max().unwrap_or(0)
    }
}

/// Why a configuration was left out.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// A worker needs more than the budget.
    OverBudget {
        /// The fullest worker (its stage, or rank when it holds several chunks).
        stage: StageId,
        /// Bytes it needs.
        needed: u64,
        /// The budget.
        budget: u64,
    },
    /// The model has fewer layers than the configuration has chunks.
    TooFewLayers {
        /// Chunks (stages × chunks per stage).
        chunks: usize,
        /// Layers of the model.
        layers: usize,
    },
    /// The schedule refuses the shape (e.g. interleaved with m not a multiple of the stages).
    Schedule(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::OverBudget {
                stage,
                needed,
                budget,
            } => write!(
                f,
                "over budget on {stage} by {} bytes (needs {needed}, budget {budget})",
                needed - budget
            ),
            Reason::TooFewLayers { chunks, layers } => {
                write!(f, "{chunks} chunks but only {layers} layers")
            }
            Reason::Schedule(why) => f.write_str(why),
        }
    }
}

/// A configuration the search left out, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Infeasible {
    /// The knobs.
    pub knobs: Knobs,
    /// Why.
    pub reason: Reason,
}

/// The search's answer: the feasible configurations, fastest first, and the others.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Ranking {
    /// Fastest predicted first.
    pub candidates: Vec<Candidate>,
    /// Left out, with the reason, in search order.
    pub infeasible: Vec<Infeasible>,
    /// Feasible but predicted exactly like a configuration earlier in search order: (this one,
    /// the one ranked instead).
    pub equivalent: Vec<(Knobs, Knobs)>,
}

impl Ranking {
    /// The fastest feasible configuration, if any.
    pub fn best(&self) -> Option<&Candidate> {
        self.candidates.first()
    }
}
