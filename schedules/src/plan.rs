//! A plan: one ordered program of actions per stage.

use std::fmt;
use std::str::FromStr;

use crate::action::{Action, ActionKind};
use crate::error::{Result, ScheduleError};
use crate::id::StageId;

/// Per-rank ordered lists of [`Action`]s for one training step.
///
/// A plan is data: the engine interprets it without knowing which schedule made it. Each
/// program runs on one pipeline **rank** and its actions name the model **stage** they work on.
/// Most schedules place one stage per rank (stage s on rank s, and the two words coincide);
/// interleaved schedules give each rank several stages (its *chunks*, [`Plan::rank_of`]).
/// Its text form has one line per rank, `<rank>: <action> <action> …`, and parses back to the
/// same plan:
///
/// ```
/// use pipetrain_schedules::{Plan, ScheduleKind};
/// let plan = ScheduleKind::GPipe.plan(2, 2).unwrap();
/// assert_eq!(plan.to_string(), "0: 0F0 0F1 0B0 0B1\n1: 1F0 1F1 1B0 1B1\n");
/// assert_eq!(plan.to_string().parse::<Plan>().unwrap(), plan);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    micro_batches: usize,
    /// Per rank.
    programs: Vec<Vec<Action>>,
    /// The rank of each model stage.
    placement: Vec<usize>,
}

impl Plan {
    /// A plan from per-stage programs (`programs[s]` runs on stage s). Nothing is checked here:
    /// run [`crate::validate`] before interpreting a plan built by hand.
    pub fn new(stages: usize, micro_batches: usize, mut programs: Vec<Vec<Action>>) -> Self {
        programs.resize_with(stages.max(programs.len()), Vec::new);
        Self {
            micro_batches,
            placement: (0..programs.len()).collect(),
            programs,
        }
    }

    /// A plan whose ranks may hold several stages: `programs[r]` runs on rank r, and
    /// `placement[stage]` is the rank that holds each model stage. Nothing is checked here
    /// ([`crate::validate`] checks that every action is on its stage's rank).
    pub fn with_placement(
        micro_batches: usize,
        programs: Vec<Vec<Action>>,
        placement: Vec<usize>,
    ) -> Self {
        Self {
            micro_batches,
            programs,
            placement,
        }
    }

    /// This plan's placement and micro-batches with other `programs` (one per rank).
    pub(crate) fn with_programs(&self, programs: Vec<Vec<Action>>) -> Plan {
        Plan::with_placement(self.micro_batches, programs, self.placement.clone())
    }

    /// Number of model stages.
    pub fn stages(&self) -> usize {
        self.placement.len()
    }

    /// Number of ranks (one program each); [`stages`](Self::stages) unless interleaved.
    pub fn ranks(&self) -> usize {
        self.programs.len()
    }

    /// The rank that runs `stage`, if the plan has that stage.
    pub fn rank_of(&self, stage: StageId) -> Option<usize> {
        self.placement.get(stage.index()).copied()
    }

    /// The stages rank `rank` holds, in ascending order.
    pub fn stages_of(&self, rank: usize) -> impl Iterator<Item = StageId> + '_ {
        StageId::range(self.stages()).filter(move |&s| self.placement[s.index()] == rank)
    }

    /// Whether some rank holds more than one stage (or a stage sits on another rank than its
    /// index).
    pub fn is_interleaved(&self) -> bool {
        self.placement.iter().enumerate().any(|(s, &r)| s != r) || self.ranks() != self.stages()
    }

    /// Number of micro-batches per step.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches
    }

    /// The program of `stage`, for a plan of one stage per rank (in general: of the rank with
    /// the stage's index).
    ///
    /// # Panics
    /// If there is no such rank.
    pub fn program(&self, stage: StageId) -> &[Action] {
        &self.programs[stage.index()]
    }

    /// All programs, indexed by rank.
    pub fn programs(&self) -> &[Vec<Action>] {
        &self.programs
    }

    /// Whether the plan has been lowered (holds sends and receives, or an all-reduce or optimizer
    /// step) rather than only the compute actions a schedule emits.
    pub fn is_lowered(&self) -> bool {
        self.actions().any(|a| !a.kind.is_compute())
    }

    /// Every action of every stage, stage by stage.
    pub fn actions(&self) -> impl Iterator<Item = &Action> {
        self.programs.iter().flatten()
    }

    /// Number of actions of `kind` on `stage`'s program (see [`program`](Self::program)); an
    /// overlap counts as its forward and its backward.
    pub fn count(&self, stage: StageId, kind: ActionKind) -> usize {
        self.program(stage)
            .iter()
            .flat_map(Action::in_sequence)
            .filter(|a| a.kind == kind)
            .count()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (s, program) in self.programs.iter().enumerate() {
            write!(f, "{s}:")?;
            for action in program {
                write!(f, " {action}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl FromStr for Plan {
    type Err = ScheduleError;

    /// Parses the text form. The number of micro-batches is one more than the largest micro-batch
    /// named (a plan that names none has one); see [`Plan::from_programs`] for the stages.
    fn from_str(text: &str) -> Result<Self> {
        let mut programs = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let fail = |reason: String| ScheduleError::ParsePlan {
                line: i + 1,
                reason,
            };
            let (head, body) = line
                .split_once(':')
                .ok_or_else(|| fail("expected `<stage>: <actions>`".into()))?;
            let stage: usize = head
                .trim()
                .parse()
                .map_err(|_| fail(format!("bad stage `{head}`")))?;
            if stage != programs.len() {
                return Err(fail(format!(
                    "expected stage {}, found {stage}",
                    programs.len()
                )));
            }
            let program = body
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<Vec<Action>>>()
                .map_err(|e| fail(e.to_string()))?;
            programs.push(program);
        }
        Ok(Plan::from_programs(programs))
    }
}

impl Plan {
    /// A plan from per-rank programs as written: one more micro-batch than the largest named
    /// (at least one); as many stages as ranks or one more than the largest stage named; each
    /// stage on the first rank whose program names it (else on rank `stage mod ranks`).
    pub fn from_programs(programs: Vec<Vec<Action>>) -> Plan {
        let micro_batches = programs
            .iter()
            .flatten()
            .flat_map(Action::in_sequence)
            .filter_map(|a| a.micro_batch)
            .map(|mb| mb.index() + 1)
            .max()
            .unwrap_or(1);
        let ranks = programs.len();
        let stages = programs
            .iter()
            .flatten()
            .flat_map(Action::in_sequence)
            .map(|a| a.stage.index() + 1)
            .max()
            .unwrap_or(0)
            .max(ranks);
        let placement = (0..stages)
            .map(|s| {
                programs
                    .iter()
                    .position(|p| {
                        p.iter()
                            .flat_map(Action::in_sequence)
                            .any(|a| a.stage.index() == s)
                    })
                    .unwrap_or(s % ranks.max(1))
            })
            .collect();
        Plan::with_placement(micro_batches, programs, placement)
    }
}
