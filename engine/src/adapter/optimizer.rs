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
