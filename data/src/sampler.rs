//! `DistributedSampler`: which examples each replica sees in an epoch, with the semantics of
//! PyTorch's `torch.utils.data.DistributedSampler`.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{DataError, Result};
use crate::problem::ParameterProblem;

/// How a [`DistributedSampler`] orders and divides the examples. The defaults are PyTorch's:
/// one replica, rank 0, shuffled, seed 0, the uneven tail padded.
///
/// ```
/// use pipetrain_data::SamplerConfig;
/// let config = SamplerConfig { replicas: 3, rank: 1, shuffle: false, ..Default::default() };
/// let sampler = config.build(10)?;
/// assert_eq!(sampler.indices(0), vec![1, 4, 7, 0]);
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Replicas the examples are divided among (PyTorch's `num_replicas`); ≥ 1.
    pub replicas: usize,
    /// This replica, in `0..replicas`.
    pub rank: usize,
    /// Whether each epoch visits the examples in a fresh seeded order.
    pub shuffle: bool,
    /// Seed of the shuffle; every replica must use the same one.
    pub seed: u64,
    /// Drop the tail that does not divide evenly among replicas instead of padding it.
    pub drop_last: bool,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            replicas: 1,
            rank: 0,
            shuffle: true,
            seed: 0,
            drop_last: false,
        }
    }
}

impl SamplerConfig {
    /// The sampler for a dataset of `len` examples.
    pub fn build(self, len: usize) -> Result<DistributedSampler> {
        DistributedSampler::new(len, self)
    }
}

/// Which examples replica `rank` of `replicas` sees in each epoch.
///
/// The rule, exactly PyTorch's:
///
/// 1. Order: `0..len`, or if `shuffle`, a permutation drawn from ChaCha8 seeded with `seed`
///    on stream `epoch` (so every replica computes the same permutation, and each epoch a new
///    one).
/// 2. Even out: with `drop_last = false` the order is **padded** by repeating it from its
///    start (cyclically, as often as needed when `len < replicas`) up to
///    `total = ceil(len / replicas) × replicas`; with `drop_last = true` it is **truncated** to
///    `total = floor(len / replicas) × replicas`.
/// 3. Shard: replica `rank` takes positions `rank, rank + replicas, rank + 2·replicas, …` of
///    that list: `num_samples = total / replicas` indices.
///
/// For `len = 10`, `replicas = 3`, no shuffle, no drop (total 12, so `0, 1` are repeated):
///
/// ```text
/// padded:  0 1 2 3 4 5 6 7 8 9 0 1
/// rank 0:  0     3     6     9        -> [0, 3, 6, 9]
/// rank 1:    1     4     7     0      -> [1, 4, 7, 0]
/// rank 2:      2     5     8     1    -> [2, 5, 8, 1]
/// ```
///
/// With `drop_last = true` the total is 9 and example 9 is seen by no replica that epoch.
///
/// The permutation is a Fisher–Yates shuffle over ChaCha8's `u64` stream with Lemire's
/// unbiased bounded draw, written out here rather than borrowed from `rand::seq`, so a saved
/// run resumes bit-for-bit whatever `rand` release is linked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    len: usize,
    config: SamplerConfig,
    num_samples: usize,
}

impl DistributedSampler {
    /// A sampler over `len` examples; errors when `len` is 0, `replicas` is 0, `rank` is not
    /// below `replicas`, or `drop_last` would leave every replica empty (`len < replicas`).
    pub fn new(len: usize, config: SamplerConfig) -> Result<Self> {
        let SamplerConfig {
            replicas,
            rank,
            drop_last,
            ..
        } = config;
        if replicas == 0 {
            return Err(DataError::BadParameter {
                name: "replicas",
                value: "0".into(),
                problem: ParameterProblem::NoReplicas,
            });
        }
        if rank >= replicas {
            return Err(DataError::BadParameter {
                name: "rank",
                value: rank.to_string(),
                problem: ParameterProblem::RankOutOfRange { replicas },
            });
        }
        if len == 0 {
            return Err(DataError::BadParameter {
                name: "len",
                value: "0".into(),
                problem: ParameterProblem::EmptyDataset,
            });
        }
        if drop_last && len < replicas {
            return Err(DataError::BadParameter {
                name: "len",
                value: len.to_string(),
                problem: ParameterProblem::EmptyShards { len, replicas },
            });
        }
        let num_samples = if drop_last {
            len / replicas
        } else {
            len.div_ceil(replicas)
        };
        Ok(DistributedSampler {
            len,
            config,
            num_samples,
        })
    }

    /// Examples in the dataset.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a sampler has at least one example (checked by [`Self::new`]).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The configuration.
    pub fn config(&self) -> SamplerConfig {
        self.config
    }

    /// Indices this replica sees per epoch (the same every epoch).
    pub fn num_samples(&self) -> usize {
        self.num_samples
    }

    /// Indices all replicas together see per epoch: `num_samples × replicas`.
    pub fn total_size(&self) -> usize {
        self.num_samples * self.config.replicas
    }

    /// The dataset order of `epoch` before padding or truncation: `0..len`, or its seeded
    /// permutation. The same for every rank.
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.config.shuffle {
            let mut rng = ChaCha8Rng::seed_from_u64(self.config.seed);
            rng.set_stream(epoch);
            for i in (1..order.len()).rev() {
                let j = below(&mut rng, i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        order
    }

    /// The `num_samples()` dataset indices this replica visits in `epoch`, in order.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let order = self.order(epoch);
        let total = self.total_size();
        let replicas = self.config.replicas;
        // Padding repeats the order cyclically; truncation keeps a prefix. Both are
        // `order[p % len]` for positions `p < total`.
        (self.config.rank..total)
            .step_by(replicas)
            .map(|p| order[p % self.len])
            .collect()
    }
}

/// A uniform draw from `0..n` (`n ≥ 1`): Lemire's multiply-and-reject, unbiased.
fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    let threshold = n.wrapping_neg() % n;
    loop {
        let m = u128::from(rng.next_u64()) * u128::from(n);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}
