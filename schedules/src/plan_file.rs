//! Plans as files: a compute plan written by hand (or by `pipetrain plan --format csv`), read
//! back with the line and column of every action so that a problem points into the file.
//!
//! Two forms are read. **CSV** (as PyTorch pipelining dumps schedules): one row per stage, in
//! stage order, one action per cell; empty cells are skipped.
//!
//! ```text
//! # 1F1B, 2 stages, 2 micro-batches
//! 0F0,0F1,0B0,0B1
//! 1F0,1B0,1F1,1B1
//! ```
//! **Text** (the [`Plan`] display form): one line per stage, `<stage>: <action> <action> …`. A
//! file with a comma outside comments is CSV. In both, `#` starts a comment line and blank lines
//! are skipped. A file holds compute actions only (`F`, `B`, `I`, `W`, and overlaps such as
//! `0F3+3B1`): the lowering adds the sends, receives, all-reduce and optimizer step, so a file
//! cannot misplace them.
//!
//! ```
//! use pipetrain_schedules::{PlanFile, ScheduleKind};
//! let plan = ScheduleKind::OneFOneB.plan(2, 2)?;
//! let csv = PlanFile::csv(&plan);
//! assert_eq!(csv, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
//! let file = PlanFile::parse(&csv)?;
//! assert_eq!(file.plan(), &plan);
//! file.check()?;
//!
//! // Stage 1 runs its backward before its forward: the error names the line and column.
//! let bad = PlanFile::parse("0F0,0B0\n1B0,1F0\n")?;
//! let err = bad.check().unwrap_err().to_string();
//! assert!(err.starts_with("plan file line 2, column 1 (`1B0`)"), "{err}");
//! # Ok::<(), pipetrain_schedules::ScheduleError>(())
//! ```

use std::path::Path;

use crate::action::Action;
use crate::error::{Result, ScheduleError};
use crate::plan::Plan;
use crate::text_file::read_bounded;
use crate::validate::validate;

/// A compute plan read from a file, with where each action was written.
///
/// Two forms are read: CSV, one row of actions per rank (`0F0,0F1,0B0,0B1`; empty cells are
/// skipped), as PyTorch pipelining dumps schedules and `pipetrain plan --format csv` writes
/// them; and the [`Plan`] text form (`0: 0F0 0F1 0B0 0B1`). `#` starts a comment line. Only
/// compute actions (`F`, `B`, `I`, `W`): the lowering adds the communication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanFile {
    plan: Plan,
    /// Per stage: its 1-based line and, per action, its 1-based column (CSV cell or word).
    places: Vec<(usize, Vec<usize>)>,
}

