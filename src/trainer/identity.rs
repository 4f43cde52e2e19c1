//! What a resumed run must share with the saved one: the settings its batches depend on.
//!
//! A run's batches are a function of (data, seed, batch size, accumulation, optimizer step):
//! the checkpoint stores those, and a resume refuses a run whose values differ, naming the
//! setting. The stage/replica layout is free to change.

use std::collections::BTreeMap;

/// The settings a resumed run must share with the saved one, by name: stored in every
/// checkpoint the [`Trainer`](crate::trainer::Trainer) writes and checked when it resumes one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunIdentity {
    entries: BTreeMap<String, String>,
}

/// The checkpoint key of the next training batch's position (informative: it follows from the
/// step and the identity, which is checked).
pub const DATA_POSITION: &str = "data-position";

/// The checkpoint key of the data's contents ([`crate::trainer::fingerprint`]): a checkpoint
/// saved before fingerprints holds the spec as given there.
pub const DATA: &str = "data";

/// The checkpoint key of the data's spec as given: informative, never compared, but with a
/// checkpoint that stored the spec under [`DATA`] (saved before fingerprints).
pub const DATA_SPEC: &str = "data-spec";

/// The checkpoint key of the learning-rate schedule, whose mismatch has its own error.
pub const LR_SCHEDULE: &str = "lr-schedule";

/// Identity entries added after checkpoints were first written, with the value a checkpoint
/// saved before them ran with.
const DEFAULTS: &[(&str, &str)] = &[("shuffle", "true"), (LR_SCHEDULE, "constant")];

impl RunIdentity {
    /// An empty identity: any checkpoint of the same model resumes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// This identity with `name` = `value` (`seed` = `0`, `batch` = `256`, …).
    pub fn with(mut self, name: impl Into<String>, value: impl ToString) -> Self {
        self.entries.insert(name.into(), value.to_string());
        self
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.get(name).map(String::as_str)
    }

    /// The model's description (the `model` entry), as the checkpoint stores it.
    pub fn model(&self) -> &str {
        self.get("model").unwrap_or("")
    }

    /// Every entry, by name.
    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.entries
    }

    /// The value a checkpoint saved before `name` was recorded ran with.
    pub fn default_of(name: &str) -> Option<&'static str> {
        DEFAULTS.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}
