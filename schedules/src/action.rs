//! The action IR: what one worker does at one step of a plan.
//!
//! Every action has a compact text form, `<stage><KIND>[<micro-batch>]`, whose parser is the exact
//! inverse of its printer (as in PyTorch pipelining's `"2F0"`):
//!
//! | text   | kind                          | meaning on stage s                                   |
//! |--------|-------------------------------|------------------------------------------------------|
//! | `1F3`  | [`ActionKind::Forward`]        | forward micro-batch 3 (autodiff), stash what backward needs |
//! | `1B3`  | [`ActionKind::Backward`]       | backward micro-batch 3: input gradient and weight gradient |
//! | `1I3`  | [`ActionKind::BackwardInput`]  | input gradient only (zero-bubble schedules)          |
//! | `1W3`  | [`ActionKind::BackwardWeight`] | weight gradient only (zero-bubble schedules)         |
//! | `1SF3` | [`ActionKind::SendActivation`] | send the forward output of micro-batch 3 to stage s+1 |
//! | `1RF3` | [`ActionKind::RecvActivation`] | receive the input of micro-batch 3 from stage s−1    |
//! | `1SB3` | [`ActionKind::SendGradient`]   | send the input gradient of micro-batch 3 to stage s−1 |
//! | `1RB3` | [`ActionKind::RecvGradient`]   | receive the output gradient of micro-batch 3 from s+1 |
//! | `1SK3>3` | [`ActionKind::SendSkip`]     | send the skips of micro-batch 3 that stage 3 pops, straight to it |
//! | `3RK3<1` | [`ActionKind::RecvSkip`]     | receive the skips of micro-batch 3 that stage 1 stashed |
//! | `3SKB3>1` | [`ActionKind::SendSkipGradient`] | send those skips' gradients straight back to stage 1 |
//! | `1RKB3<3` | [`ActionKind::RecvSkipGradient`] | receive them on stage 1, before its backward of 3 |
//! | `1AR`  | [`ActionKind::AllReduce`]      | all-reduce this stage's gradients across replicas    |
//! | `1OPT` | [`ActionKind::OptimizerStep`]  | apply the optimizer to this stage's parameters       |
//! | `1RG`  | [`ActionKind::ReduceGrad`]     | ZeRO-2/3: reduce this stage's gradients to their owner replicas |
//! | `1US`  | [`ActionKind::Unshard`]        | ZeRO-2/3: every replica takes the owners' parameter values |
//! | `1RS`  | [`ActionKind::Reshard`]        | ZeRO-3: every replica drops the parameters it does not own |
//! | `0F3+3B1` | [`ActionKind::Overlap`]     | forward of 3 on stage 0 overlapped with backward of 1 on stage 3 |
//!
//! A skip transfer names its **peer**, the other stage of the pair (`>` the stage it sends to,
//! `<` the one it receives from): skips go straight from the stashing to the popping stage,
//! not through the stages between (see [`route_skips`](crate::route_skips)).
//!
//! An **overlap** (PyTorch's `OVERLAP_F_B`, printed there `(0F3;3B1)OVERLAP_F_B`) is one
//! action made of two computations of one rank: a forward and a backward of other micro-batches
//! (DualPipeV pairs one chunk's forward with the other chunk's backward), which hardware that
//! can overlap them (one on the compute units while the other communicates, or two streams)
//! runs at once. Its text is the forward's, `+`, the backward's. Everything that reads a plan
//! treats it as both computations ([`Action::in_sequence`]): the inputs of each are received
//! before it, the outputs of each sent after it. A worker that cannot overlap runs the forward,
//! then the backward: pipetrain's workers do, so a plan with overlaps trains bitwise as the same
//! plan with each pair in sequence.
//!
//! The stage is the *model* stage the action works on. Today every pipeline rank runs one stage;
//! interleaved schedules will give a rank several (virtual) stages, and the IR does not change.

use std::fmt;
use std::str::FromStr;

use crate::error::ScheduleError;
use crate::id::{MicroBatchId, StageId};

