//! `--backward` and `--weight-group`: fused or split backward, as clap values.

use clap::ValueEnum;
use pipetrain::Backward;

/// How the backward runs, as `--backward` spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BackwardArg {
    /// Dense layers (the MLP's) by hand: input gradients at once, weight gradients batched over
    /// `--weight-group` micro-batches.
    #[default]
    Split,
    /// Autodiff computes every layer's input and weight gradients together, per micro-batch.
    Fused,
}

impl BackwardArg {
    /// The library setting, with `weight_group` micro-batches per weight-gradient pass (0: the
    /// whole step's).
    pub fn with_group(self, weight_group: usize) -> Backward {
        match self {
            BackwardArg::Split => Backward::Split { weight_group },
            BackwardArg::Fused => Backward::Fused,
        }
    }

    /// For the run's banner: `split`, `split (weight group 4)` or `fused`.
    pub fn describe(self, weight_group: usize) -> String {
        match self.with_group(weight_group) {
            Backward::Fused => "fused".to_string(),
            Backward::Split { weight_group: 0 } => "split".to_string(),
            Backward::Split { weight_group } => format!("split (weight group {weight_group})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use pipetrain::Backward;

    use super::BackwardArg;

    #[test]
    fn the_default_is_the_library_default() {
        assert_eq!(BackwardArg::default().with_group(0), Backward::default());
        assert_eq!(BackwardArg::Fused.with_group(3), Backward::Fused);
    }
}
