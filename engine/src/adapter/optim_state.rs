//! Optimizer state out of and back into burn's optimizer, entry by entry, keyed by parameter id.
//!
//! burn serializes an optimizer's state as a burn-pack: tensors and scalars under keys
//! `"{param id}.{key}"` (e.g. Adam's moments and step count). [`export_state`] splits that into
//! entries, [`import_state`] builds one from entries and loads it; the checkpoint maps ids to
//! full-model names and back.

use burn::store::burn_pack::{self, Bytes, DType};
use safetensors::tensor::{Dtype, TensorView};

use super::names::ParamId;
use super::optimizer::{ModuleOptimizer, SgdConfig};

/// A per-parameter optimizer scalar (for example Adam's step count); serializes as burn-pack's
/// scalar does.
pub(crate) type StateScalar = burn_pack::Scalar;

/// One optimizer-state tensor of one parameter: burn's type, shape and raw bytes.
#[derive(Clone, Debug)]
pub(crate) struct StateTensor {
    dtype: DType,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl StateTensor {
    /// A tensor read from a safetensors file; `None` if burn has no such type.
    pub(crate) fn from_safetensors(view: &TensorView<'_>) -> Option<Self> {
        Some(Self {
            dtype: from_safetensors(view.dtype())?,
            shape: view.shape().to_vec(),
            bytes: view.data().to_vec(),
        })
    }

    /// The tensor's safetensors type; `Err` names burn's type when safetensors has none.
    pub(crate) fn safetensors_dtype(&self) -> Result<Dtype, String> {
        to_safetensors(self.dtype).ok_or_else(|| format!("{:?}", self.dtype))
    }
}

/// An optimizer's state as entries `(parameter, key, value)`, in burn-pack order.
pub(crate) struct Entries {
    /// The scalars.
    pub scalars: Vec<(ParamId, String, StateScalar)>,
    /// The tensors.
    pub tensors: Vec<(ParamId, String, StateTensor)>,
}

/// The state of `optimizer`, entry by entry (keys that do not start with a parameter id are
/// left out).
pub(crate) fn export_state(optimizer: &ModuleOptimizer) -> Result<Entries, String> {
    let bytes = optimizer.into_bytes().map_err(|e| e.to_string())?;
    let reader = burn_pack::Reader::from_bytes(bytes).map_err(|e| e.to_string())?;
    let split = |key: &str| -> Option<(ParamId, String)> {
        let (id, rest) = key.split_once('.')?;
        Some((ParamId::from(id.parse::<u64>().ok()?), rest.to_string()))
    };
    let mut entries = Entries {
        scalars: Vec::new(),
        tensors: Vec::new(),
    };
    for (key, value) in reader.scalars() {
        if let Some((id, rest)) = split(key) {
            entries.scalars.push((id, rest, *value));
        }
    }
    for tensor in reader.into_tensors().map_err(|e| e.to_string())? {
        let (key, dtype, shape, _, bytes) = tensor.into_parts().map_err(|e| e.to_string())?;
        if let Some((id, rest)) = split(&key) {
            entries.tensors.push((
                id,
                rest,
                StateTensor {
                    dtype,
                    shape: shape.to_vec(),
                    bytes: bytes.to_vec(),
                },
            ));
        }
    }
    Ok(entries)
}

/// `optimizer` replaced by one of its kind holding exactly the given entries. If burn rejects
/// them, `optimizer` is left a fresh SGD state: the caller must treat the worker's state as lost
/// (the pipeline poisons itself).
pub(crate) fn import_state<'a>(
    optimizer: &mut ModuleOptimizer,
    tensors: impl IntoIterator<Item = (ParamId, &'a str, &'a StateTensor)>,
    scalars: impl IntoIterator<Item = (ParamId, &'a str, StateScalar)>,
) -> Result<(), String> {
    let tensors: Vec<burn_pack::Tensor> = tensors
        .into_iter()
        .map(|(id, key, t)| {
            let id = id.val();
            burn_pack::Tensor::new(
                format!("{id}.{key}"),
                t.dtype,
                t.shape.clone(),
                Some(id),
                Bytes::from_bytes_vec(t.bytes.clone()),
            )
        })
        .collect();
    // burn 0.22.1 materialises loaded optimizer state on `Device::default()` (and moves it to
    // each parameter's device at the next step). With the CUDA backend compiled in, the default
    // device is CUDA GPU 0, which panics on a machine without one: refuse with the reason.
    #[cfg(feature = "cuda")]
    if !tensors.is_empty()
        && let Err(why) = crate::adapter::cuda::device_count(0).and_then(|n| match n {
            0 => Err(crate::EngineError::NoSuchDevice { index: 0, count: 0 }),
            n => Ok(n),
        })
    {
        return Err(format!(
            "this build has burn's CUDA backend, so burn loads optimizer state onto CUDA GPU 0 \
             before moving it to the parameters' device, and no GPU is usable here ({why}); \
             resume with a build without the `cuda` feature, or on a machine with a GPU"
        ));
    }
    let mut writer = burn_pack::Writer::new(tensors);
    for (id, key, value) in scalars {
        writer = writer.with_scalar(&format!("{}.{key}", id.val()), value);
    }
    let bytes = writer.into_bytes().map_err(|e| e.to_string())?;
    let current = std::mem::replace(optimizer, SgdConfig::new().init());
    *optimizer = current.from_bytes(bytes).map_err(|e| e.to_string())?;
    Ok(())
}

/// burn's tensor type as safetensors'; `None` for one safetensors lacks.
fn to_safetensors(dtype: DType) -> Option<Dtype> {
    Some(match dtype {
        DType::F64 => Dtype::F64,
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::I16 => Dtype::I16,
        DType::I8 => Dtype::I8,
        DType::U64 => Dtype::U64,
        DType::U32 => Dtype::U32,
        DType::U16 => Dtype::U16,
        DType::U8 => Dtype::U8,
        DType::Bool(_) => Dtype::BOOL,
        _ => return None,
    })
}

/// safetensors' tensor type as burn's; `None` for one burn lacks.
fn from_safetensors(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F64 => DType::F64,
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::I16 => DType::I16,
        Dtype::I8 => DType::I8,
        Dtype::U64 => DType::U64,
        Dtype::U32 => DType::U32,
        Dtype::U16 => DType::U16,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool(burn::tensor::BoolStore::Native),
        _ => return None,
    })
}
