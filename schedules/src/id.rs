//! Typed ids: the shared vocabulary of every pipetrain crate.
//!
//! A stage, a micro-batch, a replica and a worker are different things; mixing their indices up is
//! the classic pipeline bug. Each gets its own type, and no bare integer crosses an API.

use std::fmt;

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[derive(serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as an index into a per-item vector.
            pub const fn index(self) -> usize {
                self.0 as usize
            }

            /// All ids `0..n`, in order.
            pub fn range(n: usize) -> impl DoubleEndedIterator<Item = Self> + ExactSizeIterator + Clone {
                (0..n as u32).map(Self)
            }
        }

        impl From<usize> for $name {
            fn from(i: usize) -> Self {
                Self(u32::try_from(i).expect(concat!(stringify!($name), " out of range")))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, self.0)
            }
        }
    };
}

typed_id!(
    /// A pipeline stage: a contiguous range of layers run by one worker of each replica.
    ///
    /// ```
    /// use pipetrain_schedules::StageId;
    /// assert_eq!(StageId(2).to_string(), "stage 2");
    /// assert_eq!(StageId::range(3).last(), Some(StageId(2)));
    /// ```
    StageId,
    "stage "
);
typed_id!(
    /// A micro-batch: 1/m of a replica's mini-batch.
    MicroBatchId,
    "micro-batch "
);
typed_id!(
    /// A data-parallel replica of the whole pipeline.
    ReplicaId,
    "replica "
);

/// A worker: one stage of one replica. World size = replicas × stages.
///
/// ```
/// use pipetrain_schedules::{ReplicaId, StageId, WorkerId};
/// let w = WorkerId::new(ReplicaId(1), StageId(0));
/// assert_eq!(w.to_string(), "replica 1 / stage 0");
/// assert_eq!(w.rank(2), 2); // replica-major rank in a world of 2 stages per replica
/// ```
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct WorkerId {
    /// The replica this worker belongs to.
    pub replica: ReplicaId,
    /// The stage this worker runs.
    pub stage: StageId,
}

impl WorkerId {
    /// The worker running `stage` of `replica`.
    pub const fn new(replica: ReplicaId, stage: StageId) -> Self {
        Self { replica, stage }
    }

    /// Replica-major rank of this worker in a world with `stages` stages per replica.
    pub const fn rank(self, stages: usize) -> usize {
        self.replica.index() * stages + self.stage.index()
    }

    /// The worker with replica-major `rank` in a world with `stages` stages per replica.
    pub fn from_rank(rank: usize, stages: usize) -> Self {
        Self::new(ReplicaId::from(rank / stages), StageId::from(rank % stages))
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} / {}", self.replica, self.stage)
    }
}
