//! `collate`: examples stacked into one batch of tensors.

use burn::prelude::*;
use burn::tensor::{Int, TensorData};
use pipetrain_engine::{Activation, Batch};

use crate::dataset::{Dataset, Values, max_rank};
use crate::error::{DataError, Result, Shape};
use crate::problem::ShapeProblem;

/// Examples `indices` of `dataset`, stacked into a [`Batch`] of shape `[indices.len(), ...]`.
///
/// | example (input or target) | batch                          |
/// |---------------------------|--------------------------------|
/// | float, shape `[]`..`[a,b,c]` | `Float1` `[n]` .. `Float4` `[n,a,b,c]` |
/// | int, shape `[]` (a label)    | `Int1` `[n]`                   |
/// | int, shape `[t]` (tokens)    | `Int2` `[n, t]`                |
/// | int, shape `[a, b]`          | `Int3` `[n, a, b]`             |
///
/// Errors when `indices` is empty, or when an example's length or kind disagrees with the
/// dataset's shapes (a faulty [`Dataset`] implementation).
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_data::{InMemory, Values, collate};
/// let data = InMemory::new(
///     Values::Float((0..12).map(|v| v as f32).collect()),
///     vec![2, 2],
///     Values::Int(vec![7, 8, 9]),
///     vec![],
/// )?;
/// let batch = collate(&data, &[2, 0], &Device::flex())?;
/// assert_eq!(batch.inputs.dims(), vec![2, 2, 2]);
/// assert_eq!(batch.targets.to_f64_vec(), vec![9.0, 7.0]);
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
pub fn collate<D: Dataset + ?Sized>(
    dataset: &D,
    indices: &[usize],
    device: &Device,
) -> Result<Batch> {
    if indices.is_empty() {
        return Err(DataError::Shape {
            what: "collate",
            problem: ShapeProblem::NoIndices,
        });
    }
    let in_shape = dataset.input_shape().to_vec();
    let tgt_shape = dataset.target_shape().to_vec();
    let mut inputs = Stack::new(&in_shape, indices.len());
    let mut targets = Stack::new(&tgt_shape, indices.len());
    for &index in indices {
        let example = dataset.get(index);
        inputs.push(example.input, index, "input")?;
        targets.push(example.target, index, "target")?;
    }
    Ok(Batch {
        inputs: inputs.finish(indices.len(), &in_shape, device)?,
        targets: targets.finish(indices.len(), &tgt_shape, device)?,
    })
}

/// Values of several examples, appended in order.
struct Stack {
    size: usize,
    values: Option<Values>,
    capacity: usize,
}

impl Stack {
    fn new(shape: &[usize], rows: usize) -> Self {
        let size = shape.iter().product();
        Stack {
            size,
            values: None,
            capacity: size * rows,
        }
    }

    fn push(&mut self, values: Values, index: usize, part: &'static str) -> Result<()> {
        if values.len() != self.size {
            return Err(DataError::Shape {
                what: "collate",
                problem: ShapeProblem::ExampleSize {
                    index,
                    part,
                    values: values.len(),
                    needed: self.size,
                },
            });
        }
        let capacity = self.capacity;
        match (&mut self.values, values) {
            (None, Values::Float(v)) => {
                let mut all = Vec::with_capacity(capacity);
                all.extend(v);
                self.values = Some(Values::Float(all));
            }
            (None, Values::Int(v)) => {
                let mut all = Vec::with_capacity(capacity);
                all.extend(v);
                self.values = Some(Values::Int(all));
            }
            (Some(Values::Float(all)), Values::Float(v)) => all.extend(v),
            (Some(Values::Int(all)), Values::Int(v)) => all.extend(v),
            (Some(first), other) => {
                return Err(DataError::Shape {
                    what: "collate",
                    problem: ShapeProblem::MixedKinds {
                        index,
                        part,
                        kind: other.kind(),
                        earlier: first.kind(),
                    },
                });
            }
        }
        Ok(())
    }

    fn finish(self, rows: usize, shape: &[usize], device: &Device) -> Result<Activation> {
        let values = self.values.expect("at least one example was pushed");
        let mut dims = Vec::with_capacity(shape.len() + 1);
        dims.push(rows);
        dims.extend_from_slice(shape);
        let max = max_rank(values.is_float());
        if shape.len() > max {
            return Err(DataError::Shape {
                what: "collate",
                problem: ShapeProblem::Rank {
                    kind: values.kind(),
                    shape: Shape(shape.to_vec()),
                    max,
                },
            });
        }
        Ok(match values {
            Values::Float(v) => {
                let data = TensorData::new(v, dims);
                match shape.len() {
                    0 => Tensor::<1>::from_data(data, device).into(),
                    1 => Tensor::<2>::from_data(data, device).into(),
                    2 => Tensor::<3>::from_data(data, device).into(),
                    _ => Tensor::<4>::from_data(data, device).into(),
                }
            }
            Values::Int(v) => {
                let data = TensorData::new(v, dims);
                match shape.len() {
                    0 => Tensor::<1, Int>::from_data(data, device).into(),
                    1 => Tensor::<2, Int>::from_data(data, device).into(),
                    _ => Tensor::<3, Int>::from_data(data, device).into(),
                }
            }
        })
    }
}
