//! 1F1B (PipeDream-Flush).
//!
//! Stage s runs `min(p − s − 1, m)` warm-up forwards, then alternates one forward and one backward
//! until every forward is issued, then drains the remaining backwards:
//!
//! ```text
//! p = 3, m = 4      program (in order)
//! stage 0 | F0 F1 F2 B0 F3 B1 B2 B3
//! stage 1 | F0 F1 B0 F2 B1 F3 B2 B3
//! stage 2 | F0 B0 F1 B1 F2 B2 F3 B3
//! ```
//! At most `p − s` micro-batches are stashed on stage s (GPipe: m), with the same bubble as GPipe.
//! m < p works: the warm-up is cut at m and there is no steady phase.

use crate::action::Action;
use crate::id::{MicroBatchId, StageId};

/// The compute program of `stage` in a pipeline of `stages` stages.
pub(crate) fn program(stage: StageId, stages: usize, micro_batches: usize) -> Vec<Action> {
    let warm_up = (stages - stage.index() - 1).min(micro_batches);
    let f = |i: usize| Action::forward(stage, MicroBatchId::from(i));
    let b = |i: usize| Action::backward(stage, MicroBatchId::from(i));
    let mut program = Vec::with_capacity(2 * micro_batches);
    program.extend((0..warm_up).map(f));
    for i in 0..micro_batches - warm_up {
        program.push(f(warm_up + i));
        program.push(b(i));
    }
    program.extend((micro_batches - warm_up..micro_batches).map(b));
    program
}
