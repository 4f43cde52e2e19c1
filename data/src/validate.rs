//! Checks of loaded data before anything trains on it: every int value (class label, token id)
//! inside the model's range, and every float value finite. A bad value is found at load, named
//! by row, rather than widening the model, panicking a worker mid-step or poisoning the weights
//! with NaN.

use crate::dataset::{Dataset, InMemory, Values};
use crate::error::{DataError, Result};

/// Which part of an example a value belongs to.
fn part(inputs: bool) -> &'static str {
    if inputs { "input" } else { "target" }
}

/// Every int input and int target of `data` (class labels, token ids) must be in
/// `0..limit`; `source` names the data in the error.
///
/// ```
/// use pipetrain_data::{InMemory, Values, check_ints, check_finite};
/// let data = InMemory::new(
///     Values::Float(vec![0.0, f32::NAN]), vec![1],
///     Values::Int(vec![0, 7]), vec![],
/// )?;
/// let err = check_ints(&data, 3, "data.safetensors").unwrap_err().to_string();
/// assert!(err.contains("row 1") && err.contains("7") && err.contains("0..3"), "{err}");
/// let err = check_finite(&data, "data.safetensors").unwrap_err().to_string();
/// assert!(err.contains("row 1") && err.contains("NaN"), "{err}");
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
///
/// # Errors
/// [`DataError::OutOfRange`] naming the first offending row and value.
pub fn check_ints(data: &InMemory, limit: usize, source: &str) -> Result<()> {
    let parts = [
        (true, data.inputs(), data.input_shape()),
        (false, data.targets(), data.target_shape()),
    ];
    for (inputs, values, shape) in parts {
        let Values::Int(values) = values else {
            continue;
        };
        let per_row = shape.iter().product::<usize>().max(1);
        if let Some((i, &value)) = values
            .iter()
            .enumerate()
            .find(|(_, v)| !(0..limit as i64).contains(v))
        {
            return Err(DataError::OutOfRange {
                data: source.to_string(),
                part: part(inputs),
                row: i / per_row,
                value,
                limit,
            });
        }
    }
    Ok(())
}

/// Every float input and float target of `data` must be finite (no NaN or ±∞); `source` names
/// the data in the error.
///
/// # Errors
/// [`DataError::NonFinite`] naming the first offending row and value.
pub fn check_finite(data: &InMemory, source: &str) -> Result<()> {
    let parts = [
        (true, data.inputs(), data.input_shape()),
        (false, data.targets(), data.target_shape()),
    ];
    for (inputs, values, shape) in parts {
        let Values::Float(values) = values else {
            continue;
        };
        let per_row = shape.iter().product::<usize>().max(1);
        if let Some((i, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(DataError::NonFinite {
                data: source.to_string(),
                part: part(inputs),
                row: i / per_row,
                value,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(inputs: Values, targets: Vec<i64>) -> InMemory {
        let rows = targets.len();
        let width = inputs.len() / rows;
        InMemory::new(inputs, vec![width], Values::Int(targets), vec![]).unwrap()
    }

    #[test]
    fn a_negative_label_is_named_by_row() {
        let d = data(Values::Float(vec![0.0; 3]), vec![0, 2, -1]);
        let err = check_ints(&d, 3, "f").unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("-1"), "{err}");
        assert!(check_ints(&d, 3, "f").is_err());
    }

    #[test]
    fn labels_inside_the_range_pass() {
        let d = data(Values::Float(vec![0.0; 3]), vec![0, 2, 1]);
        check_ints(&d, 3, "f").unwrap();
        let err = check_ints(&d, 2, "f").unwrap_err().to_string();
        assert!(err.contains("row 1") && err.contains("label 2"), "{err}");
    }

    #[test]
    fn token_inputs_are_checked_too() {
        let d = data(Values::Int(vec![1, 300, 2, 3]), vec![0, 1]);
        let err = check_ints(&d, 256, "f").unwrap_err().to_string();
        assert!(err.contains("input") && err.contains("300"), "{err}");
    }

    #[test]
    fn infinite_inputs_are_named_by_row() {
        let d = data(
            Values::Float(vec![0.0, 1.0, 2.0, f32::INFINITY]),
            vec![0, 1],
        );
        let err = check_finite(&d, "f").unwrap_err().to_string();
        assert!(err.contains("row 1") && err.contains("inf"), "{err}");
        let ok = data(Values::Float(vec![0.0, 1.0]), vec![0, 1]);
        check_finite(&ok, "f").unwrap();
    }
}
