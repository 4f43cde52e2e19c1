//! [`ExampleBatcher`]: burn's `Batcher` over pipetrain [`Example`]s, so that a burn
//! `DataLoader` of a pipetrain dataset yields the pipeline's [`Batch`]es.

use burn::data::dataloader::batcher::Batcher;
use burn::prelude::*;
use pipetrain_engine::Batch;

use crate::collate::collate;
use crate::dataset::{Dataset, Example};

/// Collates the examples of one dataset (of its shapes) into a [`Batch`], as
/// [`collate`](crate::collate) does.
///
/// ```
/// use std::sync::Arc;
/// use burn::data::dataloader::DataLoaderBuilder;
/// use pipetrain_data::{InMemory, Values, burn_data::ExampleBatcher};
///
/// let data = InMemory::new(
///     Values::Float((0..24).map(|v| v as f32).collect()), vec![2],
///     Values::Int((0..12).map(|v| v % 3).collect()), vec![],
/// )?;
/// let loader = DataLoaderBuilder::new(ExampleBatcher::new(&data)).batch_size(4).build(data);
/// let batches: Vec<_> = loader.iter().collect::<Result<_, _>>().unwrap();
/// assert_eq!(batches.len(), 3);
/// assert_eq!(batches[0].inputs.dims(), vec![4, 2]);
/// assert_eq!(batches[2].targets.to_f64_vec(), vec![2.0, 0.0, 1.0, 2.0]);
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
#[derive(Clone, Debug)]
pub struct ExampleBatcher {
    input_shape: Vec<usize>,
    target_shape: Vec<usize>,
}

impl ExampleBatcher {
    /// A batcher for the examples of `dataset` (it takes the dataset's shapes).
    pub fn new<D: Dataset + ?Sized>(dataset: &D) -> Self {
        Self {
            input_shape: dataset.input_shape().to_vec(),
            target_shape: dataset.target_shape().to_vec(),
        }
    }
}

impl Batcher<Example, Batch> for ExampleBatcher {
    /// # Panics
    /// If `items` is empty or an example does not have the dataset's shapes (burn's `Batcher`
    /// returns no error; neither happens with the dataset the batcher was made for).
    fn batch(&self, items: Vec<Example>, device: &Device) -> Batch {
        let examples = Examples {
            examples: items,
            batcher: self,
        };
        let indices: Vec<usize> = (0..examples.examples.len()).collect();
        collate(&examples, &indices, device).unwrap_or_else(|e| panic!("ExampleBatcher: {e}"))
    }
}

/// A batch's examples, as a dataset of the batcher's shapes.
struct Examples<'a> {
    examples: Vec<Example>,
    batcher: &'a ExampleBatcher,
}

impl Dataset for Examples<'_> {
    fn len(&self) -> usize {
        self.examples.len()
    }
    fn get(&self, index: usize) -> Example {
        self.examples[index].clone()
    }
    fn input_shape(&self) -> &[usize] {
        &self.batcher.input_shape
    }
    fn target_shape(&self) -> &[usize] {
        &self.batcher.target_shape
    }
}
