//! `pipetrain plan --compare`: every schedule side by side for one shape and one set of costs.
//!
//! ```text
//! $ pipetrain plan --compare --stages 4 --micro-batches 8
//! compare: 4 stages, 8 micro-batches; costs per micro-batch and stage: forward 1, backward 2 (weight gradient 1), transfer 0
//!
//!       schedule  makespan   bubble  speed-up over 1f1b  peak stash per stage
//!          gpipe        33  27.27 %               1.00x               8 8 8 8
//!           1f1b        33  27.27 %               1.00x               4 3 2 1
//!          zb-h1        27  11.11 %               1.22x               4 4 4 4
//!           zb-v      25.5   5.88 %               1.29x               8 8 8 8
//! interleaved-v2      28.5  15.79 %               1.16x              11 9 7 5
//! ```
//! Speed-up is 1F1B's makespan over the schedule's: the throughput ratio the simulator predicts
//! with these costs. Interleaved (with --virtual-stages v, a chunk costing 1/v of a stage) has
//! a row when the micro-batches are a multiple of the stages; its and ZB-V's peak stash count
//! chunks (half a stage for ZB-V).

use pipetrain_schedules::{Lowering, ScheduleKind, lower, simulate};
use serde::Serialize;

use crate::failure::Failure;
use crate::plan::PlanArgs;
use pipetrain::plan::{columns, num, percent};

/// One schedule's row.
#[derive(Debug, Serialize)]
struct Row {
    schedule: String,
    makespan: f64,
    /// Total idle time over p × makespan.
    bubble_fraction: f64,
    /// 1F1B's makespan over this one's.
    speedup_over_1f1b: f64,
    peak_stash: Vec<usize>,
}

/// The comparison, for JSON.
#[derive(Debug, Serialize)]
struct Comparison {
    stages: usize,
    micro_batches: usize,
    forward_cost: f64,
    backward_cost: f64,
    weight_cost: f64,
    transfer_cost: f64,
    schedules: Vec<Row>,
}

/// The comparison as `args.format` asks (text, or JSON; CSV is one plan's and is refused).
///
/// # Errors
/// A shape or cost the schedules refuse (usage).
pub fn text_or_json(args: &PlanArgs) -> Result<String, Failure> {
    let (p, m) = (args.stages, args.micro_batches);
    let costs_of = |plan: &pipetrain_schedules::Plan| {
        crate::plan::costs(args)
            .costs(plan.stages(), plan.ranks())
            .map_err(crate::plan::failure)
    };
    let mut rows = Vec::new();
    // Interleaved needs m in whole rounds of p: its row is left out otherwise.
    let interleaved = ScheduleKind::Interleaved {
        virtual_stages: args.virtual_stages,
    };
    let runs_interleaved = m % p.max(1) == 0 && args.virtual_stages >= 2;
    let kinds = ScheduleKind::ALL
        .into_iter()
        .chain([ScheduleKind::ZbV])
        .chain(runs_interleaved.then_some(interleaved));
    for kind in kinds {
        let plan = lower(
            &kind.plan(p, m).map_err(Failure::usage)?,
            Lowering::default(),
        );
        let sim = simulate(&plan, &costs_of(&plan)?)?;
        rows.push(Row {
            schedule: kind.to_string(),
            makespan: sim.makespan,
            bubble_fraction: sim.bubble_fraction,
            speedup_over_1f1b: 0.0,
            peak_stash: sim.stages.iter().map(|s| s.peak_stash).collect(),
        });
    }
    let one_f_one_b = ScheduleKind::OneFOneB.to_string();
    let base = rows
        .iter()
        .find(|r| r.schedule == one_f_one_b)
        .map_or(0.0, |r| r.makespan);
    for row in &mut rows {
        row.speedup_over_1f1b = if row.makespan > 0.0 {
            base / row.makespan
        } else {
            1.0
        };
    }
    let costs = costs_of(&ScheduleKind::OneFOneB.plan(p, m).map_err(Failure::usage)?)?;
    let comparison = Comparison {
        stages: p,
        micro_batches: m,
        forward_cost: args.forward_cost,
        backward_cost: args.backward_cost,
        weight_cost: args.backward_cost * costs.weight_fraction,
        transfer_cost: args.transfer_cost,
        schedules: rows,
    };
    match args.format {
        crate::plan::Format::Json => Ok(serde_json::to_string_pretty(&comparison)? + "\n"),
        crate::plan::Format::Text => Ok(text(&comparison)),
        crate::plan::Format::Csv => Err(Failure::usage(
            "--compare with --format csv: CSV holds one plan; use --format text or json, or \
             drop --compare and give --schedule",
        )),
    }
}

fn text(c: &Comparison) -> String {
    let header = format!(
        "compare: {} stages, {} micro-batches; costs per micro-batch and stage: forward {}, \
         backward {} (weight gradient {}), transfer {}\n\n",
        c.stages,
        c.micro_batches,
        num(c.forward_cost),
        num(c.backward_cost),
        num(c.weight_cost),
        num(c.transfer_cost),
    );
    let rows: Vec<Vec<String>> = c
        .schedules
        .iter()
        .map(|r| {
            let stash: Vec<String> = r.peak_stash.iter().map(ToString::to_string).collect();
            vec![
                r.schedule.clone(),
                num(r.makespan),
                percent(r.bubble_fraction),
                format!("{:.2}x", r.speedup_over_1f1b),
                stash.join(" "),
            ]
        })
        .collect();
    let headers = [
        "schedule",
        "makespan",
        "bubble",
        "speed-up over 1f1b",
        "peak stash per stage",
    ];
    header + &columns(&headers, &rows)
}
