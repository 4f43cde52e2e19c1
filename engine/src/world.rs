//! The world: `replicas × stages` workers, which of them this process runs, and the groups
//! they form.
//!
//! ```text
//!              stage 0   stage 1   stage 2        a replica: one row (transport links its
//!   replica 0   r0s0 ──► r0s1 ──► r0s2            neighbours, activations → and gradients ←)
//!   replica 1   r1s0 ──► r1s1 ──► r1s2            a stage group: one column (the collective
//!                 ▲         ▲         ▲           that sums the stage's gradients)
//! ```
//!
//! Worker ids are replica-major: rank = replica · stages + stage. In one process every worker
//! is local; under a multi-process launcher each process holds a subset.

use pipetrain_schedules::{ReplicaId, StageId, WorkerId};

use crate::error::{EngineError, Result};

/// `replicas × stages` workers and the ones this process runs.
///
/// ```
/// use pipetrain_engine::World;
/// use pipetrain_schedules::{ReplicaId, StageId, WorkerId};
///
/// let world = World::new(2, 3)?;
/// assert_eq!(world.size(), 6);
/// let group: Vec<WorkerId> = world.stage_group(StageId(1)).collect();
/// assert_eq!(group, [WorkerId::new(ReplicaId(0), StageId(1)), WorkerId::new(ReplicaId(1), StageId(1))]);
/// assert!(world.is_last(WorkerId::new(ReplicaId(1), StageId(2))));
/// # Ok::<(), pipetrain_engine::EngineError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct World {
    replicas: usize,
    stages: usize,
    /// The workers this process runs, replica-major.
    local: Vec<WorkerId>,
}

impl World {
    /// A world of `replicas × stages` workers, all run by this process.
    pub fn new(replicas: usize, stages: usize) -> Result<Self> {
        let all = (0..replicas * stages)
            .map(|rank| WorkerId::from_rank(rank, stages.max(1)))
            .collect();
        Self::with_local(replicas, stages, all)
    }

    /// A world of `replicas × stages` workers of which this process runs `local` (for a
    /// multi-process launch: each process its share).
    pub fn with_local(replicas: usize, stages: usize, mut local: Vec<WorkerId>) -> Result<Self> {
        if replicas == 0 || stages == 0 {
            return Err(EngineError::EmptyWorld { replicas, stages });
        }
        if let Some(id) = local
            .iter()
            .find(|id| id.replica.index() >= replicas || id.stage.index() >= stages)
        {
            return Err(EngineError::OutsideWorld {
                worker: *id,
                replicas,
                stages,
            });
        }
        local.sort_by_key(|id| id.rank(stages));
        local.dedup();
        Ok(Self {
            replicas,
            stages,
            local,
        })
    }

    /// Data-parallel replicas.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Stages per replica.
    pub fn stages(&self) -> usize {
        self.stages
    }

    /// All workers: `replicas × stages`.
    pub fn size(&self) -> usize {
        self.replicas * self.stages
    }

    /// Every worker, replica-major.
    pub fn workers(&self) -> impl Iterator<Item = WorkerId> + '_ {
        (0..self.size()).map(|rank| WorkerId::from_rank(rank, self.stages))
    }

    /// The workers this process runs, replica-major.
    pub fn local(&self) -> &[WorkerId] {
        &self.local
    }

    /// Whether this process runs every worker.
    pub fn is_whole(&self) -> bool {
        self.local.len() == self.size()
    }

    /// Worker `id`'s place in replica-major order.
    pub fn rank(&self, id: WorkerId) -> usize {
        id.rank(self.stages)
    }

    /// The stages of replica `replica`, in order.
    pub fn replica(&self, replica: ReplicaId) -> impl Iterator<Item = WorkerId> + '_ {
        (0..self.stages).map(move |s| WorkerId::new(replica, StageId::from(s)))
    }

    /// The `replicas` workers holding stage `stage`, by replica: the group whose gradients are
    /// summed. A worker's rank in its group is its replica index.
    pub fn stage_group(&self, stage: StageId) -> impl Iterator<Item = WorkerId> + '_ {
        (0..self.replicas).map(move |r| WorkerId::new(ReplicaId::from(r), stage))
    }

    /// Whether `id` holds the first stage (it reads the batch's inputs).
    pub fn is_first(&self, id: WorkerId) -> bool {
        id.stage.index() == 0
    }

    /// Whether `id` holds the last stage (it computes the loss).
    pub fn is_last(&self, id: WorkerId) -> bool {
        id.stage.index() + 1 == self.stages
    }
}
