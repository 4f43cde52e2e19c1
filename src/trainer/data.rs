//! A run's data: seeded synthetic batches, or a loaded data set split into a training part,
//! visited by a seeded [`Loader`] (reshuffled every epoch), and a held-out part that is only
//! evaluated.
//!
//! Batch `i` of the run (counting every accumulated batch) is a pure function of the seed and
//! `i`: synthetic batch `i`, or the loader's batch at `Position::from_step(i, ..)`. The pipeline
//! then cuts it into replica shards and micro-batches itself.

use crate::RunError;
use burn::prelude::*;
use pipetrain_data::{DataSpec, Dataset, InMemory, Loader, Position, Subset, collate};

use crate::trainer::ReferenceModel;
use crate::{Batch, Error};

/// Synthetic held-out batches start at this batch index, far beyond any run's training batches.
const HELD_OUT_INDEX: u64 = 1 << 62;

/// Shapes of a loaded data set, which size the model.
#[derive(Clone, Debug)]
pub struct Shapes {
    /// One example's input shape.
    pub input: Vec<usize>,
    /// Whether inputs are float (pixels, features) rather than int (token ids).
    pub float_inputs: bool,
}

impl Shapes {
    /// `(channels, side)` of image inputs `[C, H, H]`, `[H, H]` or flattened `[H·H]` (one
    /// channel); `None` for inputs of another shape.
    pub fn image(&self) -> Option<(usize, usize)> {
        match self.input[..] {
            [c, h, w] if h == w => Some((c, h)),
            [h, w] if h == w => Some((1, h)),
            [f] => {
                let side = (f as f64).sqrt().round() as usize;
                (side * side == f).then_some((1, side))
            }
            _ => None,
        }
    }
}

/// The run's data.
pub enum Data {
    /// Seeded synthetic batches for the model.
    Synthetic {
        /// The run's seed.
        seed: u64,
        /// Whether one batch is held out.
        held_out: bool,
    },
    /// A loaded data set.
    Loaded {
        /// The data's spec, as given.
        spec: DataSpec,
        /// The training part and its loader (boxed: it is large, `Synthetic` is a seed).
        train: Box<Loader<Subset<InMemory>>>,
        /// The held-out part.
        held_out: Subset<InMemory>,
        /// Its shapes.
        shapes: Shapes,
    },
}

impl Data {
    /// The loaded data's spec (`None` for synthetic data).
    pub fn spec(&self) -> Option<&DataSpec> {
        match self {
            Data::Synthetic { .. } => None,
            Data::Loaded { spec, .. } => Some(spec),
        }
    }

    /// The loaded data's shapes (`None` for synthetic data).
    pub fn shapes(&self) -> Option<&Shapes> {
        match self {
            Data::Synthetic { .. } => None,
            Data::Loaded { shapes, .. } => Some(shapes),
        }
    }

    /// A one-line description for the run's banner.
    pub fn describe(&self) -> String {
        match self {
            Data::Synthetic { seed, held_out } => format!(
                "synthetic data (seed {seed}){}",
                if *held_out { "" } else { ", nothing held out" }
            ),
            Data::Loaded {
                spec,
                train,
                held_out,
                ..
            } => {
                format!(
                    "{spec}: {} training examples ({} batches per epoch), {} held out",
                    train.dataset().len(),
                    train.batches_per_epoch(),
                    held_out.len()
                ) + if train.config().shuffle {
                    ""
                } else {
                    ", file order (no shuffle)"
                }
            }
        }
    }

    /// Where training batch `index` comes from, as text: `synthetic batch 12` or `epoch 1,
    /// batch 3` (a loaded dataset: its shuffled order per epoch).
    pub fn position(&self, index: u64) -> String {
        match self {
            Data::Synthetic { .. } => format!("synthetic batch {index}"),
            Data::Loaded { train, .. } => {
                let p = Position::from_step(index, train.batches_per_epoch());
                format!("epoch {}, batch {}", p.epoch, p.batch)
            }
        }
    }

    /// Batch `index` of the run (epochs roll over) of `rows` rows, shaped for `model`.
    ///
    /// # Errors
    /// [`RunError::Batch`](crate::RunError::Batch): the loader's or the shaping's error.
    pub fn batch(
        &self,
        model: &ReferenceModel,
        index: u64,
        rows: usize,
        device: &Device,
    ) -> Result<Batch, Error> {
        match self {
            Data::Synthetic { seed, .. } => Ok(model.synthetic(*seed, index, rows, device)),
            Data::Loaded { train, spec, .. } => {
                let position = Position::from_step(index, train.batches_per_epoch());
                let batch = train
                    .batch_at(position, device)
                    .map_err(|e| batch_error(spec, index, e))?;
                shaped(model, spec, index, batch)
            }
        }
    }

    /// The held-out examples in batches of at most `rows`, shaped for `model`. Synthetic data
    /// holds out one batch of `rows` never trained on.
    ///
    /// # Errors
    /// [`RunError::Batch`](crate::RunError::Batch) (its index counted among the held-out batches): a batch cannot be
    /// collated or shaped.
    pub fn held_out(
        &self,
        model: &ReferenceModel,
        rows: usize,
        device: &Device,
    ) -> Result<Vec<Batch>, Error> {
        match self {
            Data::Synthetic { seed, held_out } => Ok(match held_out {
                true => vec![model.synthetic(*seed, HELD_OUT_INDEX, rows, device)],
                false => Vec::new(),
            }),
            Data::Loaded { held_out, spec, .. } => {
                let indices: Vec<usize> = (0..held_out.len()).collect();
                (0u64..)
                    .zip(indices.chunks(rows.max(1)))
                    .map(|(i, chunk)| {
                        let batch = collate(held_out, chunk, device)
                            .map_err(|e| batch_error(spec, i, e))?;
                        shaped(model, spec, i, batch)
                    })
                    .collect()
            }
        }
    }
}

/// The error of batch `index` of the data `spec` names.
fn batch_error(spec: &DataSpec, index: u64, error: impl std::fmt::Display) -> Error {
    Error::Run(RunError::Batch {
        index,
        data: Some(spec.to_string()),
        reason: error.to_string(),
    })
}

/// Batch `index` with its inputs in the model's shape.
fn shaped(
    model: &ReferenceModel,
    spec: &DataSpec,
    index: u64,
    batch: Batch,
) -> Result<Batch, Error> {
    Ok(Batch {
        inputs: model
            .shape_inputs(batch.inputs)
            .map_err(|e| batch_error(spec, index, e))?,
        targets: batch.targets,
    })
}
