//! `Loader`: the mini-batches of a training run, addressable by [`Position`] so a run resumes
//! bit-for-bit.

use burn::prelude::*;
use pipetrain_engine::Batch;

use crate::collate::collate;
use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use crate::position::Position;
use crate::problem::ParameterProblem;
use crate::sampler::{DistributedSampler, SamplerConfig};

/// How a [`Loader`] batches a dataset. Build with [`LoaderConfig::new`] and set fields:
///
/// ```
/// use pipetrain_data::LoaderConfig;
/// let config = LoaderConfig { seed: 7, replicas: 2, rank: 1, ..LoaderConfig::new(32) };
/// assert!(config.shuffle && config.drop_last);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Examples per batch (per replica when `replicas > 1`).
    pub batch_size: usize,
    /// Seed of the per-epoch shuffle.
    pub seed: u64,
    /// Whether each epoch visits the examples in a fresh order drawn from `(seed, epoch)`.
    pub shuffle: bool,
    /// Drop an epoch's incomplete final batch (default) instead of yielding a short one.
    pub drop_last: bool,
    /// Data-parallel replicas sharing the dataset (1 without data parallelism).
    pub replicas: usize,
    /// This replica, in `0..replicas`.
    pub rank: usize,
    /// Pad the replicas' shards to equal length by repeating examples (default, PyTorch's
    /// `DistributedSampler(drop_last=False)`) instead of dropping the uneven tail.
    pub pad_shards: bool,
}

impl LoaderConfig {
    /// Batches of `batch_size`, shuffled with seed 0, incomplete final batch dropped, one
    /// replica.
    pub fn new(batch_size: usize) -> Self {
        LoaderConfig {
            batch_size,
            seed: 0,
            shuffle: true,
            drop_last: true,
            replicas: 1,
            rank: 0,
            pad_shards: true,
        }
    }

    /// The loader over `dataset`.
    pub fn build<D: Dataset>(self, dataset: D) -> Result<Loader<D>> {
        Loader::new(dataset, self)
    }
}

/// The mini-batches of a run over `dataset`: epoch `e` visits this replica's shard
/// ([`DistributedSampler`] order for `(seed, e)`) in consecutive slices of `batch_size`.
///
/// A batch is a pure function of `(config, epoch, batch)`: [`Loader::batch_at`] and
/// [`Loader::iter_from`] give the same tensors whether a run got there by iterating or resumed
/// from a saved [`Position`].
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_data::{InMemory, LoaderConfig, Position, Values};
/// let data = InMemory::new(
///     Values::Float((0..20).map(|v| v as f32).collect()), vec![2],
///     Values::Int((0..10).collect()), vec![],
/// )?;
/// let loader = LoaderConfig { seed: 1, ..LoaderConfig::new(4) }.build(data)?;
/// assert_eq!(loader.batches_per_epoch(), 2); // 10 / 4, the short batch dropped
/// let device = Device::flex();
/// let resumed = loader.batch_at(Position { epoch: 1, batch: 1 }, &device)?;
/// let (position, reached) = loader.iter_from(Position::START, &device)?.nth(3).unwrap()?;
/// assert_eq!(position, Position { epoch: 1, batch: 1 });
/// assert_eq!(resumed.inputs.to_f64_vec(), reached.inputs.to_f64_vec());
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Loader<D> {
    dataset: D,
    config: LoaderConfig,
    sampler: DistributedSampler,
    batches_per_epoch: usize,
}

impl<D: Dataset> Loader<D> {
    /// A loader; errors when the sampler parameters are invalid (see
    /// [`DistributedSampler::new`]), the batch size is 0, or it exceeds this replica's shard.
    pub fn new(dataset: D, config: LoaderConfig) -> Result<Self> {
        let sampler = DistributedSampler::new(
            dataset.len(),
            SamplerConfig {
                replicas: config.replicas,
                rank: config.rank,
                shuffle: config.shuffle,
                seed: config.seed,
                drop_last: !config.pad_shards,
            },
        )?;
        if config.batch_size == 0 {
            return Err(DataError::BadParameter {
                name: "batch_size",
                value: "0".into(),
                problem: ParameterProblem::EmptyBatch,
            });
        }
        let shard = sampler.num_samples();
        if config.batch_size > shard {
            return Err(DataError::BatchTooLarge {
                batch_size: config.batch_size,
                shard,
                rank: config.rank,
                replicas: config.replicas,
            });
        }
        let batches_per_epoch = if config.drop_last {
            shard / config.batch_size
        } else {
            shard.div_ceil(config.batch_size)
        };
        Ok(Loader {
            dataset,
            config,
            sampler,
            batches_per_epoch,
        })
    }

