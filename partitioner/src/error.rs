//! [`PartitionError`]: every way a partition or a placement can be rejected.
//!
//! Each variant carries the numbers that made the input bad; its message states them, and what
//! would fix the call is a typed [`Remedy`] (its [`Remedied::remedy`]), which each front end
//! words in its own style: the facade as builder calls (`.stages(3)`), the `pipetrain` binary as
//! flags (`--stages 3`).

use std::ops::Range;

use pipetrain_schedules::StageId;

use crate::fit::fit_balance;
use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

/// A balance of `stages` entries for `layers` layers, nearest `balance` (see [`fit_balance`]).
fn fitted(balance: &[usize], stages: usize, layers: usize) -> Option<Remedy> {
    fit_balance(balance, stages, layers)
        .map(|fit| Remedy::set(Setting::Balance, Value::Counts(fit)))
}

/// Crate-wide result type.
pub type Result<T> = std::result::Result<T, PartitionError>;

/// Why a [`Partition`](crate::Partition) or a [`Placement`](crate::Placement) could not be built.
///
/// ```
/// use pipetrain_partitioner::{Partition, PartitionError};
///
/// let err = Partition::from_balance(&[3, 0, 5], 8).unwrap_err();
/// assert!(matches!(err, PartitionError::EmptyStage { .. }));
/// assert_eq!(
///     err.to_string(),
///     "stage 1 has 0 layers in balance [3, 0, 5]; every stage needs at least one",
/// );
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionError {
    /// Zero stages were asked for.
    #[error("cannot split {layers} layers into 0 stages: a partition needs at least one stage")]
    NoStages {
        /// Number of layers that were to be split.
        layers: usize,
    },

    /// There are no layers to split.
    #[error("cannot split 0 layers into {stages} stages: a partition needs at least one layer")]
    NoLayers {
        /// Number of stages that were asked for.
        stages: usize,
    },

    /// More stages than layers: some stage would be empty.
    #[error(
        "cannot split {layers} layers into {stages} stages: every stage needs at least one layer"
    )]
    MoreStagesThanLayers {
        /// Number of stages that were asked for.
        stages: usize,
        /// Number of layers available.
        layers: usize,
    },

    /// An explicit balance with no entries.
    #[error("the balance is empty, but the model has {layers} layers")]
    EmptyBalance {
        /// Number of layers the balance had to cover.
        layers: usize,
    },

    /// An explicit balance with a zero entry.
    #[error("{stage} has 0 layers in balance {balance:?}; every stage needs at least one")]
    EmptyStage {
        /// The first stage with no layers.
        stage: StageId,
        /// The balance as given.
        balance: Vec<usize>,
        /// Number of layers of the model.
        layers: usize,
    },

    /// An explicit balance with more entries than there are layers.
    #[error(
        "balance {balance:?} has {} stages but the model has only {layers} layers: every stage \
         needs at least one",
        balance.len()
    )]
    BalanceLength {
        /// The balance as given.
        balance: Vec<usize>,
        /// Number of layers of the model.
        layers: usize,
    },

    /// An explicit balance whose entries do not sum to the number of layers.
    #[error("balance {balance:?} sums to {sum} layers but the model has {layers}")]
    BalanceSum {
        /// The balance as given.
        balance: Vec<usize>,
        /// Sum of its entries.
        sum: usize,
        /// Number of layers of the model.
        layers: usize,
    },

    /// A layer cost that is NaN, infinite or negative.
    #[error("layer {layer} has {field} cost {value}; layer costs must be finite and non-negative")]
    InvalidCost {
        /// Index of the offending layer.
        layer: usize,
        /// Which cost: `"forward"` or `"backward"`.
        field: &'static str,
        /// The offending value.
        value: f64,
    },

    /// Per-layer costs given for a different number of layers than the partition covers.
    #[error("got costs for {costs} layers but the partition covers {layers}")]
    CostCount {
        /// Number of costs given.
        costs: usize,
        /// Number of layers in the partition.
        layers: usize,
    },

    /// No partition fits the memory budget.
    ///
    /// `stage` and `layers` describe the fullest stage of the partition that minimises the
    /// largest stage memory (the best any partition can do), so `short_by` is the least amount by
    /// which the budget must grow for the requested number of stages to fit.
    #[error(
        "{stage} (layers {layers:?}) needs {needed} bytes but the memory budget is {budget} bytes \
         (short by {short_by}) and no split into this many stages does better"
    )]
    OverBudget {
        /// The stage that does not fit.
        stage: StageId,
        /// The layers of that stage.
        layers: Range<usize>,
        /// Bytes that stage needs.
        needed: u64,
        /// The memory budget per stage.
        budget: u64,
        /// `needed - budget`.
        short_by: u64,
    },

    /// A placement over zero replicas or zero stages.
    #[error(
        "a placement needs at least one replica and one stage, got {replicas} replicas × \
         {stages} stages"
    )]
    EmptyWorld {
        /// Number of replicas given.
        replicas: usize,
        /// Number of stages given.
        stages: usize,
    },

    /// A round-robin placement over zero devices.
    #[error("cannot place {workers} workers round-robin over 0 devices")]
    NoDevices {
        /// Number of workers to place.
        workers: usize,
    },

    /// An explicit placement with one device per worker missing or in excess.
    #[error(
        "explicit placement lists {given} devices but {replicas} replicas × {stages} stages \
         make {expected} workers, one device each"
    )]
    PlacementLength {
        /// Number of replicas.
        replicas: usize,
        /// Number of stages.
        stages: usize,
        /// `replicas * stages`.
        expected: usize,
        /// Number of devices given.
        given: usize,
    },
}

impl Remedied for PartitionError {
    fn remedy(&self) -> Option<Remedy> {
        let count = |setting, n| Remedy::set(setting, Value::Count(n));
        let sentence = |text: String| Some(Remedy::sentence(text));
        match self {
            PartitionError::NoStages { .. } => Some(count(Setting::Stages, 1)),
            PartitionError::NoLayers { .. } => {
                sentence("give the partitioner at least one layer".into())
            }
            PartitionError::MoreStagesThanLayers { layers, .. } => {
                Some(count(Setting::Stages, *layers))
            }
            PartitionError::EmptyBalance { layers } => sentence(format!(
                "give one layer count per stage, summing to {layers}"
            )),
            PartitionError::EmptyStage {
                balance, layers, ..
            }
            | PartitionError::BalanceSum {
                balance, layers, ..
            } => fitted(balance, balance.len(), *layers),
            PartitionError::BalanceLength { balance, layers } => fitted(balance, *layers, *layers),
            PartitionError::InvalidCost { .. } => {
                sentence("measure or estimate the cost again".into())
            }
            PartitionError::CostCount { .. } => sentence("give one cost per layer".into()),
            PartitionError::OverBudget { needed, .. } => Some(Remedy::one_of([
                Remedy::set(Setting::MemoryBudget, Value::Bytes(*needed)),
                Remedy::set(Setting::Stages, Value::Larger),
                Remedy::set(Setting::Remat, Value::mode("always")),
                Remedy::set(Setting::MicroBatches, Value::Larger),
            ])),
            PartitionError::EmptyWorld { replicas, stages } => Some(Remedy::all_of(
                [(Setting::Replicas, *replicas), (Setting::Stages, *stages)]
                    .into_iter()
                    .filter(|(_, n)| *n == 0)
                    .map(|(setting, _)| count(setting, 1)),
            )),
            PartitionError::NoDevices { .. } => sentence("give at least one device".into()),
            PartitionError::PlacementLength { .. } => {
                sentence("give one device per worker, replica-major".into())
            }
        }
    }
}
