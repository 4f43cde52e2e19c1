//! `pipetrain plan`: build a schedule's plan, lower it, dry-run it, and print what it costs.
//!
//! Nothing here touches a device or starts a thread: the schedule generator emits the compute
//! plan, [`lower`] adds the sends and receives (so `--transfer-cost` applies), and [`simulate`]
//! validates the lowered plan and dry-runs it. The result is gathered once into a [`Report`],
//! which is then printed as text (grid, per-stage table, totals) or as JSON.
//!
//! ```text
//! $ pipetrain plan --stages 2 --micro-batches 2 --schedule gpipe
//! plan: gpipe, 2 stages, 2 micro-batches; costs per micro-batch and stage: forward 1, backward 2, transfer 0
//!
//! stage 0 | F0 F1 .  .  .  B0 B0 B1 B1
//! stage 1 | .  F0 F1 B0 B0 B1 B1 .  .
//! (one column = 1; F forward, B backward, . idle; transfers not drawn)
//!
//! stage  busy  idle   bubble  peak stash
//!     0     6     3  33.33 %           2
//!     1     6     3  33.33 %           2
//!
//! bubble    33.33 % of 2 stages x makespan (ideal (p-1)/(m+p-1) = 1/3 = 33.33 %)
//! makespan  9
//! ```

use std::io::{self, Write as _};

use pipetrain_schedules::{
    Costs, Lowering, ScheduleKind, Simulation, StageId, lower, render, simulate,
};
use serde::Serialize;

use crate::exit::Exit;
use crate::failure::Failure;
use crate::schedule::ScheduleArg;

/// Arguments of `pipetrain plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Number of pipeline stages (p).
    #[arg(long, default_value_t = 4)]
    pub stages: usize,
    /// Micro-batches per training step (m); m < p is allowed.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// Pipeline schedule.
    #[arg(long, value_enum, default_value_t, ignore_case = true)]
    pub schedule: ScheduleArg,
    /// Time of one micro-batch's forward on one stage.
    #[arg(long, default_value_t = 1.0, value_name = "F", value_parser = parse_cost, allow_negative_numbers = true)]
    pub forward_cost: f64,
    /// Time of one micro-batch's backward on one stage.
    #[arg(long, default_value_t = 2.0, value_name = "B", value_parser = parse_cost, allow_negative_numbers = true)]
    pub backward_cost: f64,
    /// Time for an activation or a gradient to reach the neighbouring stage.
    #[arg(long, default_value_t = 0.0, value_name = "T", value_parser = parse_cost, allow_negative_numbers = true)]
    pub transfer_cost: f64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also print the lowered plan's text form (one line per stage; it parses back to the plan).
    #[arg(long)]
    pub lowered: bool,
}

/// How `pipetrain plan` prints its report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Grid, per-stage table and totals, for people.
    Text,
    /// One pretty-printed JSON object, for scripts.
    Json,
}

/// What `pipetrain plan` can reject beyond what the schedule crate checks.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A cost that is negative, NaN or infinite.
    #[error("--{flag} {value}: {reason}")]
    BadCost {
        /// The flag, without its dashes.
        flag: &'static str,
        /// The value given.
        value: f64,
        /// What is wrong and what to give instead.
        reason: String,
    },
}

/// Runs `pipetrain plan`.
///
/// # Errors
/// A shape or cost the schedule refuses (usage); a plan that fails to simulate, or stdout that
/// cannot be written (runtime).
pub fn run(args: &PlanArgs) -> Result<Exit, Failure> {
    let report = Report::build(args)?;
    let text = match args.format {
        Format::Text => report.text(),
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
    };
    match io::stdout().lock().write_all(text.as_bytes()) {
        // `pipetrain plan | head` is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Exit::Success),
        other => other.map(|()| Exit::Success).map_err(Into::into),
    }
}

/// Why `value` cannot be a duration, if it cannot.
fn cost_problem(value: f64) -> Option<String> {
    if !value.is_finite() {
        Some(format!(
            "{value} is not a finite number; give a duration >= 0 such as 1.0"
        ))
    } else if value < 0.0 {
        Some(format!(
            "{value} is negative; give a duration >= 0 (0 makes the action free)"
        ))
    } else {
        None
    }
}

/// clap's parser for the `--*-cost` flags: clap names the flag and the text in its error.
fn parse_cost(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number; give a duration >= 0 such as 1.0"))?;
    cost_problem(value).map_or(Ok(value), Err)
}

/// The costs given on the command line, checked again here for callers that skip clap.
fn costs(args: &PlanArgs) -> Result<Costs, PlanError> {
    for (flag, value) in [
        ("forward-cost", args.forward_cost),
        ("backward-cost", args.backward_cost),
        ("transfer-cost", args.transfer_cost),
    ] {
        if let Some(reason) = cost_problem(value) {
            return Err(PlanError::BadCost {
                flag,
                value,
                reason,
            });
        }
    }
    let mut costs = Costs::uniform(args.stages, args.forward_cost, args.backward_cost);
    costs.transfer = args.transfer_cost;
    Ok(costs)
}

