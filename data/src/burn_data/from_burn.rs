//! [`FromBurn`]: any burn dataset as a pipetrain [`Dataset`], so that the [`Loader`](crate::Loader)
//! (distributed sampler, resumable positions) and a pipeline's `train_step` take it.

use std::marker::PhantomData;

use burn::data::dataset::Dataset as BurnDataset;

use crate::dataset::{Dataset, Example, Values};
use crate::error::{DataError, Result};
use crate::problem::ParameterProblem;

/// A burn `Dataset<I>` seen as a pipetrain [`Dataset`]: `convert` turns each item into an
/// [`Example`] of the given shapes.
///
/// ```
/// use std::sync::Arc;
/// use burn::data::dataset::InMemDataset;
/// use burn::prelude::*;
/// use pipetrain_data::{Dataset, Example, LoaderConfig, Position, Values, burn_data::FromBurn};
///
/// // A burn dataset of (features, label) pairs.
/// let items: Vec<([f32; 2], i64)> = (0..8).map(|i| ([i as f32, -(i as f32)], i % 2)).collect();
/// let data = FromBurn::new(InMemDataset::new(items), vec![2], vec![], |(x, y): ([f32; 2], i64)| {
///     Example { input: Values::Float(x.to_vec()), target: Values::Int(vec![y]) }
/// })?;
/// assert_eq!(data.len(), 8);
/// let loader = LoaderConfig { shuffle: false, ..LoaderConfig::new(4) }.build(Arc::new(data))?;
/// let batch = loader.batch_at(Position { epoch: 0, batch: 1 }, &Device::flex())?;
/// assert_eq!(batch.inputs.dims(), vec![4, 2]); // ready for `pipeline.train_step(&batch)`
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
pub struct FromBurn<DS, I, F> {
    dataset: DS,
    convert: F,
    input_shape: Vec<usize>,
    target_shape: Vec<usize>,
    item: PhantomData<fn() -> I>,
}

impl<DS, I, F> FromBurn<DS, I, F>
where
    DS: BurnDataset<I>,
    F: Fn(I) -> Example + Send + Sync,
{
    /// `dataset` with `convert` applied to every item; one input has `input_shape`, one target
    /// `target_shape` (`[]` for a class label). The first item is converted and checked here:
    /// an empty dataset, an item burn cannot read, or values that do not fill the shapes are an
    /// error naming the shapes and the lengths.
    pub fn new(
        dataset: DS,
        input_shape: Vec<usize>,
        target_shape: Vec<usize>,
        convert: F,
    ) -> Result<Self> {
        let data = Self {
            dataset,
            convert,
            input_shape,
            target_shape,
            item: PhantomData,
        };
        if data.dataset.is_empty() {
            return Err(DataError::BadParameter {
                name: "dataset",
                value: "empty".into(),
                problem: ParameterProblem::EmptyDataset,
            });
        }
        let first = data.dataset.get(0).map_err(|e| DataError::BadParameter {
            name: "dataset item 0",
            value: "unreadable".into(),
            problem: ParameterProblem::Unreadable {
                said: e.to_string(),
            },
        })?;
        let example = (data.convert)(first);
        data.check("input", &example.input, &data.input_shape)?;
        data.check("target", &example.target, &data.target_shape)?;
        Ok(data)
    }

    fn check(&self, what: &'static str, values: &Values, shape: &[usize]) -> Result<()> {
        let expected: usize = shape.iter().product();
        if values.len() == expected {
            return Ok(());
        }
        Err(DataError::BadParameter {
            name: if what == "input" {
                "input_shape"
            } else {
                "target_shape"
            },
            value: format!("{shape:?}"),
            problem: ParameterProblem::ItemShape {
                part: what,
                values: values.len(),
                kind: values.kind(),
                holds: expected,
            },
        })
    }
}

impl<DS, I, F> Dataset for FromBurn<DS, I, F>
where
    DS: BurnDataset<I>,
    F: Fn(I) -> Example + Send + Sync,
{
    fn len(&self) -> usize {
        self.dataset.len()
    }

    /// # Panics
    /// If burn's dataset cannot read item `index` (pipetrain's datasets, like slices, do not
    /// fail for an index below `len`).
    fn get(&self, index: usize) -> Example {
        match self.dataset.get(index) {
            Ok(item) => (self.convert)(item),
            Err(e) => panic!("burn dataset item {index}: {e}"),
        }
    }

    fn input_shape(&self) -> &[usize] {
        &self.input_shape
    }

    fn target_shape(&self) -> &[usize] {
        &self.target_shape
    }
}

#[cfg(test)]
mod tests {
    use burn::data::dataset::InMemDataset;

    use super::*;

    fn labelled(x: f32) -> Example {
        Example {
            input: Values::Float(vec![x, x]),
            target: Values::Int(vec![0]),
        }
    }

    #[test]
    fn shapes_that_do_not_hold_the_first_item_are_refused_with_the_lengths() {
        let err = FromBurn::new(InMemDataset::new(vec![1.0f32]), vec![3], vec![], labelled)
            .err()
            .unwrap();
        assert!(
            err.to_string().contains(
                "input_shape = [3] is invalid: item 0's input has 2 float values, the shape holds 3"
            ),
            "{err}"
        );
        let err = FromBurn::new(
            InMemDataset::new(Vec::<f32>::new()),
            vec![2],
            vec![],
            labelled,
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("dataset = empty"), "{err}");
    }

    #[test]
    fn items_are_converted_in_order() {
        let data = FromBurn::new(
            InMemDataset::new(vec![1.0f32, 2.0]),
            vec![2],
            vec![],
            labelled,
        )
        .unwrap();
        assert_eq!(data.len(), 2);
        assert_eq!(data.get(1).input, Values::Float(vec![2.0, 2.0]));
    }
}
