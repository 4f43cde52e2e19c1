//! # pipetrain-data
//!
//! Datasets, a distributed sampler with the semantics of PyTorch's `DistributedSampler`, and
//! loaders for real file formats.
//!
//! - [`Dataset`]: indexable examples of fixed shapes; [`InMemory`] holds them in two flat
//!   vectors, [`Subset`] / [`split`] view part of one.
//! - [`collate`]: examples stacked into a [`Batch`](pipetrain_engine::Batch).
//! - [`DistributedSampler`]: which examples each data-parallel replica sees per epoch.
//! - [`Loader`]: a run's mini-batches, each addressed by a [`Position`] so a run resumes
//!   bit-for-bit.
//! - File formats, each loading to an [`InMemory`] and rejecting bad files with a
//!   [`DataError`] naming the file and byte offset: [`mnist`], [`cifar10`], [`text`],
//!   [`tokenized`] (text through a Hugging Face `tokenizer.json`), [`tensors`]; [`DataSpec`] picks one from a string such as `mnist:data/mnist`.
//! - [`ContextRange`]: token sequences whose length changes from batch to batch.
//! - [`check_ints`] / [`check_finite`]: labels and token ids inside the model's range, float
//!   values finite, checked once at load.
//! - [`burn_data`] (feature `burn-dataset`): these datasets as burn `Dataset`s and a burn `Batcher`,
//!   and any burn dataset as one of these ([`burn_data::FromBurn`]).
//!
//! ```
//! use burn::prelude::*;
//! use pipetrain_data::{Dataset, InMemory, LoaderConfig, Position, Values, split};
//! use std::sync::Arc;
//!
//! // 100 examples of 4 features, labels in 0..3.
//! let data = InMemory::new(
//!     Values::Float((0..400).map(|v| v as f32).collect()), vec![4],
//!     Values::Int((0..100).map(|v| v % 3).collect()), vec![],
//! )?;
//! let (train, _held_out) = split(Arc::new(data), 0.1)?;
//! // Replica 1 of 2 data-parallel replicas, batches of 8.
//! let loader = LoaderConfig { seed: 42, replicas: 2, rank: 1, ..LoaderConfig::new(8) }.build(train)?;
//! assert_eq!(loader.batches_per_epoch(), 5); // 90 examples / 2 replicas = 45 each; 45 / 8
//! let batch = loader.batch_at(Position { epoch: 3, batch: 4 }, &Device::flex())?;
//! assert_eq!(batch.inputs.dims(), vec![8, 4]);
//! assert_eq!(batch.targets.dims(), vec![8]);
//! # Ok::<(), pipetrain_data::DataError>(())
//! ```

#[cfg(feature = "burn-dataset")]
pub mod burn_data;
mod bytes;
pub mod cifar10;
mod collate;
mod dataset;
mod error;
mod length;
mod loader;
pub mod mnist;
mod position;
mod problem;
mod sampler;
mod spec;
mod subset;
pub mod tensors;
pub mod text;
pub mod tokenized;
mod validate;

pub use collate::collate;
pub use dataset::{Dataset, Example, InMemory, Values};
pub use error::{ACCEPTED_SPECS, DataError, Result, Shape};
pub use length::ContextRange;
pub use loader::{Batches, Loader, LoaderConfig};
pub use position::Position;
pub use problem::{Corruption, ParameterProblem, ShapeProblem};
pub use sampler::{DistributedSampler, SamplerConfig};
pub use spec::DataSpec;
pub use subset::{Subset, split};
pub use validate::{check_finite, check_ints};
