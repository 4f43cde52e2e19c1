//! Text grids: a plan's programs (one column per step) and a simulated timeline (one column per
//! time slot, like the GPipe paper's figure).
//!
//! ```
//! use pipetrain_schedules::{render, simulate, Costs, ScheduleKind};
//! let plan = ScheduleKind::GPipe.plan(2, 2).unwrap();
//! let sim = simulate(&plan, &Costs::uniform(2, 1.0, 1.0)).unwrap();
//! assert_eq!(render::timeline(&sim), "\
//! stage 0 | F0 F1 .  .  B0 B1
//! stage 1 | .  F0 F1 B0 B1 .
//! ");
//! ```

use std::fmt::Write;

use crate::id::StageId;
use crate::plan::Plan;
use crate::simulate::Simulation;

/// One row per stage (per rank, `rank r`, when ranks hold several stages), one column per step
/// of its program. `mark` = (row, step) is drawn `>…<` (a step past the end marks the end of
/// the row).
pub fn programs(plan: &Plan, mark: Option<(StageId, usize)>) -> String {
    let width = plan
        .actions()
        .map(|a| a.to_string().len())
        .max()
        .unwrap_or(1);
    let mut out = String::new();
    for (rank, program) in plan.programs().iter().enumerate() {
        let stage = StageId::from(rank);
        match plan.is_interleaved() {
            true => write!(out, "rank {rank} |"),
            false => write!(out, "{stage} |"),
        }
        .expect("writing to a String");
        for step in 0..=program.len() {
            let marked = mark == Some((stage, step));
            let text = program.get(step).map(ToString::to_string);
            match (text, marked) {
                (Some(t), true) => {
                    let _ = write!(out, ">{t:width$}<");
                }
                (Some(t), false) => {
                    let _ = write!(out, " {t:width$} ");
                }
                (None, true) => out.push_str(" >< (end)"),
                (None, false) => {}
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

/// One row per stage, one column per time slot of a simulation; `.` is idle. A slot is the
/// shortest compute action's duration; longer actions span several columns. Communication,
/// all-reduce and optimizer steps are not drawn. When ranks hold several stages, rows are
/// ranks and each cell names the stage too (`5F3`: forward of micro-batch 3 on stage 5).
///
/// Its size grows with the stages times the makespan over the shortest action, which costs far
/// apart make as large as any memory: [`timeline_size`] says how large before it is drawn.
pub fn timeline(sim: &Simulation) -> String {
    let Some(grid) = Grid::of(sim) else {
        return sim
            .stages
            .iter()
            .map(|s| format!("{} |\n", s.stage))
            .collect();
    };
    let Grid {
        unit,
        chunked,
        width,
        ..
    } = grid;
    let columns = usize::try_from(grid.columns).expect("a grid that fits in memory");
    let mut out = String::new();
    for stage in &sim.stages {
        let mut cells = vec![String::from("."); columns];
        for slot in stage.timeline.iter().filter(|s| s.action.kind.is_compute()) {
            let from = (slot.start / unit).round() as usize;
            let to = ((slot.end / unit).round() as usize).min(columns);
            for cell in &mut cells[from..to] {
                *cell = label(slot, chunked);
            }
        }
        let _ = match chunked {
            true => write!(out, "rank {} |", stage.stage.0),
            false => write!(out, "{} |", stage.stage),
        };
        for cell in cells {
            let _ = write!(out, " {cell:width$}");
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

/// How large [`timeline`]'s grid of a simulation is, found without drawing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineSize {
    /// Its rows: one per stage (per rank).
    pub rows: usize,
    /// Its columns: the makespan over the shortest compute action (0 when every compute action
    /// is free: no grid is drawn).
    pub columns: u64,
    /// Its text, in bytes (saturating).
    pub bytes: u64,
}

/// The size of [`timeline`]'s text for `sim`, without drawing it.
///
/// ```
/// use pipetrain_schedules::{render, simulate, Costs, ScheduleKind};
/// let plan = ScheduleKind::GPipe.plan(2, 2).unwrap();
/// let sim = simulate(&plan, &Costs::uniform(2, 1.0, 1.0)).unwrap();
/// let size = render::timeline_size(&sim);
/// assert_eq!((size.rows, size.columns), (2, 6));
/// // An upper bound: a row's trailing idle cells are cut when drawn.
/// assert!(size.bytes >= render::timeline(&sim).len() as u64);
/// ```
pub fn timeline_size(sim: &Simulation) -> TimelineSize {
    let rows = sim.stages.len();
    let Some(grid) = Grid::of(sim) else {
        let bytes = sim
            .stages
            .iter()
            .map(|s| format!("{} |\n", s.stage).len() as u64);
        return TimelineSize {
            rows,
            columns: 0,
            bytes: bytes.sum(),
        };
    };
    let bytes = sim
        .stages
        .iter()
        .map(|row| {
            let head = match grid.chunked {
                true => format!("rank {} |", row.stage.0),
                false => format!("{} |", row.stage),
            };
            // Each cell is a space and `width` characters; the row's trailing spaces are cut
            // (counted here: an upper bound) and a newline ends it.
            let cells = grid.columns.saturating_mul(grid.width as u64 + 1);
            cells.saturating_add(head.len() as u64 + 1)
        })
        .fold(0u64, u64::saturating_add);
    TimelineSize {
        rows,
        columns: grid.columns,
        bytes,
    }
}

/// The shape of a timeline's grid: its column's duration, how many columns, whether cells
/// name stages, and a cell's width.
struct Grid {
    unit: f64,
    columns: u64,
    chunked: bool,
    width: usize,
}

impl Grid {
    /// `None` when no compute action takes any time.
    fn of(sim: &Simulation) -> Option<Self> {
        let compute = || {
            sim.stages
                .iter()
                .flat_map(|s| &s.timeline)
                .filter(|slot| slot.action.kind.is_compute() && slot.end > slot.start)
        };
        let unit = compute()
            .map(|slot| slot.end - slot.start)
            .fold(f64::INFINITY, f64::min);
        if !unit.is_finite() {
            return None;
        }
        let chunked = sim.stages.iter().any(|row| {
            row.timeline
                .iter()
                .any(|slot| slot.action.stage != row.stage)
        });
        Some(Self {
            unit,
            // `as` saturates: a makespan of 1e300 slots is u64::MAX columns, not a wrap.
            columns: (sim.makespan / unit).round() as u64,
            chunked,
            width: compute()
                .map(|slot| label(slot, chunked).len())
                .max()
                .unwrap_or(1),
        })
    }
}

/// A compute action's cell: its kind and micro-batch (`F3`), after its stage when ranks hold
/// several (`5F3`); an overlap's is its text (`0F3+3B1`).
fn label(slot: &crate::dataflow::Slot, chunked: bool) -> String {
    let a = slot.action;
    if a.kind == crate::action::ActionKind::Overlap {
        return a.to_string();
    }
    let mb = a.micro_batch.map(|m| m.0).unwrap_or(0);
    match chunked {
        true => format!("{}{}{mb}", a.stage.0, a.kind.code()),
        false => format!("{}{mb}", a.kind.code()),
    }
}

/// The skip flows of a plan, one line per stage pair: how many skips go straight from the
/// stashing to the popping stage (`SK` → `RK`) and how many gradients come back (`SKB` →
/// `RKB`); empty when the plan sends no skips.
///
/// ```
/// use pipetrain_schedules::{lower, render, route_skips, Lowering, ScheduleKind, SkipRoute};
/// let compute = ScheduleKind::OneFOneB.plan(4, 2).unwrap();
/// let routes: Vec<SkipRoute> = vec!["0:3".parse().unwrap(), "1:2".parse().unwrap()];
/// let plan = lower(&route_skips(&compute, &routes).unwrap(), Lowering::default());
/// assert_eq!(render::skips(&plan), "\
/// skip stage 0 -> stage 3: 2 sends (SK), 2 gradients back (SKB), not through stages 1..2
/// skip stage 1 -> stage 2: 2 sends (SK), 2 gradients back (SKB)
/// ");
/// ```
pub fn skips(plan: &Plan) -> String {
    use crate::action::ActionKind;
    let mut out = String::new();
    for route in plan.skip_routes() {
        let count = |kind, stage, peer| {
            plan.actions()
                .filter(|a| a.kind == kind && a.stage == stage && a.peer == Some(peer))
                .count()
        };
        let sends = count(ActionKind::SendSkip, route.stash, route.pop);
        let grads = count(ActionKind::SendSkipGradient, route.pop, route.stash);
        let _ = write!(
            out,
            "skip {} -> {}: {sends} sends (SK), {grads} gradients back (SKB)",
            route.stash, route.pop
        );
        if route.pop.0 > route.stash.0 + 1 {
            let _ = write!(
                out,
                ", not through stages {}..{}",
                route.stash.0 + 1,
                route.pop.0 - 1
            );
        }
        out.push('\n');
    }
    out
}
