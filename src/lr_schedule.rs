//! Learning-rate schedules: the learning rate of every optimizer step, equal step by step to
//! the matching `torch.optim.lr_scheduler` (stepped once per optimizer step), and
//! [`Pipeline::set_learning_rate`](crate::Pipeline::set_learning_rate) to apply one.
//!
//! With base rate `lr`, warm-up `W` and `t` the 0-based optimizer step:
//!
//! | steps | learning rate | PyTorch |
//! |---|---|---|
//! | `t < W` | `lr · (t + 1) / W` | `LinearLR(opt, start_factor=1/W, end_factor=1, total_iters=W-1)` |
//! | then, `u = t − W`, `T = steps − W`: | | `SequentialLR(opt, [warm-up, decay], milestones=[W])` |
//! | constant | `lr` | `ConstantLR(opt, factor=1)` |
//! | cosine | `min + (lr − min)(1 + cos(πu/T))/2` | `CosineAnnealingLR(opt, T_max=T, eta_min=min)` |
//! | linear | `lr (1 + (min/lr − 1) min(u, T)/T)` | `LinearLR(opt, 1.0, min/lr, total_iters=T)` |
//! | step | `lr · γ^⌊u/k⌋` | `StepLR(opt, step_size=k, gamma=γ)` |
//!
//! A schedule is a function of the step: a resumed run (same schedule, same total steps)
//! continues with exactly the rates the uninterrupted run would have used.

use std::fmt;

use crate::commands::plan::compact;

/// What follows the warm-up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decay {
    /// The base rate throughout.
    Constant,
    /// Cosine annealing from the base rate to `min_lr` at the run's last step.
    Cosine {
        /// The run's total optimizer steps (warm-up included).
        steps: u64,
        /// The rate it anneals to.
        min_lr: f64,
    },
    /// A straight line from the base rate to `min_lr` at the run's end.
    Linear {
        /// The run's total optimizer steps (warm-up included).
        steps: u64,
        /// The rate it ends at.
        min_lr: f64,
    },
    /// The rate times `gamma` every `every` steps.
    Step {
        /// Steps between decays.
        every: u64,
        /// The factor.
        gamma: f64,
    },
}

/// A learning-rate schedule: a linear warm-up, then a [`Decay`].
///
/// ```
/// use pipetrain::{Decay, LrSchedule};
/// let s = LrSchedule { warmup: 2, decay: Decay::Cosine { steps: 6, min_lr: 0.0 } };
/// let rates: Vec<f64> = (0..6).map(|t| s.at(1.0, t)).collect();
/// assert_eq!(&rates[..3], &[0.5, 1.0, 1.0]);
/// assert!((rates[4] - 0.5).abs() < 1e-12); // cos(π/2)
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LrSchedule {
    /// Warm-up steps (0: none).
    pub warmup: u64,
    /// After the warm-up.
    pub decay: Decay,
}

impl Default for LrSchedule {
    fn default() -> Self {
        Self {
            warmup: 0,
            decay: Decay::Constant,
        }
    }
}

impl LrSchedule {
    /// The learning rate of optimizer step `step` (0-based) for base rate `lr`.
    pub fn at(&self, lr: f64, step: u64) -> f64 {
        if step < self.warmup {
            return lr * (step + 1) as f64 / self.warmup as f64;
        }
        let u = (step - self.warmup) as f64;
        match self.decay {
            Decay::Constant => lr,
            Decay::Cosine { steps, min_lr } => {
                let t = steps.saturating_sub(self.warmup).max(1) as f64;
                min_lr + (lr - min_lr) * (1.0 + (std::f64::consts::PI * u / t).cos()) / 2.0
            }
            Decay::Linear { steps, min_lr } => {
                let t = steps.saturating_sub(self.warmup).max(1) as f64;
                lr * (1.0 + (min_lr / lr - 1.0) * u.min(t) / t)
            }
            Decay::Step { every, gamma } => lr * gamma.powi((u as u64 / every.max(1)) as i32),
        }
    }

