//! burn's optimizers behind [`OptimizerConfig`](crate::OptimizerConfig): the config types it
//! wraps, each built from torch's settings, a fresh optimizer from each, and what burn keeps
//! private about them.

use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
pub(crate) use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer, SgdConfig};

/// burn's SGD config for torch's settings (no momentum state when momentum is 0, as torch).
pub(crate) fn sgd(momentum: f64, dampening: f64, nesterov: bool, weight_decay: f64) -> SgdConfig {
    let momentum = (momentum != 0.0).then(|| {
        MomentumConfig::new()
            .with_momentum(momentum)
            .with_dampening(dampening)
            .with_nesterov(nesterov)
    });
    SgdConfig::new()
        .with_momentum(momentum)
        .with_weight_decay(decay(weight_decay))
}

/// burn's Adam config for torch's settings.
pub(crate) fn adam(betas: (f64, f64), eps: f64, weight_decay: f64) -> AdamConfig {
    AdamConfig::new()
        .with_beta_1(betas.0 as f32)
        .with_beta_2(betas.1 as f32)
        .with_epsilon(eps as f32)
        .with_weight_decay(decay(weight_decay))
}

/// burn's AdamW config for torch's settings.
pub(crate) fn adamw(betas: (f64, f64), eps: f64, weight_decay: f64) -> AdamWConfig {
    AdamWConfig::new()
        .with_beta_1(betas.0 as f32)
        .with_beta_2(betas.1 as f32)
        .with_epsilon(eps as f32)
        .with_weight_decay(weight_decay as f32)
}

/// An L2 penalty added to the gradient, `None` for 0.
fn decay(weight_decay: f64) -> Option<WeightDecayConfig> {
    (weight_decay != 0.0).then(|| WeightDecayConfig::new(weight_decay as f32))
}

/// A fresh SGD optimizer state.
pub(crate) fn init_sgd(config: &SgdConfig) -> ModuleOptimizer {
    config.init()
}

/// A fresh Adam optimizer state.
pub(crate) fn init_adam(config: &AdamConfig) -> ModuleOptimizer {
    config.init()
}

/// A fresh AdamW optimizer state.
pub(crate) fn init_adamw(config: &AdamWConfig) -> ModuleOptimizer {
    config.init()
}

/// Whether an SGD config keeps a momentum buffer (burn keeps `SgdConfig::momentum` private;
/// its serialized form shows it).
pub(crate) fn sgd_has_momentum(config: &SgdConfig) -> bool {
    let json = serde_json::to_value(config).ok();
    let momentum = json.as_ref().and_then(|j| j.get("momentum"));
    momentum.is_some_and(|m| !m.is_null())
}
