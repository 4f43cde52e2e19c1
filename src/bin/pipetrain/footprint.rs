//! What a command will hold in memory, estimated from its flags before anything is allocated
//! (the library's [`pipetrain::trainer::footprint`]), and refused with a usage error naming the
//! flags that size it when the machine cannot give it.

pub use pipetrain::trainer::footprint::{Estimate, available};

use crate::failure::explain;
use crate::model::ReferenceModel;

/// Refuses a model that cannot be trained in this machine's memory
/// ([`pipetrain::trainer::footprint::check_training`]): `flags` are the flags that size it.
///
/// # Errors
/// The estimate, what is available and the flags to lower.
pub fn check_training(
    model: &ReferenceModel,
    batch: usize,
    slots: u64,
    copies: f64,
    flags: &str,
) -> Result<(), String> {
    pipetrain::trainer::footprint::check_training(model, batch, slots, copies, flags)
        .map_err(|e| explain(&e))
}
