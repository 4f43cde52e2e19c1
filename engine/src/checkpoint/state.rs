//! [`OptimizerState`]: optimizer state by full-model parameter name, merged over workers and
//! split back among them.

use std::collections::BTreeMap;

use burn::module::ParamId;
use burn::optim::ModuleOptimizer;
use burn::store::burn_pack::{self, Bytes, DType, Scalar};

use super::format::names;
use crate::layer::Layer;

/// One optimizer-state tensor or scalar of one parameter.
#[derive(Clone, Debug)]
pub(super) struct StateTensor {
    pub(super) dtype: DType,
    pub(super) shape: Vec<usize>,
    pub(super) bytes: Vec<u8>,
}

/// Optimizer state by parameter name, then by key.
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    pub(super) optimizer: String,
    pub(super) tensors: BTreeMap<String, BTreeMap<String, StateTensor>>,
    pub(super) scalars: BTreeMap<String, BTreeMap<String, Scalar>>,
}

impl OptimizerState {
    /// The state of `optimizer` over `layers` (whose first layer is model layer `offset`), merged
    /// into `self` (entries already present win: replicas hold equal copies).
    pub(super) fn absorb<L: Layer>(
        &mut self,
        optimizer: &ModuleOptimizer,
        layers: &[L],
        offset: usize,
    ) -> std::result::Result<(), String> {
        let names = names(layers, offset);
        let bytes = optimizer.into_bytes().map_err(|e| e.to_string())?;
        let reader = burn_pack::Reader::from_bytes(bytes).map_err(|e| e.to_string())?;
        let split = |key: &str| -> Option<(String, String)> {
            let (id, rest) = key.split_once('.')?;
            let name = names.get(&ParamId::from(id.parse::<u64>().ok()?))?;
            Some((name.clone(), rest.to_string()))
        };
        for (key, value) in reader.scalars() {
            if let Some((name, rest)) = split(key) {
                self.scalars
                    .entry(name)
                    .or_default()
                    .entry(rest)
                    .or_insert(*value);
            }
        }
        for tensor in reader.into_tensors().map_err(|e| e.to_string())? {
            let (key, dtype, shape, _, bytes) = tensor.into_parts().map_err(|e| e.to_string())?;
            if let Some((name, rest)) = split(&key) {
                self.tensors
                    .entry(name)
                    .or_default()
                    .entry(rest)
                    .or_insert(StateTensor {
                        dtype,
                        shape: shape.to_vec(),
                        bytes: bytes.to_vec(),
                    });
            }
        }
        Ok(())
    }

    /// `optimizer` loaded with the entries of the parameters of `layers`.
    pub(super) fn restore<L: Layer>(
        &self,
        optimizer: &mut ModuleOptimizer,
        layers: &[L],
        offset: usize,
        keep: &dyn Fn(ParamId) -> bool,
    ) -> std::result::Result<(), String> {
        let mut tensors = Vec::new();
        let mut writer_scalars = Vec::new();
        for (id, name) in names(layers, offset) {
            if !keep(id) {
                continue;
            }
            let id = id.val();
            for (key, t) in self.tensors.get(&name).into_iter().flatten() {
                tensors.push(burn_pack::Tensor::new(
                    format!("{id}.{key}"),
                    t.dtype,
                    t.shape.clone(),
                    Some(id),
                    Bytes::from_bytes_vec(t.bytes.clone()),
                ));
            }
            for (key, value) in self.scalars.get(&name).into_iter().flatten() {
                writer_scalars.push((format!("{id}.{key}"), *value));
            }
        }
        let mut writer = burn_pack::Writer::new(tensors);
        for (key, value) in &writer_scalars {
            writer = writer.with_scalar(key, *value);
        }
        let bytes = writer.into_bytes().map_err(|e| e.to_string())?;
        let current = std::mem::replace(optimizer, burn::optim::SgdConfig::new().init());
        *optimizer = current.from_bytes(bytes).map_err(|e| e.to_string())?;
        Ok(())
    }
}