    /// Checks the schedule against base rate `lr`: a minimum in `[0, lr]`, a step length of at
    /// least 1, a positive finite gamma, a warm-up shorter than the run.
    ///
    /// # Errors
    /// The setting that is wrong, with its value and a remedy.
    pub fn check(&self, lr: f64) -> std::result::Result<(), String> {
        match self.decay {
            Decay::Cosine { steps, min_lr } | Decay::Linear { steps, min_lr } => {
                if !(min_lr.is_finite() && (0.0..=lr).contains(&min_lr)) {
                    return Err(format!(
                        "min_lr {}: must be in [0, lr = {}], e.g. lr / 100",
                        compact(min_lr),
                        compact(lr)
                    ));
                }
                if self.warmup >= steps {
                    return Err(format!(
                        "warm-up of {} steps leaves none of the {steps} to decay over; use fewer \
                         warm-up steps",
                        self.warmup
                    ));
                }
            }
            Decay::Step { every, gamma } => {
                if every == 0 || !(gamma.is_finite() && gamma > 0.0) {
                    return Err(format!(
                        "step decay every {every} steps by {}: give at least 1 step and a \
                         positive factor, e.g. every 30 steps by 0.1",
                        compact(gamma)
                    ));
                }
            }
            Decay::Constant => {}
        }
        Ok(())
    }

    /// [`check`](Self::check), and every rate of a run of `steps` optimizer steps finite: a
    /// step decay by a factor above 1 grows the rate, and `lr · γ^n` can overflow before the
    /// run ends (`--lr-gamma 1e300` trained 2 steps, then refused the rate of the third as a
    /// setting of the learning rate).
    ///
    /// ```
    /// use pipetrain::{Decay, LrSchedule};
    /// let s = LrSchedule { warmup: 0, decay: Decay::Step { every: 1, gamma: 1e300 } };
    /// assert!(s.check_run(1e-3, 2).is_ok());
    /// let e = s.check_run(1e-3, 4).unwrap_err();
    /// assert!(e.contains("step 3's rate") && e.contains("1e297"), "{e}");
    /// ```
    ///
    /// # Errors
    /// What [`check`](Self::check) refuses; the first step whose rate is not finite.
    pub fn check_run(&self, lr: f64, steps: u64) -> std::result::Result<(), String> {
        self.check(lr)?;
        let Decay::Step { every, gamma } = self.decay else {
            return Ok(());
        };
        // The rate grows with the step: the last one is the largest.
        if steps == 0 || self.at(lr, steps - 1).is_finite() {
            return Ok(());
        }
        // The first decay whose rate overflows, and the last finite one.
        let n = (1..)
            .find(|&n| !(lr * gamma.powi(n)).is_finite())
            .unwrap_or(1);
        let step = self.warmup + u64::from(n.unsigned_abs()) * every.max(1) + 1;
        Err(format!(
            "step decay by {} every {every} steps makes step {step}'s rate lr × {}^{n}, above \
             f64's largest (the last finite one is {}); every rate of the {steps} steps must be \
             finite: use a smaller factor or fewer steps",
            compact(gamma),
            compact(gamma),
            compact(lr * gamma.powi(n - 1)),
        ))
    }
}

impl fmt::Display for LrSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.decay {
            Decay::Constant => write!(f, "constant")?,
            Decay::Cosine { steps, min_lr } => {
                write!(f, "cosine to {} at step {steps}", compact(min_lr))?;
            }
            Decay::Linear { steps, min_lr } => {
                write!(f, "linear to {} at step {steps}", compact(min_lr))?;
            }
            Decay::Step { every, gamma } => write!(f, "x{} every {every} steps", compact(gamma))?,
        }
        if self.warmup > 0 {
            write!(f, " after {} warm-up steps", self.warmup)?;
        }
        Ok(())
    }
}
