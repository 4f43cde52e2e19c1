//! [`OptimizerState`]: optimizer state by full-model parameter name, merged over workers and
//! split back among them.

use std::collections::BTreeMap;

use super::format::names;
use crate::adapter::{self, ModuleOptimizer, ParamId, StateScalar, StateTensor};
use crate::model::layer::Layer;

/// Optimizer state by parameter name, then by key.
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    pub(super) optimizer: String,
    pub(super) tensors: BTreeMap<String, BTreeMap<String, StateTensor>>,
    pub(super) scalars: BTreeMap<String, BTreeMap<String, StateScalar>>,
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
        let entries = adapter::export_state(optimizer)?;
        for (id, key, value) in entries.scalars {
            if let Some(name) = names.get(&id) {
                self.scalars
                    .entry(name.clone())
                    .or_default()
                    .entry(key)
                    .or_insert(value);
            }
        }
        for (id, key, tensor) in entries.tensors {
            if let Some(name) = names.get(&id) {
                self.tensors
                    .entry(name.clone())
                    .or_default()
                    .entry(key)
                    .or_insert(tensor);
            }
        }
        Ok(())
    }

    /// `optimizer` loaded with the entries of the parameters of `layers` for which `keep` is
    /// true.
    pub(super) fn restore<L: Layer>(
        &self,
        optimizer: &mut ModuleOptimizer,
        layers: &[L],
        offset: usize,
        keep: &dyn Fn(ParamId) -> bool,
    ) -> std::result::Result<(), String> {
        let mut tensors = Vec::new();
        let mut scalars = Vec::new();
        for (id, name) in names(layers, offset) {
            if !keep(id) {
                continue;
            }
            for (key, t) in self.tensors.get(&name).into_iter().flatten() {
                tensors.push((id, key.as_str(), t));
            }
            for (key, value) in self.scalars.get(&name).into_iter().flatten() {
                scalars.push((id, key.as_str(), *value));
            }
        }
        adapter::import_state(optimizer, tensors, scalars)
    }
}
