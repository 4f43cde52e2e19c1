//! DualPipeV (DeepSeek-V3's DualPipe folded into a V, arXiv 2412.19437; torch's
//! `ScheduleDualPipeV`): two chunks per rank placed as ZB-V's, rank r holding stages r and
//! 2p − 1 − r.
//!
//! In its steady phase each rank pairs a forward of one of its chunks with a backward of the
//! other, so that on hardware that can run them at once (one on the compute units, the other's
//! communication or a second stream) each hides the other. Around it, a warm-up of forwards (and
//! of split backwards, whose `W`s fill gaps) and a cool-down that switches to split backwards
//! halfway, rank by rank, to fill the drain with `W`s. Per rank r, with p ranks and m ≥ 2p
//! micro-batches, first chunk c0 = r, second c1 = 2p − 1 − r:
//!
//! ```text
//! 1. 2·(p − r − 1) × F(c0)
//! 2. (r + 1) × F(c0) F(c1)
//! 3. (p − r − 1) × I(c1) W(oldest pending) F(c1)
//! 4. (m − 2p + r + 1) × F(c0)+B(c1) F(c1)+B(c0)      (pairs: forward of one chunk, backward of
//! 5. (p − r − 1) × B(c1) F(c1)+B(c0)                  the other; the last rank's first pair
//!                                                      is not one)
//! 6. (r + 1) × X(c1) X(c0): X = B, then I from the middle on (odd r from c1's, even r from
//!    c0's turn)
//! 7. (p − r − 1) × W(oldest pending) X(c0)
//! 8. (r + 1) × W(oldest pending)
//! ```
//! Each pair is one [`ActionKind::Overlap`] (`0F3+3B1`, PyTorch's `(0F3;3B1)OVERLAP_F_B`), so
//! the plan is PyTorch's order, pairs included. A worker that can overlap takes max(F, B) for a
//! pair; pipetrain's workers cannot, and run the forward, then the backward (F + B): the
//! simulator charges either ([`Costs::overlaps`](crate::Costs::overlaps); docs/schedules.md
//! gives both).

use std::collections::VecDeque;

use crate::action::{Action, ActionKind};
use crate::id::{MicroBatchId, StageId};

/// A rank's program under construction: the next micro-batch of each (chunk, kind) and the
/// `W`s its `I`s left pending.
struct Builder {
    chunks: [usize; 2],
    next: [[usize; 3]; 2],
    pending: VecDeque<(usize, usize)>,
    program: Vec<Action>,
}

/// The kinds counted apart: forward, input (a full backward counts here too), weight.
fn slot(kind: ActionKind) -> usize {
    match kind {
        ActionKind::Forward => 0,
        ActionKind::Backward | ActionKind::BackwardInput => 1,
        _ => 2,
    }
}

impl Builder {
    /// The next `kind` of chunk `c` (0 or 1); a `B` also completes its micro-batch's `W`.
    fn push(&mut self, c: usize, kind: ActionKind) {
        let mb = self.next[c][slot(kind)];
        self.next[c][slot(kind)] += 1;
        match kind {
            ActionKind::Backward => self.next[c][2] += 1,
            ActionKind::BackwardInput => self.pending.push_back((c, mb)),
            _ => {}
        }
        let stage = StageId::from(self.chunks[c]);
        self.program
            .push(Action::new(stage, kind, MicroBatchId::from(mb)));
    }

    /// The next forward of chunk `f` overlapped with the next backward of chunk `b`.
    fn overlap(&mut self, f: usize, b: usize) {
        self.push(f, ActionKind::Forward);
        self.push(b, ActionKind::Backward);
        let backward = self.program.pop().expect("just pushed");
        let forward = self.program.pop().expect("just pushed");
        self.program.push(Action::overlap(forward, backward));
    }

    /// The oldest pending `W`, if any.
    fn weight(&mut self) {
        if let Some((c, mb)) = self.pending.pop_front() {
            self.next[c][2] += 1;
            let stage = StageId::from(self.chunks[c]);
            self.program.push(Action::new(
                stage,
                ActionKind::BackwardWeight,
                MicroBatchId::from(mb),
            ));
        }
    }
}

/// The compute program of `rank` for `ranks` ranks and `micro_batches` ≥ 2·`ranks`
/// micro-batches.
pub(crate) fn program(rank: usize, ranks: usize, micro_batches: usize) -> Vec<Action> {
    use ActionKind::{Backward as B, BackwardInput as I, Forward as F};
    let (p, r, m) = (ranks, rank, micro_batches);
    let mut b = Builder {
        chunks: [r, 2 * p - 1 - r],
        next: [[0; 3]; 2],
        pending: VecDeque::new(),
        program: Vec::with_capacity(6 * m),
    };
    let rest = p - r - 1;
    for _ in 0..2 * rest {
        b.push(0, F);
    }
    for _ in 0..=r {
        b.push(0, F);
        b.push(1, F);
    }
    for _ in 0..rest {
        b.push(1, I);
        b.weight();
        b.push(1, F);
    }
    for i in 0..m + r + 1 - 2 * p {
        if i == 0 && rest == 0 {
            // The last rank's first pair is not one (as in PyTorch).
            b.push(0, F);
            b.push(1, B);
        } else {
            b.overlap(0, 1);
        }
        b.overlap(1, 0);
    }
    for _ in 0..rest {
        b.push(1, B);
        b.overlap(1, 0);
    }
    let mut split = false;
    for i in 0..=r {
        let half = i == r.div_ceil(2);
        split |= half && r % 2 == 1;
        b.push(1, if split { I } else { B });
        split |= half && r % 2 == 0;
        b.push(0, if split { I } else { B });
    }
    for _ in 0..rest {
        b.weight();
        b.push(0, if split { I } else { B });
    }
    while !b.pending.is_empty() {
        b.weight();
    }
    b.program
}
