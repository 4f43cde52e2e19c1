//! `simulate(plan, costs)`: a discrete-event dry run of a plan.
//!
//! Each stage runs its program in order; an action starts when the stage is free and its input
//! has arrived (see [`crate::dataflow`]). Out come the makespan, each stage's busy and idle time
//! (idle = makespan − busy: the bubble), and the peak number of micro-batches whose activations
//! a stage holds at once (stash: +1 at a forward, −1 when its backward — or, split, its
//! weight backward — is done).
//!
//! ```
//! use pipetrain_schedules::{simulate, Costs, ScheduleKind};
//! let plan = ScheduleKind::GPipe.plan(4, 8).unwrap();
//! let sim = simulate(&plan, &Costs::uniform(4, 1.0, 2.0)).unwrap();
//! assert!((sim.bubble_fraction - 3.0 / 11.0).abs() < 1e-12);
//! assert_eq!(sim.stages[0].peak_stash, 8);
//! ```

use crate::action::{Action, ActionKind};
use crate::dataflow::{self, Slot};
use crate::error::Result;
use crate::id::StageId;
use crate::plan::Plan;
use crate::validate::validate;

/// Durations of each kind of action, in any unit (the report uses the same).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Costs {
    /// Forward time of one micro-batch, per stage.
    pub forward: Vec<f64>,
    /// Full backward time of one micro-batch, per stage. A split backward's weight half (`W`)
    /// takes [`weight_fraction`](Self::weight_fraction) of it, the input half (`I`) the rest.
    pub backward: Vec<f64>,
    /// The share of a full backward that its weight-gradient half (`W`) takes, in `[0, 1]`
    /// (0.5 in [`Costs::uniform`]: `Costs::uniform(p, 1.0, 2.0)` is the zero-bubble paper's
    /// T_F = T_B = T_W).
    pub weight_fraction: f64,
    /// Per stage, the weight-gradient half's (`W`) own time, overriding
    /// [`weight_fraction`](Self::weight_fraction) where given (the input half takes the rest of
    /// `backward`): stages whose layers split their backward in different proportions.
    pub weight: Vec<f64>,
    /// Time for an activation or gradient to reach the neighbouring stage.
    pub transfer: f64,
    /// Time of one stage's gradient all-reduce. ZeRO's reduce (`RG`) and unshard (`US`) are
    /// each charged half of it: a ring all-reduce is a reduce-scatter then an all-gather of the
    /// same bytes, and `RG` is the first (the sums reach their owners), `US` the second (the
    /// owners' values reach every replica). A reshard (`RS`) frees memory only: free.
    pub all_reduce: f64,
    /// Time of one stage's optimizer step.
    pub optimizer: f64,
    /// Whether a worker runs an overlap's two halves at once ([`ActionKind::Overlap`]: it takes
    /// max(F, B), the longer half) or in sequence (F + B). `false` in [`Costs::uniform`]:
    /// pipetrain's workers run the forward, then the backward.
    pub overlaps: bool,
}

impl Costs {
    /// The same forward and backward time on every stage; free transfers, all-reduce and
    /// optimizer step.
    pub fn uniform(stages: usize, forward: f64, backward: f64) -> Self {
        Self {
            forward: vec![forward; stages],
            backward: vec![backward; stages],
            weight_fraction: 0.5,
            weight: Vec::new(),
            transfer: 0.0,
            all_reduce: 0.0,
            optimizer: 0.0,
            overlaps: false,
        }
    }

    /// These costs on a worker that runs an overlap's halves at once (`true`) or in sequence.
    ///
    /// ```
    /// use pipetrain_schedules::{Action, Costs, MicroBatchId, StageId};
    /// let pair: Action = "0F3+3B1".parse().unwrap();
    /// let costs = Costs::uniform(4, 1.0, 2.0);
    /// assert_eq!(costs.duration(&pair), 3.0); // F + B
    /// assert_eq!(costs.with_overlaps(true).duration(&pair), 2.0); // max(F, B)
    /// ```
    pub fn with_overlaps(self, overlaps: bool) -> Self {
        Self { overlaps, ..self }
    }

