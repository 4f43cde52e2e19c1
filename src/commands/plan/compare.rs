//! Every schedule side by side for one shape and one set of costs ([`Comparison`]): what
//! `pipetrain plan --compare` prints.
//!
//! ```
//! use pipetrain::commands::plan::{PlanCosts, compare};
//!
//! let c = compare(4, 8, 2, &PlanCosts::default())?;
//! let zb_h1 = c.schedules.iter().find(|r| r.schedule == "zb-h1").unwrap();
//! assert!(zb_h1.speedup_over_1f1b > 1.0);
//! assert!(c.text().starts_with("compare: 4 stages, 8 micro-batches"));
//! # Ok::<(), pipetrain::Error>(())
//! ```
//!
//! Speed-up is 1F1B's makespan over the schedule's: the throughput ratio the simulator predicts
//! with these costs. Interleaved 1F1B and zero bubble (a chunk costing 1/v of a stage) have
//! rows when the micro-batches are a multiple of the stages and `virtual_stages` ≥ 2, looped BFS
//! when `virtual_stages` ≥ 2, DualPipeV when the micro-batches are at least twice the stages;
//! their and ZB-V's peak stash count chunks (half a stage for ZB-V and DualPipeV).

use pipetrain_schedules::{Lowering, Plan, ScheduleKind, lower, simulate};

use crate::commands::plan::{PlanCosts, columns, num, percent};
use crate::error::Result;

/// One schedule's row of a [`Comparison`].
#[derive(Clone, Debug)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct ScheduleRow {
    /// The schedule's name (`1f1b`, `interleaved-v2`, …).
    pub schedule: String,
    /// The dry run's makespan.
    pub makespan: f64,
    /// Total idle time over p × makespan.
    pub bubble_fraction: f64,
    /// 1F1B's makespan over this one's.
    pub speedup_over_1f1b: f64,
    /// Most micro-batches (chunks) each stage holds at once.
    pub peak_stash: Vec<usize>,
}

/// Every schedule dry-run for one shape and one set of costs.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct Comparison {
    /// Pipeline stages.
    pub stages: usize,
    /// Micro-batches per step.
    pub micro_batches: usize,
    /// One micro-batch's forward on one stage.
    pub forward_cost: f64,
    /// Its whole backward.
    pub backward_cost: f64,
    /// The weight gradient's part of the backward.
    pub weight_cost: f64,
    /// A transfer between neighbouring stages.
    pub transfer_cost: f64,
    /// One row per schedule.
    pub schedules: Vec<ScheduleRow>,
    /// The schedules without a row, each with why (the shape does not fit it).
    pub left_out: Vec<(String, String)>,
}

/// Dry-runs GPipe, 1F1B, ZB-H1, ZB-2P, ZB-V, V-Min, V-Half, (where the micro-batches make whole rounds of the
/// stages) interleaved 1F1B and zero bubble, looped BFS with `virtual_stages` chunks per rank,
/// and (from 2 micro-batches per stage on) DualPipeV, at `stages` × `micro_batches` under
/// `costs`.
///
/// # Errors
/// A shape the schedules refuse ([`Error::Schedule`](crate::Error::Schedule)), or a bad cost
/// ([`CommandError::PlanCost`](crate::CommandError::PlanCost)).
pub fn compare(
    stages: usize,
    micro_batches: usize,
    virtual_stages: usize,
    costs: &PlanCosts,
) -> Result<Comparison> {
    let (p, m) = (stages, micro_batches);
    let costs_of = |plan: &Plan| costs.costs(plan.stages(), plan.ranks());
    let interleaved = ScheduleKind::Interleaved { virtual_stages };
    let runs_interleaved = m % p.max(1) == 0 && virtual_stages >= 2;
    let kinds = ScheduleKind::ALL
        .into_iter()
        .chain([ScheduleKind::ZbV, ScheduleKind::VMin, ScheduleKind::VHalf])
        .chain(runs_interleaved.then_some(interleaved))
        .chain(runs_interleaved.then_some(ScheduleKind::InterleavedZb { virtual_stages }))
        .chain((virtual_stages >= 2).then_some(ScheduleKind::LoopedBfs { virtual_stages }))
        .chain((m >= 2 * p).then_some(ScheduleKind::DualPipeV));
    // What has no row, and why: the shape does not fit it.
    let chunks = format!("{virtual_stages} chunk(s) per rank: it needs 2 or more");
    let rounds = match virtual_stages >= 2 {
        true => format!(
            "the micro-batches ({m}) are not a multiple of the stages ({p}): it runs whole \
             rounds"
        ),
        false => chunks.clone(),
    };
    let dual = format!("the micro-batches ({m}) are fewer than twice the stages ({p})");
    let left_out: Vec<(String, String)> = [
        (!runs_interleaved, interleaved, rounds.clone()),
        (
            !runs_interleaved,
            ScheduleKind::InterleavedZb { virtual_stages },
            rounds,
        ),
        (
            virtual_stages < 2,
            ScheduleKind::LoopedBfs { virtual_stages },
            chunks,
        ),
        (m < 2 * p, ScheduleKind::DualPipeV, dual),
    ]
    .into_iter()
    .filter(|(out, _, _)| *out)
    .map(|(_, kind, why)| (kind.to_string(), why))
    .collect();
    let mut rows = Vec::new();
    for kind in kinds {
        let plan = lower(&kind.plan(p, m)?, Lowering::default());
        let sim = simulate(&plan, &costs_of(&plan)?)?;
        rows.push(ScheduleRow {
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
    let sim_costs = costs_of(&ScheduleKind::OneFOneB.plan(p, m)?)?;
    Ok(Comparison {
        stages: p,
        micro_batches: m,
        forward_cost: costs.forward,
        backward_cost: costs.backward,
        weight_cost: costs.backward * sim_costs.weight_fraction,
        transfer_cost: costs.transfer,
        schedules: rows,
        left_out,
    })
}

impl Comparison {
    /// The comparison as a table, with a header line naming the shape and the costs.
    pub fn text(&self) -> String {
        let header = format!(
            "compare: {} stages, {} micro-batches; costs per micro-batch and stage: forward {}, \
             backward {} (weight gradient {}), transfer {}\n\n",
            self.stages,
            self.micro_batches,
            num(self.forward_cost),
            num(self.backward_cost),
            num(self.weight_cost),
            num(self.transfer_cost),
        );
        let rows: Vec<Vec<String>> = self
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
        let left_out: String = self
            .left_out
            .iter()
            .map(|(schedule, why)| format!("not compared: {schedule}: {why}\n"))
            .collect();
        header + &columns(&headers, &rows) + &left_out
    }
}
