//! `Subset`: a contiguous view of a shared dataset, and `split` into train and held-out views.

use std::ops::Range;
use std::sync::Arc;

use crate::dataset::{Dataset, Example};
use crate::error::{DataError, Result};
use crate::problem::ParameterProblem;

/// Examples `range` of a shared dataset, renumbered from 0.
#[derive(Debug)]
pub struct Subset<D: ?Sized> {
    dataset: Arc<D>,
    range: Range<usize>,
}

impl<D: ?Sized> Clone for Subset<D> {
    fn clone(&self) -> Self {
        Subset {
            dataset: Arc::clone(&self.dataset),
            range: self.range.clone(),
        }
    }
}

impl<D: Dataset + ?Sized> Subset<D> {
    /// Examples `range` of `dataset`; errors when the range is reversed or runs past the end.
    pub fn new(dataset: Arc<D>, range: Range<usize>) -> Result<Self> {
        if range.start > range.end || range.end > dataset.len() {
            return Err(DataError::BadParameter {
                name: "range",
                value: format!("{range:?}"),
                problem: ParameterProblem::OutsideDataset { len: dataset.len() },
            });
        }
        Ok(Subset { dataset, range })
    }

    /// The examples of the underlying dataset this view covers.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }
}

impl<D: Dataset + ?Sized> Dataset for Subset<D> {
    fn len(&self) -> usize {
        self.range.len()
    }

    fn get(&self, index: usize) -> Example {
        assert!(
            index < self.range.len(),
            "example {index} out of range for a subset of {} examples",
            self.range.len()
        );
        self.dataset.get(self.range.start + index)
    }

    fn input_shape(&self) -> &[usize] {
        self.dataset.input_shape()
    }

    fn target_shape(&self) -> &[usize] {
        self.dataset.target_shape()
    }
}

/// Splits `dataset` into a training view and a held-out view: the last
/// `round(len × held_out)` examples are held out, the rest train. Deterministic (no shuffling:
/// shuffle the training view with a [`Loader`](crate::Loader)).
///
/// `held_out = 0` trains on everything (the held-out view is empty). Errors when `held_out` is
/// not in `[0, 1)` or when a positive fraction would leave either side empty.
///
/// ```
/// use std::sync::Arc;
/// use pipetrain_data::{Dataset, InMemory, Values, split};
/// let data = InMemory::new(Values::Int((0..10).collect()), vec![], Values::Int(vec![0; 10]), vec![])?;
/// let (train, held) = split(Arc::new(data), 0.2)?;
/// assert_eq!((train.len(), held.len()), (8, 2));
/// assert_eq!(held.get(0).input, Values::Int(vec![8]));
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
pub fn split<D: Dataset + ?Sized>(
    dataset: Arc<D>,
    held_out: f64,
) -> Result<(Subset<D>, Subset<D>)> {
    if !(0.0..1.0).contains(&held_out) {
        return Err(DataError::BadFraction { held_out });
    }
    let len = dataset.len();
    let held = ((len as f64) * held_out).round() as usize;
    let held = held.min(len);
    let train = len - held;
    if (held == 0 && held_out > 0.0) || train == 0 {
        return Err(DataError::EmptySplit {
            len,
            held_out,
            train,
            held,
        });
    }
    Ok((
        Subset {
            dataset: Arc::clone(&dataset),
            range: 0..train,
        },
        Subset {
            dataset,
            range: train..len,
        },
    ))
}
