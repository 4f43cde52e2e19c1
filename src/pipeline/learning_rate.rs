//! Changing a [`Pipeline`]'s learning rate between steps, for a learning-rate scheduler.

use pipetrain_engine::Layer;

use crate::error::{Result, invalid};
use crate::pipeline::Pipeline;
use crate::remedy::{Remedy, Setting, Value};

impl<L: Layer> Pipeline<L> {
    /// The learning rate of the next optimizer step.
    pub fn learning_rate(&self) -> f64 {
        self.runtime().config().learning_rate
    }

    /// Sets the learning rate of the next optimizer steps, e.g. a scheduler's value for this
    /// step (a schedule may reach 0, as torch's cosine does); refused, and nothing changes,
    /// unless it is finite and not negative.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain::Pipeline;
    /// use pipetrain_models::MlpConfig;
    ///
    /// let layers = MlpConfig::new(8, 2, 3).init(&Device::flex());
    /// let mut pipeline = Pipeline::builder().layers(layers).balance([2, 1]).build()?;
    /// pipeline.set_learning_rate(0.05)?;
    /// assert_eq!(pipeline.learning_rate(), 0.05);
    /// assert!(pipeline.set_learning_rate(f64::NAN).is_err());
    /// # Ok::<(), pipetrain::Error>(())
    /// ```
    pub fn set_learning_rate(&mut self, learning_rate: f64) -> Result<()> {
        if !(learning_rate.is_finite() && learning_rate >= 0.0) {
            return invalid(
                Setting::LearningRate,
                crate::commands::plan::compact(learning_rate),
                "not a finite number >= 0",
                Some(Remedy::set(Setting::LearningRate, Value::Number(0.01))),
            );
        }
        self.runtime_mut().set_learning_rate(learning_rate);
        Ok(())
    }
}
