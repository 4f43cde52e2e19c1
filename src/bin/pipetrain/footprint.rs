//! What a command will hold in memory, estimated from its flags before anything is allocated
//! (the library's [`pipetrain::trainer::footprint`]), and refused with a usage error naming the
//! flags that size it when the machine cannot give it.

pub use pipetrain::trainer::footprint::{Estimate, available, exceeds, gib};

use crate::model::ReferenceModel;

/// Refuses a model that cannot be trained in this machine's memory: `what` describes the run's
/// shape for the message, `flags` the flags that size it.
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
    let estimate = Estimate::of(model);
    let needed = estimate.training_bytes(batch, slots, copies);
    match exceeds(needed) {
        None => Ok(()),
        Some(why) => Err(format!(
            "{}: training it needs about {} ({} parameters with their gradients and optimizer \
             state, and {} activations per example at --batch {batch}, for {} of the model: \
             the replicas and --verify's reference this process holds), {why}; use a smaller \
             {flags}",
            model.describe(),
            gib(needed),
            estimate.params,
            estimate.activations_per_example,
            match copies {
                1.0 => "1 copy".to_string(),
                c if c.fract() == 0.0 => format!("{c} copies"),
                c => format!("{c:.2} copies"),
            }
        )),
    }
}