impl PlanFile {
    /// Reads the CSV or the text form: one row of compute actions per rank, `#` comments and
    /// blank lines skipped (see [`PlanFile::csv`] for the CSV form).
    ///
    /// # Errors
    /// [`ScheduleError::ParsePlan`] with the 1-based line: an action that does not parse (with
    /// its column), a transfer, all-reduce or optimizer step, a row out of stage order, or no
    /// stage at all.
    pub fn parse(text: &str) -> Result<Self> {
        // A UTF-8 byte order mark (spreadsheets write one before a CSV) is no action: it failed
        // as "cannot parse action `\u{feff}0F0`", naming neither.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let rows = text
            .lines()
            .enumerate()
            .map(|(i, line)| (i + 1, line.trim()))
            .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'));
        let csv = rows.clone().any(|(_, line)| line.contains(','));
        let mut programs = Vec::new();
        let mut places = Vec::new();
        for (line, row) in rows {
            let fail = |reason: String| ScheduleError::ParsePlan { line, reason };
            let stage = programs.len();
            let cells: Vec<&str> = if csv {
                row.split(',').map(str::trim).collect()
            } else {
                let (head, body) = row.split_once(':').ok_or_else(|| {
                    fail(format!(
                        "expected `{stage}: <actions>` (text form) or comma-separated actions \
                         (CSV)"
                    ))
                })?;
                if head.trim() != stage.to_string() {
                    return Err(fail(format!(
                        "expected stage {stage} (one line per stage, in order), found `{}`",
                        head.trim()
                    )));
                }
                body.split_whitespace().collect()
            };
            let mut program = Vec::new();
            let mut columns = Vec::new();
            for (column, cell) in cells.iter().enumerate().filter(|(_, c)| !c.is_empty()) {
                let column = column + 1;
                let action: Action = cell
                    .parse()
                    .map_err(|e| fail(format!("column {column}: {e}")))?;
                if !action.kind.is_compute() {
                    return Err(fail(format!(
                        "column {column}: `{action}` is a {}; a plan file holds compute actions \
                         only (F, B, I, W, F+B): pipetrain adds the sends, receives, all-reduce and \
                         optimizer step",
                        action.kind
                    )));
                }
                program.push(action);
                columns.push(column);
            }
            programs.push(program);
            places.push((line, columns));
        }
        if programs.is_empty() {
            return Err(ScheduleError::ParsePlan {
                line: text.lines().count().max(1),
                reason: "no stage: write one row of actions per stage, e.g. `0F0,0B0`".into(),
            });
        }
        Ok(Self {
            plan: Plan::from_programs(programs),
            places,
        })
    }

    /// Reads, parses and checks the plan file at `path`, of at most `limit` bytes (a plan's
    /// actions take some 32 bytes each in memory, from some 4 of text: the caller sizes the
    /// limit from the memory it can give). What is not a regular file is refused before it is
    /// opened ([`read_bounded`](crate::read_bounded)).
    ///
    /// ```
    /// use pipetrain_schedules::{PlanFile, ScheduleError, ScheduleKind};
    /// let path = std::env::temp_dir().join(format!("pt-plan-read-{}.csv", std::process::id()));
    /// std::fs::write(&path, PlanFile::csv(&ScheduleKind::GPipe.plan(2, 2)?)).unwrap();
    /// assert_eq!(PlanFile::read(&path, 1 << 20)?.plan(), &ScheduleKind::GPipe.plan(2, 2)?);
    /// assert!(matches!(PlanFile::read(&path, 8), Err(ScheduleError::ReadPlan { .. })));
    /// # std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), ScheduleError>(())
    /// ```
    ///
    /// # Errors
    /// [`ScheduleError::ReadPlan`] (not a regular file, over `limit`, unreadable), then what
    /// [`PlanFile::parse`] and [`PlanFile::check`] return.
    pub fn read(path: &Path, limit: u64) -> Result<Self> {
        let text =
            read_bounded(path, limit).map_err(|problem| ScheduleError::ReadPlan { problem })?;
        let file = Self::parse(&text)?;
        file.check()?;
        Ok(file)
    }

    /// The plan read, one program per row (see [`Plan::from_programs`]).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Validates the plan ([`validate`]); a failure is [`ScheduleError::PlanFile`], naming the
    /// line and column of the failing action (for a missing one, the end of the stage's row).
    pub fn check(&self) -> Result<()> {
        validate(&self.plan).map_err(|e| match e {
            ScheduleError::Invalid(invalid) => {
                let (line, columns) = &self.places[invalid.stage.index()];
                let column = match columns.get(invalid.step) {
                    Some(&c) => c,
                    None => columns.last().map_or(1, |c| c + 1),
                };
                ScheduleError::PlanFile {
                    line: *line,
                    column,
                    finding: invalid,
                }
            }
            other => other,
        })
    }

    /// The CSV form of a compute plan: one row per rank, one action per cell.
    pub fn csv(plan: &Plan) -> String {
        plan.programs()
            .iter()
            .map(|program| {
                let cells: Vec<String> = program.iter().map(Action::to_string).collect();
                cells.join(",") + "\n"
            })
            .collect()
    }
}
