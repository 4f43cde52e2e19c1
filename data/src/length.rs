//! Sequence lengths that change from batch to batch: `--context-range 32..128`.

use std::fmt;
use std::str::FromStr;

use burn::prelude::*;
use burn::tensor::Int;
use pipetrain_engine::{Activation, Batch};

use crate::error::{DataError, Result, Shape};
use crate::problem::ParameterProblem;

/// Token sequences whose length is drawn per batch from `min..=max`: batch `index` of a run is
/// cut to [`length_at`](Self::length_at)`(seed, index)` tokens. Batch 0 is always `max` long,
/// so what a pipeline measures on its first batch (the split by time, the memory budget) holds
/// for every later, shorter one. Parses from `MIN..MAX` (both included).
///
/// ```
/// use burn::prelude::*;
/// use burn::tensor::Int;
/// use pipetrain_data::ContextRange;
/// use pipetrain_engine::Batch;
/// let range: ContextRange = "4..8".parse()?;
/// assert_eq!(range.length_at(7, 0), 8);
/// let lengths: Vec<usize> = (0..50).map(|i| range.length_at(7, i)).collect();
/// assert!(lengths.iter().all(|l| (4..=8).contains(l)) && lengths.contains(&4));
/// let ids = || Tensor::<2, Int>::zeros([2, 8], &Device::flex()).into();
/// let batch = Batch { inputs: ids(), targets: ids() };
/// let cut = range.cut(batch, 5)?;
/// assert_eq!((cut.inputs.dims(), cut.targets.dims()), (vec![2, 5], vec![2, 5]));
/// assert!("0..8".parse::<ContextRange>().is_err() && "9..8".parse::<ContextRange>().is_err());
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextRange {
    /// The shortest sequence, ≥ 1.
    pub min: usize,
    /// The longest sequence, ≥ `min`.
    pub max: usize,
}

impl ContextRange {
    /// Tokens in batch `index` of a run seeded `seed`: `max` for batch 0, else drawn uniformly
    /// from `min..=max` by a hash of `(seed, index)` (the same in every process of a run and on
    /// resume).
    pub fn length_at(&self, seed: u64, index: u64) -> usize {
        if index == 0 {
            return self.max;
        }
        let span = (self.max - self.min + 1) as u64;
        self.min + (mix(seed ^ mix(index)) % span) as usize
    }

    /// `batch` with its int `[rows, tokens]` inputs and targets cut to their first `length`
    /// tokens.
    ///
    /// # Errors
    /// [`DataError::BadParameter`] when the batch holds no rank-2 int sequences or they are
    /// shorter than `length`.
    pub fn cut(&self, batch: Batch, length: usize) -> Result<Batch> {
        let cut = |a: Activation| -> Result<Activation> {
            let shape = a.dims();
            let found = a.describe();
            let ids: Tensor<2, Int> = a.int().map_err(|_| {
                self.refuse(ParameterProblem::NotTokens {
                    found,
                    shape: Shape(shape.clone()),
                })
            })?;
            if shape[1] < length {
                return Err(self.refuse(ParameterProblem::TooShortToCut {
                    tokens: shape[1],
                    length,
                    longest: self.max,
                }));
            }
            Ok(ids.narrow(1, 0, length).into())
        };
        Ok(Batch {
            inputs: cut(batch.inputs)?,
            targets: cut(batch.targets)?,
        })
    }

    fn refuse(&self, problem: ParameterProblem) -> DataError {
        DataError::BadParameter {
            name: "context range",
            value: self.to_string(),
            problem,
        }
    }
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl FromStr for ContextRange {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |problem| DataError::BadParameter {
            name: "context range",
            value: s.to_string(),
            problem,
        };
        let (min, max) = s
            .split_once("..")
            .ok_or_else(|| bad(ParameterProblem::RangeForm))?;
        let number = |v: &str| {
            v.trim_start_matches('=')
                .parse::<usize>()
                .map_err(|_| bad(ParameterProblem::RangeCounts))
        };
        let (min, max) = (number(min)?, number(max)?);
        if min == 0 || min > max {
            return Err(bad(ParameterProblem::RangeOrder { min, max }));
        }
        Ok(ContextRange { min, max })
    }
}

impl fmt::Display for ContextRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.min, self.max)
    }
}
