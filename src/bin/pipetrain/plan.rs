//! `pipetrain plan`: build a schedule's plan and print what it costs: the flags mapped onto
//! [`pipetrain::commands::plan`]'s settings, its [`PlanReport`] printed as text (grid, per-stage table,
//! totals) or as JSON.
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

use pipetrain::commands::plan::{PlanCosts, PlanReport, PlanSettings, cost_problem};
use pipetrain::remedy::{Remedy, Setting, Style as _, Value};
use pipetrain_schedules::{Plan, PlanFile, SkipRoute};

use crate::exit::Exit;
use crate::failure::Failure;
use crate::schedule::ScheduleArg;
use crate::style::Flags;

/// Arguments of `pipetrain plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Number of pipeline stages (p) [default: 4; with --plan, the file's].
    #[arg(long, value_name = "P")]
    pub stages: Option<usize>,
    /// Micro-batches per training step (m); m < p is allowed [default: 8; with --plan, the
    /// file's].
    #[arg(long, value_name = "M")]
    pub micro_batches: Option<usize>,
    /// Pipeline schedule.
    #[arg(long, value_enum, default_value_t, ignore_case = true)]
    pub schedule: ScheduleArg,
    /// Chunks of the model per worker under --schedule interleaved, interleaved-zb or looped-bfs
    /// (v ≥ 2); costs are per
    /// worker's share of the model, so a chunk costs 1/v of them [default: 2].
    #[arg(long, value_name = "V")]
    pub virtual_stages: Option<usize>,
    /// Read a compute plan (CSV or text form, as `--format csv` writes) instead of generating
    /// one; its rows and micro-batches give --stages and --micro-batches (given too, they must
    /// match, as `train --plan` requires).
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
    #[arg(long, conflicts_with = "compare")]
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
    /// The ZeRO level to lower the plan for: 2 adds each stage's gradient reduce to the owners
    /// (`sRG`) after its last weight gradient and the owners' updated values to every replica
    /// (`sUS`) after the optimizer step; 3 brackets the stage's computation with the unshard of
    /// its parameters (`sUS`) and their reshard (`sRS`). Prints the lowered plan. (Levels 0 and 1
    /// lower alike.)
    #[arg(
        long,
        value_name = "LEVEL",
        value_parser = clap::value_parser!(u8).range(2..=3),
        conflicts_with = "compare"
    )]
    pub zero: Option<u8>,
}

impl PlanArgs {
    /// `--stages`, or its default.
    pub fn stages(&self) -> usize {
        self.stages.unwrap_or(4)
    }

    /// `--micro-batches`, or its default.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches.unwrap_or(8)
    }

    /// `--virtual-stages`, or its default.
    pub fn virtual_stages(&self) -> usize {
        self.virtual_stages.unwrap_or(2)
    }

    /// `--virtual-stages` given where it changes nothing: beside `--plan` (the file gives its
    /// chunks), or with a schedule that takes no chunk count and no `--compare` (whose
    /// interleaved rows read it).
    ///
    /// # Errors
    /// A usage failure naming the flag, its value and what makes it apply.
    fn check_virtual_stages(&self) -> Result<(), Failure> {
        let Some(v) = self.virtual_stages else {
            return Ok(());
        };
        if self.plan.is_some() {
            return Err(Failure::usage(format!(
                "--virtual-stages {v}: the --plan file gives its own chunks per rank, so it \
                 would change nothing; drop --virtual-stages"
            )));
        }
        let read = self.schedule.kind(v) != self.schedule.kind(v.wrapping_add(1));
        if !self.compare && !read {
            return Err(Failure::usage(format!(
                "--virtual-stages {v} applies to --schedule interleaved, interleaved-zb and \
                 looped-bfs (and --compare) only; this schedule has a fixed number of chunks \
                 per worker: drop it, or add --schedule interleaved"
            )));
        }
        Ok(())
    }
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

