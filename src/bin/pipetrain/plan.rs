//! `pipetrain plan`: build a schedule's plan, lower it, dry-run it, and print what it costs.
//!
//! Nothing here touches a device or starts a thread: the schedule generator emits the compute
//! plan, [`lower`] adds the sends and receives (so `--transfer-cost` applies), and [`simulate`]
//! validates the lowered plan and dry-runs it. The result is gathered once into a [`Report`],
//! which is then printed as text (grid, per-stage table, totals) or as JSON.
//!
//! `--format csv` prints the compute plan itself, one row of actions per stage: the file
//! `train --plan FILE` runs and `plan --plan FILE` reads back. `--compare` puts every schedule
//! side by side ([`crate::compare`]).
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
use std::path::PathBuf;

use pipetrain_schedules::{
    Costs, Lowering, Plan, PlanFile, Simulation, SkipRoute, StageId, lower, render, route_skips,
    simulate,
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
    /// Chunks of the model per worker under --schedule interleaved (v ≥ 2); costs are per
    /// worker's share of the model, so a chunk costs 1/v of them.
    #[arg(long, default_value_t = 2, value_name = "V")]
    pub virtual_stages: usize,
    /// Read a compute plan (CSV or text form, as `--format csv` writes) instead of generating
    /// one; its rows and micro-batches give --stages and --micro-batches.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["schedule", "compare"])]
    pub plan: Option<PathBuf>,
    /// Compare every schedule in one table: makespan, bubble, peak stash per stage.
    #[arg(long)]
    pub compare: bool,
    /// Time of one micro-batch's forward on one stage.
    #[arg(long, default_value_t = 1.0, value_name = "F", value_parser = parse_cost, allow_negative_numbers = true)]
    pub forward_cost: f64,
    /// Time of one micro-batch's full backward on one stage (input and weight gradients).
    #[arg(long, default_value_t = 2.0, value_name = "B", value_parser = parse_cost, allow_negative_numbers = true)]
    pub backward_cost: f64,
    /// The part of --backward-cost that the weight gradient (W) takes when the backward is
    /// split; the input gradient (I) takes the rest. Default: half.
    #[arg(long, value_name = "W", value_parser = parse_cost, allow_negative_numbers = true)]
    pub weight_cost: Option<f64>,
    /// Time for an activation or a gradient to reach the neighbouring stage.
    #[arg(long, default_value_t = 0.0, value_name = "T", value_parser = parse_cost, allow_negative_numbers = true)]
    pub transfer_cost: f64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also print the lowered plan's text form (one line per stage; it parses back to the plan).
    #[arg(long)]
    pub lowered: bool,
    /// Skips sent straight from stage STASH to stage POP (a layer on STASH stashes what a layer
    /// on POP pops): the plan gets their transfers and prints their flows. Repeat or separate
    /// with commas, e.g. `--skip 0:3,1:2`.
    #[arg(
        long,
        value_name = "STASH:POP",
        value_delimiter = ',',
        conflicts_with = "compare"
    )]
    pub skip: Vec<SkipRoute>,
}

/// How `pipetrain plan` prints its report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Grid, per-stage table and totals, for people.
    Text,
    /// One pretty-printed JSON object, for scripts.
    Json,
    /// The compute plan itself, one row of actions per stage (what `train --plan` reads).
    Csv,
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
    /// `--lowered` with `--format csv`, whose plan is compute only.
    #[error(
        "--lowered with --format csv: a plan file holds compute actions only (pipetrain adds the \
         communication); drop --lowered, or use --format text to see the lowered plan"
    )]
    LoweredCsv,
}

/// Runs `pipetrain plan`.
///
/// # Errors
/// A shape or cost the schedule refuses (usage); a plan that fails to simulate, or stdout that
/// cannot be written (runtime).
pub fn run(args: &PlanArgs) -> Result<Exit, Failure> {
    if args.plan.is_none() {
        check_size(args, args.stages, args.micro_batches)?;
    }
    let text = if args.compare {
        crate::compare::text_or_json(args)?
    } else {
        let (name, compute) = compute_plan(args)?;
        match args.format {
            Format::Csv if args.lowered => return Err(Failure::usage(PlanError::LoweredCsv)),
            Format::Csv => PlanFile::csv(&compute),
            Format::Text => Report::build(args, name, &compute)?.text(),
            Format::Json => {
                serde_json::to_string_pretty(&Report::build(args, name, &compute)?)? + "\n"
            }
        }
    };
    match io::stdout().lock().write_all(text.as_bytes()) {
        // `pipetrain plan | head` is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Exit::Success),
        other => other.map(|()| Exit::Success).map_err(Into::into),
    }
}

