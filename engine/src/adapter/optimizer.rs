//! burn's optimizers behind [`OptimizerConfig`]: the config types it wraps, building an
//! optimizer from it, and converting burn's configs into it.

use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
pub(crate) use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer, SgdConfig};

use crate::optimizer::{AdamOptions, OptimizerConfig, SgdOptions};

/// burn's SGD config for torch's settings (no momentum state when momentum is 0, as torch).
pub(crate) fn sgd(o: &SgdOptions) -> SgdConfig {
    let momentum = (o.momentum != 0.0).then(|| {
        MomentumConfig::new()
            .with_momentum(o.momentum)
            .with_dampening(o.dampening)
            .with_nesterov(o.nesterov)
    });
    SgdConfig::new()
        .with_momentum(momentum)
        .with_weight_decay(decay(o.weight_decay))
}

/// burn's Adam config for torch's settings.
pub(crate) fn adam(o: &AdamOptions) -> AdamConfig {
    AdamConfig::new()
        .with_beta_1(o.betas.0 as f32)
        .with_beta_2(o.betas.1 as f32)
        .with_epsilon(o.eps as f32)
        .with_weight_decay(decay(o.weight_decay))
}

/// burn's AdamW config for torch's settings.
pub(crate) fn adamw(o: &AdamOptions) -> AdamWConfig {
    AdamWConfig::new()
        .with_beta_1(o.betas.0 as f32)
        .with_beta_2(o.betas.1 as f32)
        .with_epsilon(o.eps as f32)
        .with_weight_decay(o.weight_decay as f32)
}

/// An L2 penalty added to the gradient, `None` for 0.
fn decay(weight_decay: f64) -> Option<WeightDecayConfig> {
    (weight_decay != 0.0).then(|| WeightDecayConfig::new(weight_decay as f32))
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