/// Runs `pipetrain plan`.
///
/// # Errors
/// A shape or cost the schedule refuses (usage); a plan that fails to simulate, or stdout that
/// cannot be written (runtime).
pub fn run(args: &PlanArgs) -> Result<Exit, Failure> {
    crate::interrupt::exit_on_signal("plan", crate::interrupt::unwritten("", None))?;
    crate::interrupt::hold_for_test("plan");
    args.check_virtual_stages()?;
    if args.plan.is_none() {
        crate::plan_limits::check(args, args.stages(), args.micro_batches())?;
    }
    let text = if args.compare {
        crate::compare::text_or_json(args)?
    } else {
        let (name, compute) = compute_plan(args)?;
        match args.format {
            Format::Csv if args.zero.is_some() => {
                return Err(Failure::usage(
                    "--zero with --format csv: a plan file holds compute actions only (the \
                     ZeRO actions are lowered in, like the communication); drop --zero, or use \
                     --format text to see them",
                ));
            }
            Format::Csv if args.lowered => {
                return Err(Failure::usage(
                    "--lowered with --format csv: a plan file holds compute actions only \
                     (pipetrain adds the communication); drop --lowered, or use --format text \
                     to see the lowered plan",
                ));
            }
            Format::Csv => PlanFile::csv(&compute),
            Format::Text => report(args, name, &compute)?.text(),
            Format::Json => serde_json::to_string_pretty(&report(args, name, &compute)?)? + "\n",
        }
    };
    match io::stdout().lock().write_all(text.as_bytes()) {
        // `pipetrain plan | head` is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Exit::Success),
        other => other.map(|()| Exit::Success).map_err(Into::into),
    }
}

/// The compute plan to report on and its name: read from `--plan`, or generated.
fn compute_plan(args: &PlanArgs) -> Result<(String, Plan), Failure> {
    if let Some(path) = &args.plan {
        let plan = crate::schedule::read_plan(path)?;
        let (p, m) = (plan.ranks(), plan.micro_batches());
        // The flags given that disagree with the file.
        let wrong: Vec<(Setting, usize, usize)> = [
            (Setting::Stages, args.stages, p),
            (Setting::MicroBatches, args.micro_batches, m),
        ]
        .into_iter()
        .filter_map(|(setting, given, own)| Some((setting, given?, own)))
        .filter(|&(_, given, own)| given != own)
        .collect();
        if !wrong.is_empty() {
            let flags: Vec<String> = wrong
                .iter()
                .map(|&(setting, given, _)| Flags.set(setting, &Value::Count(given)))
                .collect();
            let fix = Remedy::one_of([
                Remedy::all_of(
                    (wrong.iter()).map(|&(s, _, own)| Remedy::set(s, Value::Count(own))),
                ),
                Remedy::all_of(wrong.iter().map(|&(s, _, _)| Remedy::Drop(s))),
                Remedy::sentence(format!(
                    "write a plan of that shape with `pipetrain plan --stages {} \
                     --micro-batches {} --format csv`",
                    args.stages.unwrap_or(p),
                    args.micro_batches.unwrap_or(m),
                )),
            ]);
            return Err(Failure::usage(format!(
                "--plan {}: the plan has {p} stage(s) and {m} micro-batch(es), not {}: it runs \
                 its own shape (the flags may be left out); {}",
                path.display(),
                flags.join(" "),
                fix.render(&Flags)
            )));
        }
        crate::plan_limits::check(args, p, m)?;
        return Ok((path.display().to_string(), plan));
    }
    let schedule = args.schedule.kind(args.virtual_stages());
    // The schedule refuses only shapes (zero stages or micro-batches): the flags' fault.
    let plan = schedule
        .plan(args.stages(), args.micro_batches())
        .map_err(Failure::usage)?;
    Ok((schedule.to_string(), plan))
}

/// clap's parser for the `--*-cost` flags: clap names the flag and the text in its error.
fn parse_cost(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number; give a duration >= 0 such as 1.0"))?;
    cost_problem(value).map_or(Ok(value), Err)
}

/// The costs the flags give.
pub(crate) fn costs(args: &PlanArgs) -> PlanCosts {
    PlanCosts {
        forward: args.forward_cost,
        backward: args.backward_cost,
        weight: args.weight_cost,
        transfer: args.transfer_cost,
    }
}

/// The library's error as the flags name it: a bad cost or skip route is the flags' fault.
pub(crate) fn failure(error: pipetrain::Error) -> Failure {
    match error {
        pipetrain::Error::Command(pipetrain::CommandError::PlanCost {
            cost,
            value,
            reason,
        }) => Failure::usage(format!(
            "--{cost}-cost {}: {reason}",
            pipetrain::commands::plan::short(value)
        )),
        e @ pipetrain::Error::Schedule(_) => Failure::usage(e),
        e => Failure::runtime(e),
    }
}

/// The report on `compute` (named `name`) under the flags' costs, skips and `--lowered`.
fn report(args: &PlanArgs, name: String, compute: &Plan) -> Result<PlanReport, Failure> {
    let settings = PlanSettings {
        costs: costs(args),
        skips: args.skip.clone(),
        lowered: args.lowered,
        zero: args
            .zero
            .and_then(pipetrain::schedules::Zero::from_level)
            .unwrap_or_default(),
    };
    PlanReport::build(name, compute, &settings).map_err(failure)
}
