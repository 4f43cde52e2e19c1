//! GPipe fill-drain.
//!
//! Every stage runs all m forwards, then all m backwards. With p = 3, m = 4 and unit costs the
//! clock ticks look like the GPipe paper's figure (F = forward, B = backward, `.` = bubble):
//!
//! ```text
//! stage 0 | F0 F1 F2 F3 .  .  .  .  B0 B1 B2 B3
//! stage 1 | .  F0 F1 F2 F3 .  .  B0 B1 B2 B3 .
//! stage 2 | .  .  F0 F1 F2 F3 B0 B1 B2 B3 .  .
//! ```
//! (drawn by [`crate::render::timeline`]; golden files in `tests/golden/`). Backwards run in ascending micro-batch order, the same
//! order as 1F1B, so gradients accumulate in the same order and the two schedules are bitwise
//! equal.

use crate::action::Action;
use crate::id::{MicroBatchId, StageId};

/// The compute program of `stage`: F0 … F(m−1), then B0 … B(m−1).
pub(crate) fn program(stage: StageId, micro_batches: usize) -> Vec<Action> {
    let forwards = MicroBatchId::range(micro_batches).map(|mb| Action::forward(stage, mb));
    let backwards = MicroBatchId::range(micro_batches).map(|mb| Action::backward(stage, mb));
    forwards.chain(backwards).collect()
}
