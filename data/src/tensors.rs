//! A safetensors file holding a whole dataset: inputs `x` and targets `y`.
//!
//! | tensor | dtype      | shape                   | becomes                      |
//! |--------|------------|-------------------------|------------------------------|
//! | `x`    | F32        | `[N, ...]`, rank 2..=4  | float inputs `[...]`         |
//! | `y`    | I64 or I32 | `[N]` or `[N, T]`       | int targets `[]` or `[T]`    |
//! | `y`    | F32        | `[N, ...]`, rank 1..=4  | float targets `[...]`        |
//!
//! Write one from Python with
//! `safetensors.numpy.save_file({"x": x.astype("float32"), "y": y}, "data.safetensors")`.

use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use crate::bytes::read;
use crate::dataset::{InMemory, Values};
use crate::error::{DataError, Result, Shape};

const X_ACCEPTED: &str = "F32 of shape [N, ...] with rank 2 to 4";
const Y_ACCEPTED: &str =
    "I64 or I32 of shape [N] or [N, T], or F32 of shape [N, ...] with rank 1 to 4";

/// The dataset in `path`; see the module docs for what `x` and `y` may be.
///
/// Errors, naming the file (and tensor): an unreadable or corrupt file, a missing `x` or `y`,
/// an unsupported dtype or rank, or `x` and `y` with different row counts.
pub fn load(path: impl AsRef<Path>) -> Result<InMemory> {
    let path = path.as_ref();
    let bytes = read(path)?;
    let file = SafeTensors::deserialize(&bytes).map_err(|source| DataError::Safetensors {
        path: path.to_path_buf(),
        source,
    })?;
    let x = tensor(path, &file, "x")?;
    let y = tensor(path, &file, "y")?;
    let unsupported = |name: &str, view: &TensorView<'_>, accepted| DataError::UnsupportedTensor {
        path: path.to_path_buf(),
        name: name.to_string(),
        dtype: view.dtype().to_string(),
        shape: Shape(view.shape().to_vec()),
        accepted,
    };
    if x.dtype() != Dtype::F32 || !(2..=4).contains(&x.shape().len()) {
        return Err(unsupported("x", &x, X_ACCEPTED));
    }
    let y_rank_ok = match y.dtype() {
        Dtype::I64 | Dtype::I32 => (1..=2).contains(&y.shape().len()),
        Dtype::F32 => (1..=4).contains(&y.shape().len()),
        _ => false,
    };
    if !y_rank_ok {
        return Err(unsupported("y", &y, Y_ACCEPTED));
    }
    let (x_rows, y_rows) = (x.shape()[0], y.shape()[0]);
    if x_rows != y_rows {
        return Err(DataError::RowMismatch {
            path: path.to_path_buf(),
            x_rows,
            y_rows,
        });
    }
    let targets = match y.dtype() {
        Dtype::I64 => Values::Int(words::<8>(y.data()).map(i64::from_le_bytes).collect()),
        Dtype::I32 => Values::Int(
            words::<4>(y.data())
                .map(|w| i64::from(i32::from_le_bytes(w)))
                .collect(),
        ),
        _ => Values::Float(words::<4>(y.data()).map(f32::from_le_bytes).collect()),
    };
    let inputs = Values::Float(words::<4>(x.data()).map(f32::from_le_bytes).collect());
    InMemory::new(
        inputs,
        x.shape()[1..].to_vec(),
        targets,
        y.shape()[1..].to_vec(),
    )
    .map_err(|e| DataError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        message: e.to_string(),
    })
}

fn tensor<'a>(path: &Path, file: &SafeTensors<'a>, name: &str) -> Result<TensorView<'a>> {
    file.tensor(name).map_err(|_| {
        let mut found: Vec<String> = file.names().into_iter().map(str::to_string).collect();
        found.sort();
        DataError::MissingTensor {
            path: path.to_path_buf(),
            name: name.to_string(),
            found,
        }
    })
}

/// Little-endian words of `N` bytes (the data may be unaligned).
fn words<const N: usize>(data: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    data.chunks_exact(N)
        .map(|c| c.try_into().expect("chunks_exact yields N bytes"))
}
