//! A plan: one ordered program of actions per stage.

use std::fmt;
use std::str::FromStr;

use crate::action::{Action, ActionKind};
use crate::error::{Result, ScheduleError};
use crate::id::StageId;

/// Per-stage ordered lists of [`Action`]s for one training step.
///
/// A plan is data: the engine interprets it without knowing which schedule made it. Its text form
/// has one line per stage, `<stage>: <action> <action> …`, and parses back to the same plan:
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
    programs: Vec<Vec<Action>>,
}

impl Plan {
    /// A plan from per-stage programs (`programs[s]` runs on stage s). Nothing is checked here:
    /// run [`crate::validate`] before interpreting a plan built by hand.
    pub fn new(stages: usize, micro_batches: usize, mut programs: Vec<Vec<Action>>) -> Self {
        programs.resize_with(stages.max(programs.len()), Vec::new);
        Self {
            micro_batches,
            programs,
        }
    }

    /// Number of stages (one program each).
    pub fn stages(&self) -> usize {
        self.programs.len()
    }

    /// Number of micro-batches per step.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches
    }

    /// The program of `stage`.
    ///
    /// # Panics
    /// If `stage` is out of range.
    pub fn program(&self, stage: StageId) -> &[Action] {
        &self.programs[stage.index()]
    }

    /// All programs, indexed by stage.
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

    /// Number of actions of `kind` on `stage`.
    pub fn count(&self, stage: StageId, kind: ActionKind) -> usize {
        self.program(stage)
            .iter()
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
    /// named (a plan that names none has one).
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
        let micro_batches = programs
            .iter()
            .flatten()
            .filter_map(|a: &Action| a.micro_batch)
            .map(|mb| mb.index() + 1)
            .max()
            .unwrap_or(1);
        Ok(Plan::new(programs.len(), micro_batches, programs))
    }
}
