//! ZB-H1, the first handcrafted schedule of *Zero Bubble Pipeline Parallelism* (Qi et al., 2023).
//!
//! The backward is split: `I` (input gradient, which the upstream stage waits for) and `W`
//! (weight gradient, which nothing downstream waits for). Stage s runs 1F1B's warm-up of
//! `p − s − 1` forwards, then one iteration per micro-batch: `F` (while forwards remain), `I`,
//! and — from iteration s on — the oldest pending `W`. Stage s thus holds back its first s
//! `W`s and runs them at the end of its program, where 1F1B's stage s would idle waiting for the
//! upstream stages' last backwards: the last stage holds back p − 1 of them, the first none.
//!
//! ```text
//! p = 3, m = 4, F = I = W = 1 (render::timeline)
//! stage 0 | F0 F1 F2 .  .  I0 W0 F3 I1 W1 I2 W2 I3 W3
//! stage 1 | .  F0 F1 .  I0 F2 I1 W0 F3 I2 W1 I3 W2 W3
//! stage 2 | .  .  F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3
//! ```
//! With T_F = T_I = T_W and m ≥ p each stage idles (p − 1)·T_F instead of 1F1B's 3·(p − 1)·T_F:
//! a third of the bubble, makespan (3m + p − 1)·T_F (with m < p, at most two thirds: there are
//! too few `W`s to fill the drain). Memory: a micro-batch's activations are held from its `F` until its `W`; stage
//! s holds up to `min(p, m)` of them (1F1B: `p − s`), so the most any stage holds — the peak
//! memory of the pipeline — is 1F1B's, `min(p, m)` on stage 0. Every stage runs its `I`s and
//! `W`s in ascending micro-batch order, as 1F1B and GPipe run their `B`s: with one weight
//! gradient per `W` the three schedules accumulate in the same order and are bitwise equal.

use crate::action::{Action, ActionKind};
use crate::id::{MicroBatchId, StageId};

/// The compute program of `stage` in a pipeline of `stages` stages.
pub(crate) fn program(stage: StageId, stages: usize, micro_batches: usize) -> Vec<Action> {
    let s = stage.index();
    let m = micro_batches;
    let warm_up = (stages - s - 1).min(m);
    let at = |kind, i: usize| Action::new(stage, kind, MicroBatchId::from(i));
    let mut program = Vec::with_capacity(3 * m);
    program.extend((0..warm_up).map(|i| at(ActionKind::Forward, i)));
    let mut weights = 0;
    for i in 0..m {
        if warm_up + i < m {
            program.push(at(ActionKind::Forward, warm_up + i));
        }
        program.push(at(ActionKind::BackwardInput, i));
        if i >= s {
            program.push(at(ActionKind::BackwardWeight, weights));
            weights += 1;
        }
    }
    program.extend((weights..m).map(|i| at(ActionKind::BackwardWeight, i)));
    program
}
