//! A safetensors file holding a whole dataset: inputs `x` and targets `y`, or token windows.
//!
//! | tensor   | dtype      | shape                   | becomes                                |
//! |----------|------------|-------------------------|----------------------------------------|
//! | `x`      | F32        | `[N, ...]`, rank 2..=4  | float inputs `[...]`                   |
//! | `x`      | I64 or I32 | `[N, T]`                | token ids `[T]` (a language model's)   |
//! | `y`      | I64 or I32 | `[N]` or `[N, T]`       | int targets `[]` or `[T]`              |
//! | `y`      | F32        | `[N, ...]`, rank 1..=4  | float targets `[...]`                  |
//! | `tokens` | I64 or I32 | `[N, T + 1]`, T ≥ 1     | windows: input `[..T]`, target `[1..]` |
//!
//! `tokens` (when the file has no `x`) holds `N` windows of `T + 1` token ids, cut as the text
//! loader cuts a corpus ([`crate::text`]): window `w`'s first `T` ids are the input, its last
//! `T` the next-token targets. `x`/`y` pairs of int `[N, T]` are the same data already cut.
//!
//! Write one from Python with
//! `safetensors.numpy.save_file({"x": x.astype("float32"), "y": y}, "data.safetensors")`, or
//! `save_file({"tokens": windows.astype("int64")}, "tokens.safetensors")` for a GPT.

use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use crate::bytes::read;
use crate::dataset::{InMemory, Values};
use crate::error::{DataError, Result, Shape};
use crate::problem::Corruption;

const X_ACCEPTED: &str =
    "F32 of shape [N, ...] with rank 2 to 4, or I64 or I32 token ids of shape [N, T]";
const TOKENS_ACCEPTED: &str = "I64 or I32 token ids of shape [N, T + 1] with T >= 1";
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
    let unsupported = |name: &str, view: &TensorView<'_>, accepted| DataError::UnsupportedTensor {
        path: path.to_path_buf(),
        name: name.to_string(),
        dtype: view.dtype().to_string(),
        shape: Shape(view.shape().to_vec()),
        accepted,
    };
    if file.tensor("x").is_err() {
        if let Ok(tokens) = file.tensor("tokens") {
            return match (ints(&tokens), tokens.shape()) {
                (Some(ids), &[n, window]) if window >= 2 => windows(path, ids, n, window),
                _ => Err(unsupported("tokens", &tokens, TOKENS_ACCEPTED)),
            };
        }
    }
    let x = tensor(path, &file, "x")?;
    let y = tensor(path, &file, "y")?;
    let x_ok = match x.dtype() {
        Dtype::F32 => (2..=4).contains(&x.shape().len()),
        Dtype::I64 | Dtype::I32 => x.shape().len() == 2,
        _ => false,
    };
    if !x_ok {
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
    let values = |view: &TensorView<'_>| match ints(view) {
        Some(ids) => Values::Int(ids),
        None => Values::Float(words::<4>(view.data()).map(f32::from_le_bytes).collect()),
    };
    let (inputs, targets) = (values(&x), values(&y));
    InMemory::new(
        inputs,
        x.shape()[1..].to_vec(),
        targets,
        y.shape()[1..].to_vec(),
    )
    .map_err(|e| layout(path, e))
}

/// The values of an I64 or I32 tensor as i64; `None` for another dtype.
fn ints(view: &TensorView<'_>) -> Option<Vec<i64>> {
    match view.dtype() {
        Dtype::I64 => Some(words::<8>(view.data()).map(i64::from_le_bytes).collect()),
        Dtype::I32 => Some(
            words::<4>(view.data())
                .map(|w| i64::from(i32::from_le_bytes(w)))
                .collect(),
        ),
        _ => None,
    }
}

/// `n` windows of `window` token ids (`ids`, row-major) as examples: input ids `[..T]`, target
/// ids `[1..]`, `T = window - 1` (see the module docs).
fn windows(path: &Path, ids: Vec<i64>, n: usize, window: usize) -> Result<InMemory> {
    let context = window - 1;
    let mut inputs = Vec::with_capacity(n * context);
    let mut targets = Vec::with_capacity(n * context);
    for w in ids.chunks_exact(window) {
        inputs.extend_from_slice(&w[..context]);
        targets.extend_from_slice(&w[1..]);
    }
    InMemory::new(
        Values::Int(inputs),
        vec![context],
        Values::Int(targets),
        vec![context],
    )
    .map_err(|e| layout(path, e))
}

/// An [`InMemory::new`] shape error as a corrupt file at `path`.
fn layout(path: &Path, e: DataError) -> DataError {
    match e {
        DataError::Shape { what, problem } => DataError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            problem: Corruption::Layout { what, problem },
        },
        other => other,
    }
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
