//! Optimizer choice: burn's optimizers, one instance per stage, with PyTorch's settings and
//! defaults ([`SgdOptions`], [`AdamOptions`]). Building one, and converting burn's configs into
//! an [`OptimizerConfig`], go through the adapter (`adapter/optimizer.rs`).
//!
//! burn 0.22.1's update rules are torch.optim's, checked term by term: SGD's weight decay
//! (`g + λw`), momentum buffer (`b = μb + (1 − τ)g`, the first step `b = g`) and Nesterov
//! (`g + μb`); Adam's L2 weight decay, bias corrections and ε added to `√v̂` (burn folds the
//! corrections into one factor, `m·√(1−β₂ᵗ)/(1−β₁ᵗ) / (√v + ε√(1−β₂ᵗ))`, the same value);
//! AdamW's decoupled decay `w(1 − lr·λ)` before the Adam step. Only the defaults differ
//! (burn's ε 1e-5, AdamW λ 1e-4, momentum dampening 0.1): these constructors use PyTorch's.

use crate::adapter::{self, AdamConfig, AdamWConfig, ModuleOptimizer, SgdConfig};
use crate::error::EngineError;
pub use crate::optim::options::{AdamOptions, SgdOptions};

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
/// use pipetrain_engine::{AdamOptions, SgdOptions};
/// let nesterov = SgdOptions { momentum: 0.9, nesterov: true, ..SgdOptions::default() };
/// assert!(OptimizerConfig::torch_sgd(nesterov).is_ok());
/// let bad = SgdOptions { nesterov: true, ..SgdOptions::default() };
/// assert!(OptimizerConfig::torch_sgd(bad).is_err()); // Nesterov needs momentum
/// assert_eq!(AdamOptions::adamw().weight_decay, 1e-2);
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
        OptimizerConfig::Sgd(Self::sgd_config(&SgdOptions {
            momentum,
            ..SgdOptions::default()
        }))
    }

    /// Adam with PyTorch's defaults ([`AdamOptions::adam`]).
    pub fn adam() -> Self {
        OptimizerConfig::Adam(Self::adam_config(&AdamOptions::adam()))
    }

    /// AdamW with PyTorch's defaults ([`AdamOptions::adamw`]).
    pub fn adamw() -> Self {
        OptimizerConfig::AdamW(Self::adamw_config(&AdamOptions::adamw()))
    }

    /// `torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov)`.
    ///
    /// # Errors
    /// A negative or non-finite setting, or Nesterov without momentum or with dampening (torch
    /// refuses those too).
    pub fn torch_sgd(options: SgdOptions) -> Result<Self, EngineError> {
        options.check()?;
        Ok(OptimizerConfig::Sgd(Self::sgd_config(&options)))
    }

    /// `torch.optim.Adam(params, lr, betas, eps, weight_decay)`.
    ///
    /// # Errors
    /// A beta outside `[0, 1)`, or a negative or non-finite ε or weight decay.
    pub fn torch_adam(options: AdamOptions) -> Result<Self, EngineError> {
        options.check()?;
        Ok(OptimizerConfig::Adam(Self::adam_config(&options)))
    }

    /// `torch.optim.AdamW(params, lr, betas, eps, weight_decay)`.
    ///
    /// # Errors
    /// As [`torch_adam`](Self::torch_adam).
    pub fn torch_adamw(options: AdamOptions) -> Result<Self, EngineError> {
        options.check()?;
        Ok(OptimizerConfig::AdamW(Self::adamw_config(&options)))
    }

    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            OptimizerConfig::Sgd(_) => "sgd",
            OptimizerConfig::Adam(_) => "adam",
            OptimizerConfig::AdamW(_) => "adamw",
        }
    }

    fn sgd_config(o: &SgdOptions) -> SgdConfig {
        adapter::sgd(o.momentum, o.dampening, o.nesterov, o.weight_decay)
    }

    fn adam_config(o: &AdamOptions) -> AdamConfig {
        adapter::adam(o.betas, o.eps, o.weight_decay)
    }

    fn adamw_config(o: &AdamOptions) -> AdamWConfig {
        adapter::adamw(o.betas, o.eps, o.weight_decay)
    }
}

impl OptimizerConfig {
    /// A fresh optimizer state.
    pub fn init(&self) -> ModuleOptimizer {
        match self {
            OptimizerConfig::Sgd(c) => adapter::init_sgd(c),
            OptimizerConfig::Adam(c) => adapter::init_adam(c),
            OptimizerConfig::AdamW(c) => adapter::init_adamw(c),
        }
    }

    /// Parameter-sized state slots the optimizer keeps per parameter it updates: 0 for plain
    /// SGD, 1 for SGD with momentum, 2 for Adam and AdamW (first and second moments).
    pub fn state_slots(&self) -> u64 {
        match self {
            OptimizerConfig::Sgd(c) => u64::from(adapter::sgd_has_momentum(c)),
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
