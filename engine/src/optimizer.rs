//! Optimizer choice: burn's optimizers, one instance per stage. Building one, and converting
//! burn's configs into an [`OptimizerConfig`], live in the adapter (`adapter/optimizer.rs`).

use crate::adapter::{self, AdamConfig, AdamWConfig, SgdConfig};

/// Which burn optimizer each stage runs. Every stage gets its own instance over its own
/// parameters; since these optimizers are element-wise, that equals one optimizer over the whole
/// model (a global-norm gradient clip would not be, and is not offered).
///
/// ```
/// use pipetrain_engine::OptimizerConfig;
/// let adam: OptimizerConfig = burn::optim::AdamConfig::new().into();
/// let _state = adam.init();
/// let sgd = OptimizerConfig::sgd_momentum(0.9);
/// assert_eq!(sgd.name(), "sgd");
/// ```
#[derive(Debug)]
pub enum OptimizerConfig {
    /// Stochastic gradient descent (optionally with momentum inside the config).
    Sgd(SgdConfig),
    /// Adam.
    Adam(AdamConfig),
    /// AdamW (decoupled weight decay).
    AdamW(AdamWConfig),
}

impl Clone for OptimizerConfig {
    fn clone(&self) -> Self {
        match self {
            OptimizerConfig::Sgd(c) => OptimizerConfig::Sgd(c.clone()),
            OptimizerConfig::Adam(c) => OptimizerConfig::Adam(c.clone()),
            OptimizerConfig::AdamW(c) => OptimizerConfig::AdamW(c.clone()),
        }
    }
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig::Sgd(SgdConfig::new())
    }
}

impl OptimizerConfig {
    /// Plain SGD.
    pub fn sgd() -> Self {
        OptimizerConfig::Sgd(SgdConfig::new())
    }

    /// SGD with momentum `momentum` (dampening 0, no Nesterov).
    pub fn sgd_momentum(momentum: f64) -> Self {
        OptimizerConfig::Sgd(adapter::sgd_momentum(momentum))
    }

    /// Adam with burn's defaults.
    pub fn adam() -> Self {
        OptimizerConfig::Adam(AdamConfig::new())
    }

    /// AdamW with burn's defaults.
    pub fn adamw() -> Self {
        OptimizerConfig::AdamW(AdamWConfig::new())
    }

    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            OptimizerConfig::Sgd(_) => "sgd",
            OptimizerConfig::Adam(_) => "adam",
            OptimizerConfig::AdamW(_) => "adamw",
        }
    }
}