    /// Batches in every epoch (≥ 1).
    pub fn batches_per_epoch(&self) -> usize {
        self.batches_per_epoch
    }

    /// The configuration.
    pub fn config(&self) -> LoaderConfig {
        self.config
    }

    /// The sampler that orders and shards each epoch.
    pub fn sampler(&self) -> &DistributedSampler {
        &self.sampler
    }

    /// The dataset.
    pub fn dataset(&self) -> &D {
        &self.dataset
    }

    /// The position after `position`.
    pub fn next_position(&self, position: Position) -> Position {
        position.next(self.batches_per_epoch)
    }

    /// Dataset indices of the batch at `position`; errors when the batch is past the end of
    /// its epoch. Costs one epoch's shuffle (`O(len)`); iterate with [`Self::iter_from`] to
    /// pay it once per epoch.
    pub fn indices_at(&self, position: Position) -> Result<Vec<usize>> {
        self.check(position)?;
        Ok(self.slice(&self.sampler.indices(position.epoch), position.batch))
    }

    /// The batch at `position`, collated on `device`.
    pub fn batch_at(&self, position: Position, device: &Device) -> Result<Batch> {
        collate(&self.dataset, &self.indices_at(position)?, device)
    }

    /// Batches from `position` on, rolling over into later epochs (each reshuffled) forever;
    /// take as many as the run needs. Each item is the batch's position and the batch.
    pub fn iter_from(&self, position: Position, device: &Device) -> Result<Batches<'_, D>> {
        self.check(position)?;
        Ok(Batches {
            loader: self,
            position,
            device: device.clone(),
            epoch_indices: None,
        })
    }

    fn check(&self, position: Position) -> Result<()> {
        if position.batch >= self.batches_per_epoch {
            return Err(DataError::PositionOutOfRange {
                epoch: position.epoch,
                batch: position.batch,
                batches_per_epoch: self.batches_per_epoch,
            });
        }
        Ok(())
    }

    fn slice(&self, epoch_indices: &[usize], batch: usize) -> Vec<usize> {
        let start = batch * self.config.batch_size;
        let end = (start + self.config.batch_size).min(epoch_indices.len());
        epoch_indices[start..end].to_vec()
    }
}

/// Iterator over a [`Loader`]'s batches from a position on; see [`Loader::iter_from`]. Never
/// ends; yields an error only when collating fails (a faulty [`Dataset`]).
#[derive(Debug)]
pub struct Batches<'a, D> {
    loader: &'a Loader<D>,
    position: Position,
    device: Device,
    epoch_indices: Option<(u64, Vec<usize>)>,
}

impl<D> Batches<'_, D> {
    /// The position of the batch the next call to `next` yields.
    pub fn position(&self) -> Position {
        self.position
    }
}

impl<D: Dataset> Iterator for Batches<'_, D> {
    type Item = Result<(Position, Batch)>;

    fn next(&mut self) -> Option<Self::Item> {
        let position = self.position;
        let loader = self.loader;
        let stale = !matches!(&self.epoch_indices, Some((e, _)) if *e == position.epoch);
        if stale {
            self.epoch_indices = Some((position.epoch, loader.sampler.indices(position.epoch)));
        }
        let (_, epoch_indices) = self.epoch_indices.as_ref().expect("filled above");
        let indices = loader.slice(epoch_indices, position.batch);
        self.position = loader.next_position(position);
        Some(collate(&loader.dataset, &indices, &self.device).map(|batch| (position, batch)))
    }
}
