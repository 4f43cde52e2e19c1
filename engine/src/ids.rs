//! The ids the whole engine shares, in a leaf that imports nothing of it: a message's [`Tag`]
//! (its [`Flow`] and micro-batch), which transports, collectives and errors all name. The
//! schedule's ids (`StageId`, `MicroBatchId`, `SkipRoute`) come from `pipetrain-schedules`.

use pipetrain_schedules::{Action, ActionKind, MicroBatchId, SkipRoute, StageId};

/// Which way a tensor flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// A forward activation, from stage s to s + 1.
    Activation,
    /// An input gradient, from stage s to s − 1.
    Gradient,
    /// The skips `stash` stashed for `pop`, straight from one to the other.
    Skip(SkipRoute),
    /// Their gradients, straight back from `pop` to `stash`.
    SkipGradient(SkipRoute),
}

impl Flow {
    /// The flow a transfer action moves: activations for `SF`/`RF`, gradients for `SB`/`RB`,
    /// skips for `SK`/`RK` and their gradients for `SKB`/`RKB` (between the action's stage and
    /// its peer).
    ///
    /// # Panics
    /// On an action that is not a transfer, or a skip transfer without a peer.
    pub fn of(action: &Action) -> Flow {
        let route = |stash, pop| SkipRoute { stash, pop };
        let peer = || action.peer.expect("a skip transfer names its peer");
        match action.kind {
            ActionKind::SendActivation | ActionKind::RecvActivation => Flow::Activation,
            ActionKind::SendGradient | ActionKind::RecvGradient => Flow::Gradient,
            ActionKind::SendSkip => Flow::Skip(route(action.stage, peer())),
            ActionKind::RecvSkip => Flow::Skip(route(peer(), action.stage)),
            ActionKind::SendSkipGradient => Flow::SkipGradient(route(peer(), action.stage)),
            ActionKind::RecvSkipGradient => Flow::SkipGradient(route(action.stage, peer())),
            other => panic!("{other} moves no tensor between stages"),
        }
    }

    /// The stage a message of this flow sent by `me` goes to.
    pub fn destination(self, me: StageId) -> StageId {
        match self {
            Flow::Activation => StageId(me.0 + 1),
            Flow::Gradient => StageId(me.0.checked_sub(1).expect("stage 0 sends no gradient")),
            Flow::Skip(route) => route.pop,
            Flow::SkipGradient(route) => route.stash,
        }
    }

    /// The stage a message of this flow received by `me` comes from.
    pub fn source(self, me: StageId) -> StageId {
        match self {
            Flow::Activation => StageId(me.0.saturating_sub(1)),
            Flow::Gradient => StageId(me.0 + 1),
            Flow::Skip(route) => route.stash,
            Flow::SkipGradient(route) => route.pop,
        }
    }
}

/// The tag of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// Activation or gradient.
    pub flow: Flow,
    /// The micro-batch it belongs to.
    pub micro_batch: MicroBatchId,
}
