//! The file format: metadata keys, the run's [`Progress`], parameter names, type mapping.

use std::collections::{BTreeMap, HashMap};

use burn::module::ParamId;
use burn::store::burn_pack::DType;
use safetensors::tensor::Dtype;
use serde::{Deserialize, Serialize};

use crate::layer::Layer;

/// Metadata key of the format version.
pub(super) const FORMAT_KEY: &str = "pipetrain.format";
/// This format's version.
pub(super) const FORMAT: &str = "1";
/// Metadata key of the [`Progress`] (JSON).
pub(super) const PROGRESS_KEY: &str = "pipetrain.progress";
/// Metadata key of the optimizer's name.
pub(super) const OPTIMIZER_KEY: &str = "pipetrain.optimizer";
/// Metadata key of the optimizer's per-parameter scalars (JSON).
pub(super) const SCALARS_KEY: &str = "pipetrain.optimizer_scalars";
/// Prefix of the optimizer-state tensors in a checkpoint file.
pub const OPTIMIZER_PREFIX: &str = "__optimizer__/";

/// Where a run stands: saved with the weights so a resumed run continues where it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Optimizer steps taken.
    pub step: u64,
    /// Anything else the trainer needs to continue bit for bit (data position, seed, model
    /// shape…), as text.
    pub extra: BTreeMap<String, String>,
}

/// Full-model names of the parameters of `layers`, by parameter id; `offset` is the index of
/// `layers[0]` in the whole model.
pub(super) fn names<L: Layer>(layers: &[L], offset: usize) -> HashMap<ParamId, String> {
    crate::adapter::named_parameters(layers, offset)
        .into_iter()
        .map(|n| (n.id, n.name))
        .collect()
}

/// burn's tensor type as safetensors'; `None` for one safetensors lacks.
pub(super) fn to_safetensors(dtype: DType) -> Option<Dtype> {
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
pub(super) fn from_safetensors(dtype: Dtype) -> Option<DType> {
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
