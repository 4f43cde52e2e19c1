//! pipetrain's datasets as burn datasets: [`InMemory`] (every file format loads into one) and
//! [`Subset`] implement burn's `Dataset<Example>`, so burn's `DataLoaderBuilder` and
//! burn-train's loaders take them.

use burn::data::dataset::Dataset as BurnDataset;

use crate::dataset::{Dataset, Example, InMemory};
use crate::subset::Subset;

impl BurnDataset<Example> for InMemory {
    /// Example `index` (burn's datasets return `Ok` for every index below `len`).
    fn get(&self, index: usize) -> Result<Example, burn::data::dataset::DatasetError> {
        Ok(Dataset::get(self, index))
    }

    fn len(&self) -> usize {
        Dataset::len(self)
    }
}

impl<D: Dataset + ?Sized> BurnDataset<Example> for Subset<D> {
    fn get(&self, index: usize) -> Result<Example, burn::data::dataset::DatasetError> {
        Ok(Dataset::get(self, index))
    }

    fn len(&self) -> usize {
        Dataset::len(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use burn::data::dataset::Dataset as BurnDataset;

    use crate::{InMemory, Subset, Values};

    #[test]
    fn in_memory_and_subsets_are_burn_datasets_with_the_same_examples() {
        let data = InMemory::new(
            Values::Float((0..12).map(|v| v as f32).collect()),
            vec![3],
            Values::Int(vec![5, 6, 7, 8]),
            vec![],
        )
        .unwrap();
        assert_eq!(BurnDataset::len(&data), 4);
        let third = BurnDataset::get(&data, 2).unwrap();
        assert_eq!(third.input, Values::Float(vec![6.0, 7.0, 8.0]));
        let subset = Subset::new(Arc::new(data), 1..3).unwrap();
        assert_eq!(BurnDataset::len(&subset), 2);
        assert_eq!(BurnDataset::get(&subset, 1).unwrap(), third);
        // burn's iterator visits every example in order.
        let labels: Vec<_> = subset.iter().map(|e| e.unwrap().target).collect();
        assert_eq!(labels, vec![Values::Int(vec![6]), Values::Int(vec![7])]);
    }
}
