//! burn's optimizers behind [`OptimizerConfig`]: the config types it wraps, building an
//! optimizer from it, and converting burn's configs into it.

use burn::optim::momentum::MomentumConfig;
pub(crate) use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer, SgdConfig};

use crate::optimizer::OptimizerConfig;

/// burn's SGD config with momentum `momentum` (dampening 0, no Nesterov).
pub(crate) fn sgd_momentum(momentum: f64) -> SgdConfig {
    SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_momentum(momentum)))
}

impl OptimizerConfig {
    /// A fresh optimizer state.
    pub fn init(&self) -> ModuleOptimizer {
        match self {
            OptimizerConfig::Sgd(c) => c.init(),
            OptimizerConfig::Adam(c) => c.init(),
            OptimizerConfig::AdamW(c) => c.init(),
        }
    }

    /// Parameter-sized state slots the optimizer keeps per parameter it updates: 0 for plain
    /// SGD, 1 for SGD with momentum, 2 for Adam and AdamW (first and second moments).
    pub fn state_slots(&self) -> u64 {
        match self {
            OptimizerConfig::Sgd(c) => {
                // burn keeps `SgdConfig::momentum` private; its serialized form shows it.
                let json = serde_json::to_value(c).ok();
                let momentum = json.as_ref().and_then(|j| j.get("momentum"));
                u64::from(momentum.is_some_and(|m| !m.is_null()))
            }
            OptimizerConfig::Adam(_) | OptimizerConfig::AdamW(_) => 2,
        }
    }
}

impl From<SgdConfig> for OptimizerConfig {
    fn from(c: SgdConfig) -> Self {
        OptimizerConfig::Sgd(c)
    }
}

impl From<AdamConfig> for OptimizerConfig {
    fn from(c: AdamConfig) -> Self {
        OptimizerConfig::Adam(c)
    }
}

impl From<AdamWConfig> for OptimizerConfig {
    fn from(c: AdamWConfig) -> Self {
        OptimizerConfig::AdamW(c)
    }
}
