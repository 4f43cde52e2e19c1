//! [`TuneError`]: what the search refuses, with the numbers (its `Display`) and the remedy
//! ([`Remedied::remedy`]).

use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, TuneError>;

/// Why the search could not run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TuneError {
    /// The cost table has no entry for a micro-batch size the search needs.
    #[error(
        "the cost table has no times at {rows} rows per micro-batch (measured: {measured:?}), a \
         size the search tries"
    )]
    MissingRows {
        /// The size asked for.
        rows: usize,
        /// The sizes measured.
        measured: Vec<usize>,
    },
    /// A malformed cost table.
    #[error("bad cost table: {what}")]
    BadTable {
        /// What is wrong.
        what: String,
    },
    /// A search space with nothing to search.
    #[error("{what}")]
    EmptySpace {
        /// What is missing.
        what: String,
        /// What would give the search something to search.
        remedy: Remedy,
    },
    /// No candidate of the space fits the memory budget.
    #[error(
        "no configuration fits the memory budget of {budget} bytes per worker; the closest, \
         {closest}, needs {needed} bytes"
    )]
    NothingFits {
        /// The budget.
        budget: u64,
        /// The candidate that came closest.
        closest: String,
        /// The bytes it needs on its fullest worker.
        needed: u64,
    },
}

impl Remedied for TuneError {
    fn remedy(&self) -> Option<Remedy> {
        match self {
            TuneError::EmptySpace { remedy, .. } => Some(remedy.clone()),
            TuneError::NothingFits { needed, .. } => Some(Remedy::one_of([
                Remedy::set(Setting::MemoryBudget, Value::Bytes(*needed)),
                Remedy::set(Setting::Remat, Value::mode("always")),
                Remedy::set(Setting::Workers, Value::Larger),
            ])),
            // Measured again, the table holds every size the search tries.
            TuneError::MissingRows { .. } => Some(Remedy::set(Setting::Remeasure, Value::On)),
            TuneError::BadTable { .. } => None,
        }
    }
}
