//! Weights files as the model takes them: F64, F16 and BF16 tensors converted to F32 (the
//! engine's float type; loaded as they are, they fail the first matmul), and every weight
//! checked finite (a NaN weight makes every step NaN).
//!
//! Only weight tensors are touched: optimizer state (`__optimizer__/…`) is restored by its
//! own, typed path.

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use super::error::{Result, corrupt};
use super::format::OPTIMIZER_PREFIX;
use crate::error::EngineError;
use std::path::Path;

/// `bytes` (a safetensors file read from `path`) with every F64/F16/BF16 weight as F32;
/// unchanged (not re-serialized) when every weight is F32 already.
///
/// # Errors
/// A file that does not parse, or a weight with a NaN or infinite value (also one that an F64
/// value too large for F32 becomes), naming the tensor and the element.
pub(super) fn to_f32_weights(path: &Path, bytes: Vec<u8>) -> Result<Vec<u8>> {
    let file = SafeTensors::deserialize(&bytes).map_err(|e| corrupt(path, e))?;
    let mut converted: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in file.tensors() {
        if name.starts_with(OPTIMIZER_PREFIX) {
            continue;
        }
        let Some(values) = f32_values(&view) else {
            continue;
        };
        if let Some((index, value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            let from = match view.dtype() {
                Dtype::F32 => String::new(),
                other => format!(" (as F32, converted from {other})"),
            };
            return Err(EngineError::NonFiniteWeight {
                path: path.to_path_buf(),
                tensor: name,
                index,
                value: format!("{value}{from}"),
            });
        }
        if view.dtype() != Dtype::F32 {
            let le = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            converted.push((name, view.shape().to_vec(), le));
        }
    }
    if converted.is_empty() {
        return Ok(bytes);
    }
    let (_, metadata) = SafeTensors::read_metadata(&bytes).map_err(|e| corrupt(path, e))?;
    let mut views: Vec<(String, TensorView<'_>)> = Vec::new();
    for (name, shape, data) in &converted {
        let view =
            TensorView::new(Dtype::F32, shape.clone(), data).map_err(|e| corrupt(path, e))?;
        views.push((name.clone(), view));
    }
    for (name, view) in file.tensors() {
        if !converted.iter().any(|(n, _, _)| *n == name) {
            views.push((name, view));
        }
    }
    safetensors::serialize(views, metadata.metadata().clone()).map_err(|e| corrupt(path, e))
}

/// A float tensor's values as f32 (`None` for int and bool tensors).
pub(super) fn f32_values(view: &TensorView<'_>) -> Option<Vec<f32>> {
    let data = view.data();
    Some(match view.dtype() {
        Dtype::F32 => words::<4>(data).map(f32::from_le_bytes).collect(),
        Dtype::F64 => words::<8>(data)
            .map(|w| f64::from_le_bytes(w) as f32)
            .collect(),
        Dtype::F16 => words::<2>(data)
            .map(|w| half::f16::from_le_bytes(w).to_f32())
            .collect(),
        Dtype::BF16 => words::<2>(data)
            .map(|w| half::bf16::from_le_bytes(w).to_f32())
            .collect(),
        _ => return None,
    })
}

/// Little-endian words of `N` bytes (the data may be unaligned).
fn words<const N: usize>(data: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    data.chunks_exact(N)
        .map(|c| c.try_into().expect("chunks_exact yields N bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn file(dtype: Dtype, bytes: &[u8], shape: Vec<usize>) -> Vec<u8> {
        let views = vec![(
            "0.w".to_string(),
            TensorView::new(dtype, shape, bytes).unwrap(),
        )];
        safetensors::serialize(views, None::<HashMap<String, String>>).unwrap()
    }

    fn values(bytes: &[u8]) -> (Dtype, Vec<f32>) {
        let file = SafeTensors::deserialize(bytes).unwrap();
        let view = file.tensor("0.w").unwrap();
        (view.dtype(), f32_values(&view).unwrap())
    }

    #[test]
    fn f64_f16_and_bf16_weights_become_f32() {
        let f64s: Vec<u8> = [1.5f64, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let f16s: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let bf16s: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        for (dtype, bytes) in [(Dtype::F64, f64s), (Dtype::F16, f16s), (Dtype::BF16, bf16s)] {
            let out = to_f32_weights(Path::new("w"), file(dtype, &bytes, vec![2])).unwrap();
            assert_eq!(values(&out), (Dtype::F32, vec![1.5, -2.0]), "{dtype}");
        }
    }

    #[test]
    fn a_nan_weight_is_named() {
        let bytes: Vec<u8> = [0.0f32, f32::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let err = to_f32_weights(
            Path::new("w.safetensors"),
            file(Dtype::F32, &bytes, vec![2]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`0.w`") && err.contains("element 1") && err.contains("NaN"));
    }

    #[test]
    fn an_f64_too_large_for_f32_is_refused() {
        let bytes = 1e300f64.to_le_bytes();
        let err = to_f32_weights(Path::new("w"), file(Dtype::F64, &bytes, vec![1]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("inf") && err.contains("F64"), "{err}");
    }
}