/// What an action does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ActionKind {
    /// Forward of one micro-batch, recording the autodiff graph (or stashing the input for
    /// re-materialization).
    Forward,
    /// Full backward of one micro-batch: input gradient and parameter gradients.
    Backward,
    /// Backward for the input gradient only (zero-bubble split backward).
    BackwardInput,
    /// Backward for the parameter gradients only (zero-bubble split backward).
    BackwardWeight,
    /// Send a forward activation downstream (to stage + 1).
    SendActivation,
    /// Receive a forward activation from upstream (from stage − 1).
    RecvActivation,
    /// Send an input gradient upstream (to stage − 1).
    SendGradient,
    /// Receive an output gradient from downstream (from stage + 1).
    RecvGradient,
    /// Send the skips this stage stashed for one micro-batch straight to the stage that pops
    /// them (the action's peer).
    SendSkip,
    /// Receive the skips the peer stage stashed for one micro-batch, before this stage's
    /// forward pops them.
    RecvSkip,
    /// Send the gradients of the skips this stage popped straight back to the stage that
    /// stashed them (the peer).
    SendSkipGradient,
    /// Receive the gradients of the skips this stage stashed from the stage that popped them,
    /// before this stage's backward.
    RecvSkipGradient,
    /// All-reduce this stage's accumulated gradients across its replicas.
    AllReduce,
    /// One optimizer step on this stage's parameters.
    OptimizerStep,
    /// ZeRO-2/3: reduce this stage's accumulated gradients across its replicas, each summed
    /// gradient to the replica that owns the parameter; the others drop theirs (see
    /// [`Zero`](crate::Zero)).
    ReduceGrad,
    /// ZeRO-2/3: every replica of this stage takes each parameter's value from its owner (an
    /// all-gather): at level 3 the stage's parameters are whole from here to its `RS`; at level
    /// 2 it hands out the owners' updated values after the optimizer step.
    Unshard,
    /// ZeRO-3: every replica of this stage drops the parameter values it does not own.
    Reshard,
    /// A forward and a backward of one rank run at once: the action's stage and micro-batch are
    /// the forward's, [`Action::backward`](Action#structfield.backward) names the backward's.
    /// Built by [`Action::overlap`]; a worker that cannot overlap runs its two halves in
    /// sequence ([`Action::in_sequence`]).
    Overlap,
}

impl ActionKind {
    /// Every kind, in text-code order.
    pub const ALL: [ActionKind; 18] = [
        ActionKind::Forward,
        ActionKind::Backward,
        ActionKind::BackwardInput,
        ActionKind::BackwardWeight,
        ActionKind::SendActivation,
        ActionKind::RecvActivation,
        ActionKind::SendGradient,
        ActionKind::RecvGradient,
        ActionKind::SendSkip,
        ActionKind::RecvSkip,
        ActionKind::SendSkipGradient,
        ActionKind::RecvSkipGradient,
        ActionKind::AllReduce,
        ActionKind::OptimizerStep,
        ActionKind::ReduceGrad,
        ActionKind::Unshard,
        ActionKind::Reshard,
        ActionKind::Overlap,
    ];