/// Memory per cell (stage × micro-batch) of the plan, rounded up from the peak RSS of the
/// debug binary (`/usr/bin/time`, 1F1B): `--format text` and `json` took 145 MB and 233 MB at
/// 100 and 200 stages × 1000 micro-batches (about 1.2 KB a cell over the 26 MB of an empty
/// plan; 12 GB at 1000 × 10000 in the issue), `--format csv` 46 MB and 70 MB at 200 and 400 × 1000
/// (about 0.12 KB a cell).
const REPORT_BYTES_PER_CELL: u128 = 1400;
/// See [`REPORT_BYTES_PER_CELL`].
const CSV_BYTES_PER_CELL: u128 = 130;
/// Most cells (stages × micro-batches × chunks, over every plan built) a text or JSON report
/// covers, whatever the memory: its grid has a line per stage and a column per time step.
const MAX_REPORT_CELLS: u128 = 1 << 20;

/// Refuses a plan of `stages` × `micro_batches` whose report this machine cannot hold (see
/// [`crate::footprint`]): `plan --stages 1000 --micro-batches 10000` once needed over 12 GB.
///
/// # Errors
/// Usage: the estimate, what is available, and the remedy.
fn check_size(args: &PlanArgs, stages: usize, micro_batches: usize) -> Result<(), Failure> {
    let v = match args.schedule.kind(args.virtual_stages) {
        pipetrain::ScheduleKind::Interleaved { virtual_stages } => virtual_stages.max(1),
        _ => 1,
    };
    let cells = stages as u128 * micro_batches as u128 * v as u128;
    // --compare builds every schedule.
    let plans = if args.compare { 6 } else { 1 };
    let per_cell = match args.format {
        Format::Csv if !args.compare => CSV_BYTES_PER_CELL,
        _ => REPORT_BYTES_PER_CELL,
    };
    let needed = cells * per_cell * plans;
    let why = match crate::footprint::exceeds(needed) {
        Some(why) => why,
        // A grid no one can read, a JSON report of gigabytes: bounded whatever the memory.
        None if per_cell == REPORT_BYTES_PER_CELL && cells * plans > MAX_REPORT_CELLS => format!(
            "more than a report is for (at most {MAX_REPORT_CELLS} cells across the plans \
             built)"
        ),
        None => return Ok(()),
    };
    let csv = match args.format {
        Format::Csv => String::new(),
        _ => format!(
            ", or --format csv for the plan alone (about {})",
            crate::footprint::gib(cells * CSV_BYTES_PER_CELL)
        ),
    };
    Err(Failure::usage(format!(
        "--stages {stages} --micro-batches {micro_batches}: a plan of {cells} stage × \
         micro-batch cells needs about {} to build and print, {why}; use fewer stages or \
         micro-batches{csv}",
        crate::footprint::gib(needed)
    )))
}