    /// Duration of `action`; an overlap's is its halves' sum, or under
    /// [`overlaps`](Self::overlaps) the longer half's.
    pub fn duration(&self, action: &Action) -> f64 {
        if let Some((forward, backward)) = action.halves() {
            let (f, b) = (self.duration(&forward), self.duration(&backward));
            return if self.overlaps { f.max(b) } else { f + b };
        }
        let s = action.stage.index();
        let at = |v: &[f64]| v.get(s).or(v.last()).copied().unwrap_or(0.0);
        let split = |input: bool| match (self.weight.is_empty(), input) {
            (true, true) => at(&self.backward) * (1.0 - self.weight_fraction),
            (true, false) => at(&self.backward) * self.weight_fraction,
            (false, true) => at(&self.backward) - at(&self.weight),
            (false, false) => at(&self.weight),
        };
        match action.kind {
            ActionKind::Forward => at(&self.forward),
            ActionKind::Backward => at(&self.backward),
            ActionKind::BackwardInput => split(true),
            ActionKind::BackwardWeight => split(false),
            ActionKind::AllReduce => self.all_reduce,
            ActionKind::ReduceGrad | ActionKind::Unshard => self.all_reduce / 2.0,
            ActionKind::OptimizerStep => self.optimizer,
            _ => 0.0,
        }
    }
}

/// What the dry run of one stage (one rank, when ranks hold several stages) found.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StageSimulation {
    /// The stage (the rank, as the id of its program, when ranks hold several stages).
    pub stage: StageId,
    /// Time spent running actions.
    pub busy: f64,
    /// Makespan − busy: time spent waiting (the bubble).
    pub idle: f64,
    /// idle / makespan.
    pub bubble_fraction: f64,
    /// Most micro-batches stashed at once.
    pub peak_stash: usize,
    /// Every action with its start and end, in program order.
    pub timeline: Vec<Slot>,
}

/// The result of [`simulate`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Simulation {
    /// Time from the first action's start to the last one's end.
    pub makespan: f64,
    /// Total idle time over total stage time (ranks × makespan).
    pub bubble_fraction: f64,
    /// Per stage (per rank).
    pub stages: Vec<StageSimulation>,
}

/// Validates `plan`, then dry-runs it under `costs`: as written on workers that can overlap
/// ([`Costs::overlaps`]: an overlap starts when both halves' inputs are there and takes the
/// longer half), else as [`Plan::sequential`] (each half when its own input is there, one
/// after the other; the timeline then shows the halves).
pub fn simulate(plan: &Plan, costs: &Costs) -> Result<Simulation> {
    validate(plan)?;
    let sequential;
    let plan = match costs.overlaps {
        true => plan,
        false => {
            sequential = plan.sequential();
            &sequential
        }
    };
    let timelines = dataflow::run(plan, |a| costs.duration(a), costs.transfer)
        .expect("a validated plan cannot deadlock");
    let makespan = timelines
        .iter()
        .flatten()
        .map(|s| s.end)
        .fold(0.0, f64::max);
    let ratio = |idle: f64, total: f64| if total > 0.0 { idle / total } else { 0.0 };
    let stages: Vec<StageSimulation> = timelines
        .into_iter()
        .enumerate()
        .map(|(s, timeline)| {
            let busy: f64 = timeline.iter().map(|slot| slot.end - slot.start).sum();
            let idle = makespan - busy;
            StageSimulation {
                stage: StageId::from(s),
                busy,
                idle,
                bubble_fraction: ratio(idle, makespan),
                peak_stash: peak_stash(plan.program(StageId::from(s))),
                timeline,
            }
        })
        .collect();
    let idle: f64 = stages.iter().map(|s| s.idle).sum();
    let bubble_fraction = ratio(idle, makespan * stages.len() as f64);
    Ok(Simulation {
        makespan,
        bubble_fraction,
        stages,
    })
}

/// Most micro-batches whose activations one program holds at once.
pub fn peak_stash(program: &[Action]) -> usize {
    let (mut live, mut peak) = (0usize, 0usize);
    // An overlap's forward stashes before its backward frees.
    for a in program.iter().flat_map(Action::in_sequence) {
        match a.kind {
            ActionKind::Forward => {
                live += 1;
                peak = peak.max(live);
            }
            ActionKind::Backward | ActionKind::BackwardWeight => live = live.saturating_sub(1),
            _ => {}
        }
    }
    peak
}