    /// The code used in the text form (`F`, `B`, `SF`, `AR`, …); an overlap's, `F+B`, stands
    /// for its text `<forward>+<backward>` (`0F3+3B1`).
    pub const fn code(self) -> &'static str {
        match self {
            ActionKind::Forward => "F",
            ActionKind::Backward => "B",
            ActionKind::BackwardInput => "I",
            ActionKind::BackwardWeight => "W",
            ActionKind::SendActivation => "SF",
            ActionKind::RecvActivation => "RF",
            ActionKind::SendGradient => "SB",
            ActionKind::RecvGradient => "RB",
            ActionKind::SendSkip => "SK",
            ActionKind::RecvSkip => "RK",
            ActionKind::SendSkipGradient => "SKB",
            ActionKind::RecvSkipGradient => "RKB",
            ActionKind::AllReduce => "AR",
            ActionKind::OptimizerStep => "OPT",
            ActionKind::ReduceGrad => "RG",
            ActionKind::Unshard => "US",
            ActionKind::Reshard => "RS",
            ActionKind::Overlap => "F+B",
        }
    }

    /// A human name, for error messages and traces.
    pub const fn name(self) -> &'static str {
        match self {
            ActionKind::Forward => "forward",
            ActionKind::Backward => "backward",
            ActionKind::BackwardInput => "backward-input",
            ActionKind::BackwardWeight => "backward-weight",
            ActionKind::SendActivation => "send-activation",
            ActionKind::RecvActivation => "recv-activation",
            ActionKind::SendGradient => "send-gradient",
            ActionKind::RecvGradient => "recv-gradient",
            ActionKind::SendSkip => "send-skip",
            ActionKind::RecvSkip => "recv-skip",
            ActionKind::SendSkipGradient => "send-skip-gradient",
            ActionKind::RecvSkipGradient => "recv-skip-gradient",
            ActionKind::AllReduce => "all-reduce",
            ActionKind::OptimizerStep => "optimizer-step",
            ActionKind::ReduceGrad => "reduce-grad",
            ActionKind::Unshard => "unshard",
            ActionKind::Reshard => "reshard",
            ActionKind::Overlap => "overlap",
        }
    }

    /// Whether actions of this kind name a micro-batch (all but the stage-wide ones: all-reduce,
    /// optimizer step, and ZeRO's reduce, unshard and reshard).
    pub const fn has_micro_batch(self) -> bool {
        !self.is_stage_wide()
    }

    /// Whether this kind acts on the whole stage once a step rather than on one micro-batch:
    /// `AR`, `OPT`, `RG`, `US`, `RS`.
    pub const fn is_stage_wide(self) -> bool {
        matches!(
            self,
            ActionKind::AllReduce
                | ActionKind::OptimizerStep
                | ActionKind::ReduceGrad
                | ActionKind::Unshard
                | ActionKind::Reshard
        )
    }

    /// Whether this kind is computation on the stage's layers (F, B, I, W, and an overlap of
    /// an F and a B).
    pub const fn is_compute(self) -> bool {
        matches!(
            self,
            ActionKind::Forward
                | ActionKind::Backward
                | ActionKind::BackwardInput
                | ActionKind::BackwardWeight
                | ActionKind::Overlap
        )
    }

    /// Whether this kind moves a tensor between stages (neighbours, or a skip's pair).
    pub const fn is_transfer(self) -> bool {
        matches!(
            self,
            ActionKind::SendActivation
                | ActionKind::RecvActivation
                | ActionKind::SendGradient
                | ActionKind::RecvGradient
        ) || self.is_skip()
    }

    /// Whether this kind moves skips between a stashing and a popping stage (it names a peer).
    pub const fn is_skip(self) -> bool {
        matches!(
            self,
            ActionKind::SendSkip
                | ActionKind::RecvSkip
                | ActionKind::SendSkipGradient
                | ActionKind::RecvSkipGradient
        )
    }

    /// Whether this kind sends (its peer is the receiver).
    pub const fn is_send(self) -> bool {
        matches!(
            self,
            ActionKind::SendActivation
                | ActionKind::SendGradient
                | ActionKind::SendSkip
                | ActionKind::SendSkipGradient
        )
    }

    /// The kind of a single action's code (an overlap is parsed from its two halves).
    fn from_code(code: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|&k| k != ActionKind::Overlap && k.code() == code)
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One step of one stage's program: (stage, kind, micro-batch), for a skip transfer the peer
/// stage, and for an overlap the stage and micro-batch of its backward.
///
/// ```
/// use pipetrain_schedules::{Action, ActionKind, MicroBatchId, StageId};
/// let a = Action::new(StageId(1), ActionKind::Forward, MicroBatchId(3));
/// assert_eq!(a.to_string(), "1F3");
/// assert_eq!("1F3".parse::<Action>().unwrap(), a);
/// assert_eq!(Action::optimizer_step(StageId(0)).to_string(), "0OPT");
/// assert!("1X3".parse::<Action>().is_err());
/// let skip = Action::skip(StageId(1), ActionKind::SendSkip, MicroBatchId(0), StageId(3));
/// assert_eq!(skip.to_string(), "1SK0>3");
/// assert_eq!("1SK0>3".parse::<Action>().unwrap(), skip);
/// assert!("1SK0".parse::<Action>().is_err(), "a skip transfer names its peer");
/// let pair = Action::overlap(
///     Action::forward(StageId(0), MicroBatchId(3)),
///     Action::backward(StageId(3), MicroBatchId(1)),
/// );
/// assert_eq!(pair.to_string(), "0F3+3B1");
/// assert_eq!("0F3+3B1".parse::<Action>().unwrap(), pair);
/// assert_eq!(pair.in_sequence().map(|a| a.to_string()).collect::<Vec<_>>(), ["0F3", "3B1"]);
/// assert!("3B1+0F3".parse::<Action>().is_err(), "the forward comes first");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Action {
    /// The stage whose layers or boundary this action works on.
    pub stage: StageId,
    /// What the action does.
    pub kind: ActionKind,
    /// The micro-batch, for every kind but all-reduce and optimizer step.
    pub micro_batch: Option<MicroBatchId>,
    /// The other stage of a skip transfer ([`ActionKind::is_skip`]); `None` for every other
    /// kind.
    pub peer: Option<StageId>,
    /// The stage and micro-batch of an overlap's backward ([`ActionKind::Overlap`]; its
    /// `stage` and `micro_batch` are its forward's); `None` for every other kind.
    pub backward: Option<(StageId, MicroBatchId)>,
}