/// Everything `pipetrain plan` prints, in either format.
#[derive(Debug, Serialize)]
struct Report {
    schedule: String,
    stages: usize,
    micro_batches: usize,
    costs: CostsReport,
    makespan: f64,
    /// Total idle time over p × makespan.
    bubble_fraction: f64,
    /// (p − 1) / (m + p − 1): GPipe's and 1F1B's bubble with free transfers.
    ideal_bubble_fraction: f64,
    peak_stash: Vec<usize>,
    per_stage: Vec<StageReport>,
    /// [`render::timeline`] of the simulation.
    grid: String,
    /// The lowered plan's text form, with `--lowered`.
    #[serde(skip_serializing_if = "Option::is_none")]
    lowered_plan: Option<String>,
}

#[derive(Debug, Serialize)]
struct CostsReport {
    forward: f64,
    backward: f64,
    transfer: f64,
}

#[derive(Debug, Serialize)]
struct StageReport {
    stage: StageId,
    busy: f64,
    idle: f64,
    bubble_fraction: f64,
    peak_stash: usize,
}

impl Report {
    fn build(args: &PlanArgs) -> Result<Self, Failure> {
        let costs = costs(args).map_err(Failure::usage)?;
        let schedule = ScheduleKind::from(args.schedule);
        // The schedule refuses only shapes (zero stages or micro-batches): the flags' fault.
        let compute = schedule
            .plan(args.stages, args.micro_batches)
            .map_err(Failure::usage)?;
        let plan = lower(&compute, Lowering::default());
        // `simulate` validates the plan first: an invalid one is an error here, not a hang.
        let sim: Simulation = simulate(&plan, &costs)?;
        let (p, m) = (args.stages, args.micro_batches);
        Ok(Self {
            schedule: schedule.to_string(),
            stages: p,
            micro_batches: m,
            costs: CostsReport {
                forward: args.forward_cost,
                backward: args.backward_cost,
                transfer: args.transfer_cost,
            },
            makespan: sim.makespan,
            bubble_fraction: sim.bubble_fraction,
            ideal_bubble_fraction: (p - 1) as f64 / (m + p - 1) as f64,
            peak_stash: sim.stages.iter().map(|s| s.peak_stash).collect(),
            per_stage: sim
                .stages
                .iter()
                .map(|s| StageReport {
                    stage: s.stage,
                    busy: s.busy,
                    idle: s.idle,
                    bubble_fraction: s.bubble_fraction,
                    peak_stash: s.peak_stash,
                })
                .collect(),
            grid: render::timeline(&sim),
            lowered_plan: args.lowered.then(|| plan.to_string()),
        })
    }

    /// The text format: header, grid, per-stage table, totals, and the lowered plan if asked.
    fn text(&self) -> String {
        let (p, m) = (self.stages, self.micro_batches);
        let c = &self.costs;
        let mut out = format!(
            "plan: {}, {p} stages, {m} micro-batches; costs per micro-batch and stage: \
             forward {}, backward {}, transfer {}\n\n",
            self.schedule,
            num(c.forward),
            num(c.backward),
            num(c.transfer),
        );
        // The grid's column is the shortest compute action (see `render::timeline`).
        let unit = [c.forward, c.backward]
            .into_iter()
            .filter(|&t| t > 0.0)
            .reduce(f64::min);
        match unit {
            Some(unit) => {
                out += &self.grid;
                // Transfers shift starts off the column grid; render rounds them to a column.
                let rounded = if c.transfer > 0.0 {
                    ", starts rounded to a column"
                } else {
                    ""
                };
                out += &format!(
                    "(one column = {}; F forward, B backward, . idle; transfers not drawn{rounded})\n\n",
                    num(unit)
                );
            }
            None => out += "(no grid: forward and backward both cost 0)\n\n",
        }
        let headers = ["stage", "busy", "idle", "bubble", "peak stash"];
        let rows: Vec<[String; 5]> = self
            .per_stage
            .iter()
            .map(|s| {
                [
                    s.stage.index().to_string(),
                    num(s.busy),
                    num(s.idle),
                    percent(s.bubble_fraction),
                    s.peak_stash.to_string(),
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..headers.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].len())
                    .chain([headers[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[&str]| {
            let cells: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(cell, &w)| format!("{cell:>w$}"))
                .collect();
            cells.join("  ") + "\n"
        };
        out += &line(&headers);
        for row in &rows {
            out += &line(&row.iter().map(String::as_str).collect::<Vec<_>>());
        }
        out += &format!(
            "\nbubble    {} of {p} stages x makespan (ideal (p-1)/(m+p-1) = {}/{} = {})\n",
            percent(self.bubble_fraction),
            p - 1,
            m + p - 1,
            percent(self.ideal_bubble_fraction),
        );
        out += &format!("makespan  {}\n", num(self.makespan));
        if let Some(plan) = &self.lowered_plan {
            out += "\nlowered plan:\n";
            out += plan;
        }
        out
    }
}

/// A time or cost for people: at most three decimals, no trailing zeros (`24`, `26.1`).
fn num(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// A fraction as a percentage with two decimals (`27.27 %`).
fn percent(fraction: f64) -> String {
    format!("{:.2} %", fraction * 100.0)
}
