//! ZeRO levels: how much of a stage's training state its replicas shard, and what that adds
//! to a lowered plan.
//!
//! | level | sharded across a stage's replicas | actions [`lower`](crate::lower) adds |
//! |-------|-----------------------------------|--------------------------------------|
//! | 0     | nothing                           | `sAR` (all-reduce), `sOPT`           |
//! | 1     | optimizer state                   | `sAR` (a reduce to the owners), `sOPT` (then the owners broadcast) |
//! | 2     | + gradients                       | `sRG` after the stage's last weight gradient, `sOPT`, `sUS` (the owners' updated values to every replica) |
//! | 3     | + parameters                      | `sUS` before the stage's first computation, `sRS` after its last, `sRG`, `sOPT` |
//!
//! Each parameter of a stage has one owner replica (balanced by size): the owner keeps its
//! summed gradient, its optimizer state and, at level 3, its value between the stage's
//! computations; the others hold it only between an `sUS` and the `sRS` that follows.

use std::fmt;

/// A ZeRO level (0–3): what each replica of a stage keeps of the parameters it does not own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Zero {
    /// Every replica keeps everything (plain data parallelism).
    #[default]
    Off,
    /// Level 1: optimizer state sharded.
    OptimizerState,
    /// Level 2: gradients sharded too: reduced to their owners as soon as the stage's last
    /// weight gradient of the step is done.
    Gradients,
    /// Level 3: parameters sharded too: whole only between an unshard and a reshard.
    Parameters,
}

impl Zero {
    /// Every level, 0 to 3.
    pub const ALL: [Zero; 4] = [
        Zero::Off,
        Zero::OptimizerState,
        Zero::Gradients,
        Zero::Parameters,
    ];

    /// The level from its number, if it is 0–3.
    pub fn from_level(level: u8) -> Option<Self> {
        Self::ALL.get(usize::from(level)).copied()
    }

    /// The level's number.
    pub const fn level(self) -> u8 {
        self as u8
    }

    /// Whether the optimizer state is sharded (levels 1–3).
    pub const fn shards_optimizer_state(self) -> bool {
        self.level() >= 1
    }

    /// Whether the gradients are sharded (levels 2–3): the plan reduces them with `sRG`.
    pub const fn shards_gradients(self) -> bool {
        self.level() >= 2
    }

    /// Whether the parameters are sharded (level 3): the plan brackets a stage's computation
    /// with `sUS` and `sRS`.
    pub const fn shards_parameters(self) -> bool {
        self.level() >= 3
    }
}

impl fmt::Display for Zero {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ZeRO-{}", self.level())
    }
}

#[cfg(test)]
mod tests {
    use super::Zero;

    #[test]
    fn levels_round_trip_and_nest() {
        for (i, z) in Zero::ALL.into_iter().enumerate() {
            assert_eq!(Zero::from_level(i as u8), Some(z));
            assert_eq!(usize::from(z.level()), i);
        }
        assert_eq!(Zero::from_level(4), None);
        assert!(!Zero::OptimizerState.shards_gradients());
        assert!(Zero::Gradients.shards_gradients() && !Zero::Gradients.shards_parameters());
        assert!(Zero::Parameters.shards_optimizer_state() && Zero::Parameters.shards_parameters());
    }
}