impl Action {
    /// An action on one micro-batch.
    ///
    /// # Panics
    /// If `kind` takes no micro-batch ([`ActionKind::AllReduce`], [`ActionKind::OptimizerStep`]);
    /// use [`Action::all_reduce`] / [`Action::optimizer_step`] for those. If `kind` is a skip
    /// transfer: use [`Action::skip`]; an overlap: use [`Action::overlap`].
    pub fn new(stage: StageId, kind: ActionKind, micro_batch: MicroBatchId) -> Self {
        assert!(kind.has_micro_batch(), "{kind} takes no micro-batch");
        assert!(!kind.is_skip(), "{kind} names a peer: use Action::skip");
        assert!(kind != ActionKind::Overlap, "use Action::overlap");
        Self {
            stage,
            kind,
            micro_batch: Some(micro_batch),
            peer: None,
            backward: None,
        }
    }

    /// `forward` and `backward` run at once (on a worker that can overlap them).
    ///
    /// # Panics
    /// If `forward` is not a forward ([`ActionKind::Forward`]) or `backward` not a full backward
    /// ([`ActionKind::Backward`]).
    pub fn overlap(forward: Action, backward: Action) -> Self {
        assert_eq!(forward.kind, ActionKind::Forward, "an overlap's first half");
        assert_eq!(
            backward.kind,
            ActionKind::Backward,
            "an overlap's second half"
        );
        Self {
            kind: ActionKind::Overlap,
            backward: Some((backward.stage, backward.mb())),
            ..forward
        }
    }

    /// An overlap's two halves, (forward, backward); `None` for every other action.
    pub fn halves(&self) -> Option<(Action, Action)> {
        let (stage, mb) = self.backward.filter(|_| self.kind == ActionKind::Overlap)?;
        let forward = Action::forward(self.stage, self.mb());
        Some((forward, Action::backward(stage, mb)))
    }

    /// What a worker that cannot overlap runs for this action: an overlap's forward, then its
    /// backward; any other action itself. Each half keeps its own rules (its inputs received
    /// before the overlap, its outputs sent after it).
    pub fn in_sequence(&self) -> impl Iterator<Item = Action> + use<> {
        let (first, second) = match self.halves() {
            Some((forward, backward)) => (forward, Some(backward)),
            None => (*self, None),
        };
        std::iter::once(first).chain(second)
    }

    /// A skip transfer of `micro_batch` between `stage` and `peer`.
    ///
    /// # Panics
    /// If `kind` is not a skip transfer ([`ActionKind::is_skip`]).
    pub fn skip(
        stage: StageId,
        kind: ActionKind,
        micro_batch: MicroBatchId,
        peer: StageId,
    ) -> Self {
        assert!(kind.is_skip(), "{kind} is no skip transfer");
        Self {
            stage,
            kind,
            micro_batch: Some(micro_batch),
            peer: Some(peer),
            backward: None,
        }
    }

    /// Forward of `mb` on `stage`.
    pub fn forward(stage: StageId, mb: MicroBatchId) -> Self {
        Self::new(stage, ActionKind::Forward, mb)
    }

    /// Full backward of `mb` on `stage`.
    pub fn backward(stage: StageId, mb: MicroBatchId) -> Self {
        Self::new(stage, ActionKind::Backward, mb)
    }

    /// All-reduce of `stage`'s gradients across replicas.
    pub fn all_reduce(stage: StageId) -> Self {
        Self {
            stage,
            kind: ActionKind::AllReduce,
            micro_batch: None,
            peer: None,
            backward: None,
        }
    }

