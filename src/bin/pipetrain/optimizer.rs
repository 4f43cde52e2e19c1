//! `--optimizer` and its settings: the optimizer every stage runs.

use pipetrain::OptimizerConfig;

use crate::args::{OptimizerKind, TrainArgs};

/// The optimizer of the flags and its name for the banner.
pub fn of(args: &TrainArgs) -> (OptimizerConfig, &'static str) {
    match args.optimizer {
        OptimizerKind::Sgd => (OptimizerConfig::sgd(), "sgd"),
        OptimizerKind::SgdMomentum => (OptimizerConfig::sgd_momentum(0.9), "sgd-momentum"),
        OptimizerKind::Adam => (OptimizerConfig::adam(), "adam"),
        OptimizerKind::Adamw => (OptimizerConfig::adamw(), "adamw"),
    }
}
