//! [`LayerCost`] (what one layer costs) and [`StageCost`] (what a run of layers costs).
//!
//! ## Cost model
//!
//! - **Time** of a layer is `forward + backward`, in any unit (seconds, FLOPs, …) as long as all
//!   layers use the same one. Time of a stage is the sum of its layers' times, added left to
//!   right.
//! - **Memory** of a stage is its parameters plus one micro-batch's activations per layer:
//!   `Σ param_bytes + Σ activation_bytes` over its layers. This ignores optimizer state, gradients
//!   and the number of micro-batches a schedule keeps in flight; it is kept behind
//!   [`StageCost::memory`] so that it can be refined without touching the partitioner.

use serde::{Deserialize, Serialize};

use crate::error::{PartitionError, Result};

/// The cost of one layer: time of its forward and backward pass, and its memory.
///
/// ```
/// use pipetrain_partitioner::LayerCost;
///
/// let layer = LayerCost::new(1.0, 2.0).with_memory(4096, 1024);
/// assert_eq!(layer.time(), 3.0);
/// assert_eq!(layer.memory(), 5120);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct LayerCost {
    /// Time of the forward pass over one micro-batch (seconds or any unit shared by all layers).
    pub forward: f64,
    /// Time of the backward pass over one micro-batch, in the unit of `forward`.
    pub backward: f64,
    /// Bytes of parameters.
    pub param_bytes: u64,
    /// Bytes one micro-batch keeps alive for the backward pass: what the layer's training
    /// forward keeps in the autodiff graph, its output and every value its ops saved for their
    /// backward (pipetrain's profile measures `Layer::graph_bytes`: an MLP's layer keeps its
    /// output, a transformer block some 20 times its output).
    pub activation_bytes: u64,
    /// Bytes of the layer's output for one micro-batch: what the next layer takes, and what the
    /// next stage receives where a cut follows this layer ([`CutBytes`](crate::CutBytes)'s
    /// outputs). Part of `activation_bytes` (the graph keeps the output), so not added to
    /// [`memory`](Self::memory). 0 where not measured.
    #[serde(default)]
    pub output_bytes: u64,
}

impl LayerCost {
    /// A layer with the given forward and backward times and no memory.
    pub const fn new(forward: f64, backward: f64) -> Self {
        Self {
            forward,
            backward,
            param_bytes: 0,
            activation_bytes: 0,
            output_bytes: 0,
        }
    }

    /// This cost with its memory set.
    pub const fn with_memory(self, param_bytes: u64, activation_bytes: u64) -> Self {
        Self {
            param_bytes,
            activation_bytes,
            ..self
        }
    }

    /// This cost with its output's bytes set ([`output_bytes`](Self::output_bytes)).
    ///
    /// ```
    /// use pipetrain_partitioner::LayerCost;
    ///
    /// // A block whose graph keeps 20 times its 1 KiB output.
    /// let block = LayerCost::new(1.0, 2.0).with_memory(4096, 20 << 10).with_output(1 << 10);
    /// assert_eq!((block.memory(), block.output_bytes), (4096 + (20 << 10), 1 << 10));
    /// ```
    pub const fn with_output(self, output_bytes: u64) -> Self {
        Self {
            output_bytes,
            ..self
        }
    }

    /// `n` identical layers, each with forward 1, backward 2 (backward costs about twice the
    /// forward) and no memory: the cost model of "split by layer count".
    ///
    /// ```
    /// use pipetrain_partitioner::LayerCost;
    /// assert_eq!(LayerCost::uniform(3), vec![LayerCost::new(1.0, 2.0); 3]);
    /// ```
    pub fn uniform(n: usize) -> Vec<Self> {
        vec![Self::new(1.0, 2.0); n]
    }

    /// Forward plus backward time.
    pub fn time(&self) -> f64 {
        self.forward + self.backward
    }

    /// Parameters plus one micro-batch's activations, saturating at `u64::MAX`.
    pub const fn memory(&self) -> u64 {
        self.param_bytes.saturating_add(self.activation_bytes)
    }

    /// Checks that both times are finite and non-negative; `layer` names the layer in the error.
    pub(crate) fn check(&self, layer: usize) -> Result<()> {
        for (field, value) in [("forward", self.forward), ("backward", self.backward)] {
            if !value.is_finite() || value < 0.0 {
                return Err(PartitionError::InvalidCost {
                    layer,
                    field,
                    value,
                });
            }
        }
        Ok(())
    }
}

/// The cost of a stage: the sums of its layers' [`LayerCost`]s (see the module docs for the model).
///
/// ```
/// use pipetrain_partitioner::{LayerCost, StageCost};
///
/// let layers = [LayerCost::new(1.0, 2.0).with_memory(10, 5); 4];
/// let stage = StageCost::of(&layers[1..3]);
/// assert_eq!(stage, StageCost { time: 6.0, memory: 30 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct StageCost {
    /// Sum of the layers' [`LayerCost::time`], added left to right.
    pub time: f64,
    /// Sum of the layers' [`LayerCost::memory`], saturating at `u64::MAX`.
    pub memory: u64,
}

impl StageCost {
    /// The cost of a stage made of `layers`.
    pub fn of(layers: &[LayerCost]) -> Self {
        layers
            .iter()
            .fold(Self::default(), |acc, layer| acc.push(layer))
    }

    /// This stage grown by one more layer at its end.
    ///
    /// `StageCost::of` is a fold of `push`, so growing a stage layer by layer gives bit-identical
    /// times to summing it at once; the partitioner relies on that.
    pub fn push(self, layer: &LayerCost) -> Self {
        Self {
            time: self.time + layer.time(),
            memory: self.memory.saturating_add(layer.memory()),
        }
    }

    /// Bytes this stage needs: parameters plus one micro-batch's activations per layer.
    pub const fn memory(&self) -> u64 {
        self.memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_layer_and_field() {
        let err = LayerCost::new(1.0, f64::NAN).check(7).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("layer 7") && msg.contains("backward") && msg.contains("NaN"),
            "{msg}"
        );
        let err = LayerCost::new(-0.5, 1.0).check(2).unwrap_err();
        assert!(err.to_string().contains("forward cost -0.5"), "{err}");
        assert!(LayerCost::new(f64::INFINITY, 0.0).check(0).is_err());
        assert!(LayerCost::new(0.0, 0.0).check(0).is_ok());
    }

    #[test]
    fn memory_saturates() {
        let big = LayerCost::default().with_memory(u64::MAX, 1);
        assert_eq!(big.memory(), u64::MAX);
        assert_eq!(StageCost::of(&[big, big]).memory(), u64::MAX);
    }

    #[test]
    fn serde_round_trip() {
        let layer = LayerCost::new(0.25, 0.5).with_memory(3, 4);
        let json = serde_json::to_string(&layer).unwrap();
        assert_eq!(serde_json::from_str::<LayerCost>(&json).unwrap(), layer);
    }
}