    /// Optimizer step of `stage`.
    pub fn optimizer_step(stage: StageId) -> Self {
        Self::stage_wide(stage, ActionKind::OptimizerStep)
    }

    /// A stage-wide action ([`ActionKind::is_stage_wide`]: `AR`, `OPT`, `RG`, `US`, `RS`) on
    /// `stage`.
    ///
    /// # Panics
    /// If `kind` names a micro-batch.
    pub fn stage_wide(stage: StageId, kind: ActionKind) -> Self {
        assert!(kind.is_stage_wide(), "{kind} names a micro-batch");
        Self {
            stage,
            kind,
            micro_batch: None,
            peer: None,
            backward: None,
        }
    }

    /// The micro-batch of an action that has one.
    ///
    /// # Panics
    /// On an all-reduce or optimizer step.
    pub fn mb(&self) -> MicroBatchId {
        self.micro_batch
            .unwrap_or_else(|| panic!("{self} has no micro-batch"))
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((forward, backward)) = self.halves() {
            return write!(f, "{forward}+{backward}");
        }
        write!(f, "{}{}", self.stage.0, self.kind.code())?;
        if let Some(mb) = self.micro_batch {
            write!(f, "{}", mb.0)?;
        }
        if let Some(peer) = self.peer {
            let arrow = if self.kind.is_send() { '>' } else { '<' };
            write!(f, "{arrow}{}", peer.0)?;
        }
        Ok(())
    }
}

impl FromStr for Action {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| ScheduleError::ParseAction {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        if let Some((forward, backward)) = text.split_once('+') {
            let half = |text: &str, kind| match text.parse::<Action>() {
                Ok(a) if a.kind == kind => Ok(a),
                _ => Err(fail(
                    "an overlap is a forward `+` a full backward of the same rank (e.g. \
                     `0F3+3B1`)",
                )),
            };
            let forward = half(forward, ActionKind::Forward)?;
            return Ok(Action::overlap(
                forward,
                half(backward, ActionKind::Backward)?,
            ));
        }
        let digits_end = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (stage_text, rest) = text.split_at(digits_end);
        let code_end = rest
            .find(|c: char| !c.is_ascii_uppercase())
            .unwrap_or(rest.len());
        let (code, rest) = rest.split_at(code_end);
        let (mb_text, peer_text) = match rest.find(['>', '<']) {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        let stage = parse_number(stage_text).ok_or_else(|| {
            fail("expected a stage number first, without leading zeros (e.g. `1F3`)")
        })?;
        let kind = ActionKind::from_code(code).ok_or_else(|| {
            fail(
                "unknown action code; expected one of F, B, I, W, SF, RF, SB, RB, SK, RK, SKB, \
                 RKB, AR, OPT, RG, US, RS",
            )
        })?;
        let micro_batch = if kind.has_micro_batch() {
            Some(MicroBatchId(parse_number(mb_text).ok_or_else(|| {
                fail("expected a micro-batch number after the code, without leading zeros")
            })?))
        } else if mb_text.is_empty() {
            None
        } else {
            return Err(fail(
                "stage-wide actions (AR, OPT, RG, US, RS) take no micro-batch",
            ));
        };
        let arrow = if kind.is_send() { '>' } else { '<' };
        let peer = match (kind.is_skip(), peer_text) {
            (false, None) => None,
            (false, Some(_)) => return Err(fail("only a skip transfer names a peer")),
            (true, None) => {
                return Err(fail(&format!(
                    "a skip transfer names its peer stage after `{arrow}` (e.g. `1SK0>3`)"
                )));
            }
            (true, Some(text)) => {
                let number = text
                    .strip_prefix(arrow)
                    .ok_or_else(|| fail(&format!("a {kind} names its peer after `{arrow}`")))?;
                Some(StageId(parse_number(number).ok_or_else(|| {
                    fail("expected the peer stage number, without leading zeros")
                })?))
            }
        };
        Ok(Self {
            stage: StageId(stage),
            kind,
            micro_batch,
            peer,
            backward: None,
        })
    }
}

/// A decimal number without sign or leading zeros (so that parsing is the inverse of printing).
fn parse_number(text: &str) -> Option<u32> {
    let ok = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if ok { text.parse().ok() } else { None }
}
