//! torch.optim's settings for SGD, Adam and AdamW, with PyTorch's defaults and checks.

use crate::error::EngineError;

/// `torch.optim.SGD`'s settings; the default is PyTorch's (all zero, no Nesterov).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SgdOptions {
    /// Momentum factor μ (0: plain SGD).
    pub momentum: f64,
    /// Dampening τ of the momentum buffer's gradient term.
    pub dampening: f64,
    /// Nesterov momentum (needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// L2 penalty λ added to the gradient (`g + λw`).
    pub weight_decay: f64,
}

/// `torch.optim.Adam`'s and `AdamW`'s settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamOptions {
    /// `(β₁, β₂)`, the moments' decay rates.
    pub betas: (f64, f64),
    /// ε, added to `√v̂`.
    pub eps: f64,
    /// Adam: L2 penalty added to the gradient; AdamW: decoupled decay `w(1 − lr·λ)`.
    pub weight_decay: f64,
}

impl AdamOptions {
    /// `torch.optim.Adam`'s defaults: betas (0.9, 0.999), eps 1e-8, weight decay 0.
    pub fn adam() -> Self {
        Self {
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// `torch.optim.AdamW`'s defaults: Adam's, with weight decay 1e-2.
    pub fn adamw() -> Self {
        Self {
            weight_decay: 1e-2,
            ..Self::adam()
        }
    }

    pub(crate) fn check(&self) -> Result<(), EngineError> {
        for (setting, beta) in [("beta1", self.betas.0), ("beta2", self.betas.1)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(refused(setting, beta, "must be in [0, 1), e.g. 0.9"));
            }
        }
        // Stricter than torch.optim, which takes 0: the update is m / (sqrt(v) + eps), so a
        // zero eps turns every element whose gradients were all 0 into 0 / 0 = NaN at step 1.
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(refused(
                "eps",
                self.eps,
                "must be a finite number > 0 (the update divides by sqrt(v) + eps, and an \
                 element with zero gradients makes 0 / 0 = NaN with eps 0), e.g. 1e-8",
            ));
        }
        // The update runs in f32: a smaller eps is 0 or a subnormal there, which the kernels
        // flush to 0, and the same 0 / 0 makes the weights NaN after the first step
        // (`--eps 1e-45` was then blamed on the learning rate).
        if self.eps < f64::from(f32::MIN_POSITIVE) || self.eps > f64::from(f32::MAX) {
            return Err(refused(
                "eps",
                self.eps,
                "must be within f32's normal range, 1.2e-38 to 3.4e38 (the update computes in \
                 f32, where a smaller eps is flushed to 0 and an element with zero gradients \
                 makes 0 / 0 = NaN), e.g. 1e-8",
            ));
        }
        non_negative("weight_decay", self.weight_decay)
    }
}

impl SgdOptions {
    pub(crate) fn check(&self) -> Result<(), EngineError> {
        non_negative("momentum", self.momentum)?;
        non_negative("dampening", self.dampening)?;
        non_negative("weight_decay", self.weight_decay)?;
        if self.nesterov && (self.momentum == 0.0 || self.dampening != 0.0) {
            return Err(refused(
                "nesterov with momentum",
                self.momentum,
                "Nesterov momentum needs momentum > 0 and dampening 0, e.g. momentum 0.9",
            ));
        }
        Ok(())
    }
}

/// `setting = value`, which torch.optim would refuse: an [`EngineError::OptimizerSetting`].
fn refused(setting: &'static str, value: f64, remedy: &'static str) -> EngineError {
    EngineError::OptimizerSetting {
        setting,
        value,
        remedy,
    }
}

/// A finite number >= 0 that f32, where the update computes, holds: above 3.4e38 it is inf
/// there, and the first update makes the weights NaN (`--weight-decay 1e300` was then blamed on
/// the learning rate).
fn non_negative(setting: &'static str, value: f64) -> Result<(), EngineError> {
    match value.is_finite() && value >= 0.0 {
        true if value <= f64::from(f32::MAX) => Ok(()),
        true => Err(refused(
            setting,
            value,
            "must be at most f32's largest number, 3.4e38: the update computes in f32, where it \
             is inf",
        )),
        false => Err(refused(setting, value, "must be a finite number >= 0")),
    }
}
