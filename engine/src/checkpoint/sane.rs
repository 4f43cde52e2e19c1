//! A checkpoint's optimizer state checked as it is read, before it reaches the optimizer: a
//! value no run can have written (a NaN or negative Adam second moment, a step count above the
//! steps the file records) is refused naming the tensor, rather than resumed and then blamed
//! on the learning rate, or on an overflow in burn's step counter.

use std::path::Path;

use safetensors::tensor::TensorView;

use super::convert::f32_values;
use super::error::Result;
use crate::adapter::StateScalar;
use crate::error::EngineError;

/// An optimizer tensor `name` (key `key` of its parameter): every value finite, and a second
/// moment (Adam's `moment_2`, a running mean of squares) never negative.
pub(super) fn check_tensor(
    path: &Path,
    name: &str,
    key: &str,
    view: &TensorView<'_>,
) -> Result<()> {
    let Some(values) = f32_values(view) else {
        return Ok(());
    };
    let squares = key.ends_with("moment_2");
    let bad = values
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || (squares && **v < 0.0));
    match bad {
        None => Ok(()),
        Some((index, value)) => Err(EngineError::OptimizerState {
            path: path.to_path_buf(),
            entry: name.to_string(),
            reason: match value.is_finite() {
                true => format!(
                    "element {index} is {value}: a second moment is a mean of squares, never \
                     negative"
                ),
                false => format!("element {index} is {value}: optimizer state must be finite"),
            },
        }),
    }
}

/// An optimizer scalar `key` of parameter `param`: a step count (`time`) at most the `steps`
/// the file records, a float finite, an int not negative.
pub(super) fn check_scalar(
    path: &Path,
    param: &str,
    key: &str,
    value: StateScalar,
    steps: u64,
) -> Result<()> {
    let reason = match value {
        StateScalar::UInt(t) if key.ends_with("time") && t > steps => Some(format!(
            "is {t}, more than the {steps} optimizer steps the checkpoint records"
        )),
        StateScalar::Int(i) if i < 0 => Some(format!("is {i}: a count is never negative")),
        StateScalar::Float(x) if !x.is_finite() => {
            Some(format!("is {x}: optimizer state must be finite"))
        }
        _ => None,
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(EngineError::OptimizerState {
            path: path.to_path_buf(),
            entry: format!("{param}/{key}"),
            reason,
        }),
    }
}
