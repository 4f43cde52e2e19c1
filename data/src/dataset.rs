//! The `Dataset` trait, one `Example`, and `InMemory`: every example in two flat vectors.

use std::sync::Arc;

use crate::error::{DataError, Result, Shape};
use crate::problem::ShapeProblem;

/// The values of one example's input or target, row-major; the shape comes from the dataset.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Float values (pixels, features, regression targets).
    Float(Vec<f32>),
    /// Integer values (class labels, token ids).
    Int(Vec<i64>),
}

impl Values {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Values::Float(v) => v.len(),
            Values::Int(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether these are float values.
    pub fn is_float(&self) -> bool {
        matches!(self, Values::Float(_))
    }

    /// "float" or "int".
    pub fn kind(&self) -> &'static str {
        if self.is_float() { "float" } else { "int" }
    }

    /// Values `start..end` (a copy).
    fn slice(&self, start: usize, end: usize) -> Values {
        match self {
            Values::Float(v) => Values::Float(v[start..end].to_vec()),
            Values::Int(v) => Values::Int(v[start..end].to_vec()),
        }
    }
}

/// One example: its input and its target.
#[derive(Clone, Debug, PartialEq)]
pub struct Example {
    /// The input, of the dataset's [`Dataset::input_shape`].
    pub input: Values,
    /// The target, of the dataset's [`Dataset::target_shape`].
    pub target: Values,
}

/// A finite, indexable set of examples of fixed shapes.
///
/// Every example's input has [`input_shape`](Dataset::input_shape) and every target
/// [`target_shape`](Dataset::target_shape) (`[]` for a scalar such as a class label); the kind
/// (float or int) of each is the same for every example.
pub trait Dataset: Send + Sync {
    /// Number of examples.
    fn len(&self) -> usize;

    /// Whether there are no examples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Example `index`.
    ///
    /// # Panics
    /// If `index >= len()`, like slice indexing.
    fn get(&self, index: usize) -> Example;

    /// Shape of one input, without the batch dimension.
    fn input_shape(&self) -> &[usize];

    /// Shape of one target, without the batch dimension (`[]` for a scalar).
    fn target_shape(&self) -> &[usize];
}

impl<D: Dataset + ?Sized> Dataset for &D {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn get(&self, index: usize) -> Example {
        (**self).get(index)
    }
    fn input_shape(&self) -> &[usize] {
        (**self).input_shape()
    }
    fn target_shape(&self) -> &[usize] {
        (**self).target_shape()
    }
}

impl<D: Dataset + ?Sized> Dataset for Arc<D> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn get(&self, index: usize) -> Example {
        (**self).get(index)
    }
    fn input_shape(&self) -> &[usize] {
        (**self).input_shape()
    }
    fn target_shape(&self) -> &[usize] {
        (**self).target_shape()
    }
}

/// Highest per-example rank [`collate`](crate::collate) can batch: a float example of rank 3
/// becomes a rank-4 batch (`Activation::Float4`), an int one of rank 2 a rank-3 batch.
pub(crate) fn max_rank(float: bool) -> usize {
    if float { 3 } else { 2 }
}

/// A dataset held in memory: all inputs in one flat vector, all targets in another.
///
/// ```
/// use pipetrain_data::{Dataset, InMemory, Values};
/// // Three examples of 2 features each, with class labels.
/// let data = InMemory::new(
///     Values::Float(vec![0.0, 0.1, 1.0, 1.1, 2.0, 2.1]),
///     vec![2],
///     Values::Int(vec![0, 1, 0]),
///     vec![],
/// )?;
/// assert_eq!(data.len(), 3);
/// assert_eq!(data.get(1).input, Values::Float(vec![1.0, 1.1]));
/// assert_eq!(data.get(1).target, Values::Int(vec![1]));
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct InMemory {
    inputs: Values,
    input_shape: Vec<usize>,
    targets: Values,
    target_shape: Vec<usize>,
    len: usize,
}

impl InMemory {
    /// A dataset from flat, row-major `inputs` and `targets` and the shape of one example's
    /// input and target. Errors when a shape has a zero dimension or a rank
    /// [`collate`](crate::collate) cannot batch, or when the lengths do not make the same whole
    /// number of examples.
    pub fn new(
        inputs: Values,
        input_shape: Vec<usize>,
        targets: Values,
        target_shape: Vec<usize>,
    ) -> Result<Self> {
        let n_in = examples_in(&inputs, &input_shape, "InMemory inputs")?;
        let n_tgt = examples_in(&targets, &target_shape, "InMemory targets")?;
        if n_in != n_tgt {
            return Err(DataError::Shape {
                what: "InMemory",
                problem: ShapeProblem::Counts {
                    inputs: n_in,
                    input_shape: Shape(input_shape),
                    targets: n_tgt,
                    target_shape: Shape(target_shape),
                },
            });
        }
        Ok(InMemory {
            inputs,
            input_shape,
            targets,
            target_shape,
            len: n_in,
        })
    }

    /// All inputs, flat.
    pub fn inputs(&self) -> &Values {
        &self.inputs
    }

    /// All targets, flat.
    pub fn targets(&self) -> &Values {
        &self.targets
    }
}

fn examples_in(values: &Values, shape: &[usize], what: &'static str) -> Result<usize> {
    let max = max_rank(values.is_float());
    if shape.len() > max {
        return Err(DataError::Shape {
            what,
            problem: ShapeProblem::Rank {
                kind: values.kind(),
                shape: Shape(shape.to_vec()),
                max,
            },
        });
    }
    let size: usize = shape.iter().product();
    if size == 0 {
        return Err(DataError::Shape {
            what,
            problem: ShapeProblem::ZeroDimension {
                shape: Shape(shape.to_vec()),
            },
        });
    }
    if values.len() % size != 0 {
        return Err(DataError::Shape {
            what,
            problem: ShapeProblem::Ragged {
                values: values.len(),
                shape: Shape(shape.to_vec()),
                size,
            },
        });
    }
    Ok(values.len() / size)
}

impl Dataset for InMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize) -> Example {
        assert!(
            index < self.len,
            "example {index} out of range for a dataset of {} examples",
            self.len
        );
        let i: usize = self.input_shape.iter().product();
        let t: usize = self.target_shape.iter().product();
        Example {
            input: self.inputs.slice(index * i, (index + 1) * i),
            target: self.targets.slice(index * t, (index + 1) * t),
        }
    }

    fn input_shape(&self) -> &[usize] {
        &self.input_shape
    }

    fn target_shape(&self) -> &[usize] {
        &self.target_shape
    }
}