/// The compute plan to report on and its name: read from `--plan`, or generated.
fn compute_plan(args: &PlanArgs) -> Result<(String, Plan), Failure> {
    if let Some(path) = &args.plan {
        return Ok((
            path.display().to_string(),
            crate::schedule::read_plan(path)?,
        ));
    }
    let schedule = args.schedule.kind(args.virtual_stages);
    // The schedule refuses only shapes (zero stages or micro-batches): the flags' fault.
    let plan = schedule
        .plan(args.stages, args.micro_batches)
        .map_err(Failure::usage)?;
    Ok((schedule.to_string(), plan))
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

/// The costs given on the command line for a plan of `stages` model stages on `ranks` ranks
/// (a rank's stages share its costs), checked again here for callers that skip clap.
pub(crate) fn costs(args: &PlanArgs, stages: usize, ranks: usize) -> Result<Costs, PlanError> {
    let weight = args.weight_cost.unwrap_or(args.backward_cost / 2.0);
    for (flag, value) in [
        ("forward-cost", args.forward_cost),
        ("backward-cost", args.backward_cost),
        ("weight-cost", weight),
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
    if weight > args.backward_cost {
        return Err(PlanError::BadCost {
            flag: "weight-cost",
            value: weight,
            reason: format!(
                "the weight gradient is part of the backward: give at most --backward-cost {}",
                num(args.backward_cost)
            ),
        });
    }
    let chunks = (stages / ranks.max(1)).max(1) as f64;
    let mut costs = Costs::uniform(
        stages,
        args.forward_cost / chunks,
        args.backward_cost / chunks,
    );
    costs.transfer = args.transfer_cost;
    if args.backward_cost > 0.0 {
        costs.weight_fraction = weight / args.backward_cost;
    }
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
    /// Stages per worker (interleaved's v; else 1).
    virtual_stages: usize,
    /// (p − 1) / (v·m + p − 1): GPipe's and 1F1B's bubble with free transfers (v = 1), and
    /// interleaved 1F1B's.
    ideal_bubble_fraction: f64,
    peak_stash: Vec<usize>,
    per_stage: Vec<StageReport>,
    /// [`render::timeline`] of the simulation.
    grid: String,
    /// The grid's column: the shortest compute action (see [`render::timeline`]).
    #[serde(skip)]
    unit: Option<f64>,
    /// The stage pairs that exchange skips (`--skip`).
    skip_routes: Vec<SkipRoute>,
    /// [`render::skips`]: the skip flows.
    #[serde(skip)]
    skip_flows: String,
    /// The lowered plan's text form, with `--lowered`.
    #[serde(skip_serializing_if = "Option::is_none")]
    lowered_plan: Option<String>,
}

#[derive(Debug, Serialize)]
struct CostsReport {
    forward: f64,
    backward: f64,
    /// The weight gradient's part of `backward`.
    weight: f64,
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
    fn build(args: &PlanArgs, schedule: String, compute: &Plan) -> Result<Self, Failure> {
        let (p, m) = (compute.ranks(), compute.micro_batches());
        let v = compute.stages() / p.max(1);
        let costs = costs(args, compute.stages(), p).map_err(Failure::usage)?;
        let routed = route_skips(compute, &args.skip).map_err(Failure::usage)?;
        let plan = lower(&routed, Lowering::default());
        // `simulate` validates the plan first: an invalid one is an error here, not a hang.
        let sim: Simulation = simulate(&plan, &costs)?;
        Ok(Self {
            schedule,
            stages: p,
            micro_batches: m,
            costs: CostsReport {
                forward: args.forward_cost,
                backward: args.backward_cost,
                weight: args.backward_cost * costs.weight_fraction,
                transfer: args.transfer_cost,
            },
            makespan: sim.makespan,
            bubble_fraction: sim.bubble_fraction,
            virtual_stages: v,
            ideal_bubble_fraction: (p - 1) as f64 / (v * m + p - 1) as f64,
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
            unit: sim
                .stages
                .iter()
                .flat_map(|s| &s.timeline)
                .filter(|slot| slot.action.kind.is_compute() && slot.end > slot.start)
                .map(|slot| slot.end - slot.start)
                .reduce(f64::min),
            skip_routes: plan.skip_routes(),
            skip_flows: render::skips(&plan),
            lowered_plan: args.lowered.then(|| plan.to_string()),
        })
    }

    /// The text format: header, grid, per-stage table, totals, and the lowered plan if asked.
    fn text(&self) -> String {
        let (p, m) = (self.stages, self.micro_batches);
        let c = &self.costs;
        let mut out = format!(
            "plan: {}, {p} stages, {m} micro-batches; costs per micro-batch and stage: \
             forward {}, backward {} (weight gradient {}), transfer {}\n\n",
            self.schedule,
            num(c.forward),
            num(c.backward),
            num(c.weight),
            num(c.transfer),
        );
        match self.unit {
            Some(unit) => {
                out += &self.grid;
                // Transfers shift starts off the column grid; render rounds them to a column.
                let rounded = if c.transfer > 0.0 {
                    ", starts rounded to a column"
                } else {
                    ""
                };
                out += &format!(
                    "(one column = {}; F forward, B backward, I input gradient, W weight gradient, \
                     . idle; transfers not drawn{rounded})\n\n",
                    num(unit)
                );
            }
            None => out += "(no grid: every compute action costs 0)\n\n",
        }
        let rows: Vec<Vec<String>> = self
            .per_stage
            .iter()
            .map(|s| {
                vec![
                    s.stage.index().to_string(),
                    num(s.busy),
                    num(s.idle),
                    percent(s.bubble_fraction),
                    s.peak_stash.to_string(),
                ]
            })
            .collect();
        out += &table(&["stage", "busy", "idle", "bubble", "peak stash"], &rows);
        let (v, formula) = match self.virtual_stages {
            1 => (1, "(p-1)/(m+p-1)"),
            v => (v, "(p-1)/(v*m+p-1)"),
        };
        out += &format!(
            "\nbubble    {} of {p} stages x makespan (ideal {formula} = {}/{} = {})\n",
            percent(self.bubble_fraction),
            p - 1,
            v * m + p - 1,
            percent(self.ideal_bubble_fraction),
        );
        out += &format!("makespan  {}\n", num(self.makespan));
        if !self.skip_flows.is_empty() {
            out += "\nskips, straight from the stashing to the popping stage:\n";
            out += &self.skip_flows;
        }
        if let Some(plan) = &self.lowered_plan {
            out += "\nlowered plan:\n";
            out += plan;
        }
        out
    }
}

/// Right-aligned columns under `headers`, two spaces apart, one line per row.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:>w$}"))
            .collect();
        cells.join("  ") + "\n"
    };
    let mut out = line(&mut headers.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A time or cost for people: at most three decimals, no trailing zeros (`24`, `26.1`).
pub(crate) fn num(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// A fraction as a percentage with two decimals (`27.27 %`).
pub(crate) fn percent(fraction: f64) -> String {
    format!("{:.2} %", fraction * 100.0)
}
