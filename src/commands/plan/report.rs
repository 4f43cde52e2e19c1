//! [`PlanReport`]: a plan lowered, validated and dry-run, as data and as text.

use pipetrain_schedules::{
    Action, ActionKind, Costs, Lowering, Plan, ScheduleKind, Simulation, SkipRoute, StageId, Zero,
    lower, render, route_skips, simulate,
};

use super::costs::PlanCosts;
use super::format::{columns, num, percent};
use crate::error::Result;

/// What a report is built with besides the plan.
#[derive(Clone, Debug, Default)]
pub struct PlanSettings {
    /// The costs it is simulated under.
    pub costs: PlanCosts,
    /// Skips sent straight from the stashing to the popping stage: the plan gets their
    /// transfers and the report their flows.
    pub skips: Vec<SkipRoute>,
    /// Whether the report holds the lowered plan's text form.
    pub lowered: bool,
    /// The ZeRO level the plan is lowered for: levels 2 and 3 add the reduce (`RG`), unshard
    /// (`US`) and reshard (`RS`) actions, and the report then holds the lowered plan.
    pub zero: Zero,
}

/// What a plan does under its costs: the makespan, the bubble (total and per stage), the
/// stash, the grid; as data (serializable with the `commands` feature) and as
/// [`text`](PlanReport::text).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct PlanReport {
    /// The schedule's name, or the plan file's path.
    pub schedule: String,
    /// Ranks (p).
    pub stages: usize,
    /// Micro-batches per step (m).
    pub micro_batches: usize,
    /// The costs, as given.
    pub costs: CostsReport,
    /// The simulated step time.
    pub makespan: f64,
    /// Total idle time over p × makespan.
    pub bubble_fraction: f64,
    /// Stages per worker (interleaved's v; else 1).
    pub virtual_stages: usize,
    /// (p − 1) / (v·m + p − 1): GPipe's and 1F1B's bubble with free transfers (v = 1), and
    /// interleaved 1F1B's.
    pub ideal_bubble_fraction: f64,
    /// Per stage: the most micro-batches stashed at once.
    pub peak_stash: Vec<usize>,
    /// One line per stage.
    pub per_stage: Vec<StageLine>,
    /// [`render::timeline`] of the simulation; empty when it is larger than [`MAX_GRID_BYTES`]
    /// (see `grid_omitted`).
    pub grid: String,
    /// The grid's size when it was too large to draw, and so left out.
    #[cfg_attr(feature = "commands", serde(skip_serializing_if = "Option::is_none"))]
    pub grid_omitted: Option<GridSize>,
    /// The grid's column: the shortest compute action (see [`render::timeline`]).
    #[cfg_attr(feature = "commands", serde(skip))]
    pub unit: Option<f64>,
    /// The stage pairs that exchange skips.
    pub skip_routes: Vec<SkipRoute>,
    /// [`render::skips`]: the skip flows.
    #[cfg_attr(feature = "commands", serde(skip))]
    pub skip_flows: String,
    /// The lowered plan's text form, when asked for (or lowered for ZeRO-2/3).
    #[cfg_attr(feature = "commands", serde(skip_serializing_if = "Option::is_none"))]
    pub lowered_plan: Option<String>,
    /// The ZeRO level the plan was lowered for (0 unless 2 or 3 was asked for).
    pub zero: u8,
    /// Under ZeRO-2/3, per stage: where the schedule keeps the stage's whole gradient rather
    /// than its shard (from its first weight gradient to its `sRG`).
    #[cfg_attr(feature = "commands", serde(skip_serializing_if = "Vec::is_empty"))]
    pub whole_gradients: Vec<GradientWindow>,
    /// For a plan with overlaps (DualPipeV's pairs, `0F3+3B1`): the step on workers that run
    /// each pair at once. The rest of the report runs them in sequence, as pipetrain's workers
    /// do.
    #[cfg_attr(feature = "commands", serde(skip_serializing_if = "Option::is_none"))]
    pub overlapped: Option<Overlapped>,
    /// For a plan of several chunks per worker (whose `peak stash` counts chunks): each
    /// worker's peak in stages' activations, beside 1F1B's at the same shape.
    #[cfg_attr(feature = "commands", serde(skip_serializing_if = "Option::is_none"))]
    pub stash_in_stages: Option<StashInStages>,
}

/// A multi-chunk plan's peak stash per worker in stages' activations (a chunk is 1/v of a
/// stage), beside 1F1B's over the same ranks and micro-batches.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct StashInStages {
    /// Per worker: its peak stash in chunks over v.
    pub per_worker: Vec<f64>,
    /// Per worker: 1F1B's peak stash (one stage a worker) at the same p and m.
    pub one_f_one_b: Vec<usize>,
}

/// A plan's step on workers that can overlap ([`Costs::overlaps`](pipetrain_schedules::Costs)):
/// each overlap takes max(F, B), not F + B.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct Overlapped {
    /// How many overlaps the plan holds.
    pub overlaps: usize,
    /// The simulated step time.
    pub makespan: f64,
    /// Total idle time over p × makespan.
    pub bubble_fraction: f64,
}

/// The largest grid a report draws: 4 MiB of text, some 40,000 lines of a terminal. A grid
/// grows with the stages times the makespan over the shortest action; above this it is left
/// out, and the report holds the rest (`plan --stages 10000 --micro-batches 1` once drew 1.8 GB,
/// and costs 1e6 apart 192 MB).
pub const MAX_GRID_BYTES: u64 = 4 << 20;

/// How large a grid left out of a report would have been ([`render::timeline_size`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct GridSize {
    /// Rows: one per stage (per rank).
    pub rows: usize,
    /// Columns: the makespan over the shortest compute action.
    pub columns: u64,
    /// Its text, in bytes.
    pub bytes: u64,
}

/// The costs a report was simulated under, as given.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct CostsReport {
    /// One micro-batch's forward on one stage.
    pub forward: f64,
    /// Its full backward.
    pub backward: f64,
    /// The weight gradient's part of `backward`.
    pub weight: f64,
    /// A transfer to the neighbouring stage.
    pub transfer: f64,
}

/// One stage's line of the report.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct StageLine {
    /// The stage (rank).
    pub stage: StageId,
    /// Time it computes.
    pub busy: f64,
    /// Time it waits.
    pub idle: f64,
    /// `idle` over the makespan.
    pub bubble_fraction: f64,
    /// The most micro-batches it stashed at once.
    pub peak_stash: usize,
}

impl PlanReport {
    /// Lowers `compute` (named `schedule`) with `settings.skips` routed, validates and
    /// simulates it under `settings.costs`.
    ///
    /// # Errors
    /// [`CommandError::PlanCost`](crate::CommandError::PlanCost) for a bad cost, [`Error::Schedule`](crate::Error::Schedule) for a skip route the plan cannot
    /// take or a plan that does not validate.
    pub fn build(schedule: String, compute: &Plan, settings: &PlanSettings) -> Result<Self> {
        let (p, m) = (compute.ranks(), compute.micro_batches());
        let v = compute.stages() / p.max(1);
        let given = &settings.costs;
        let costs = given.costs(compute.stages(), p)?;
        let routed = route_skips(compute, &settings.skips)?;
        let lowering = Lowering {
            zero: settings.zero,
            ..Lowering::default()
        };
        let plan = lower(&routed, lowering);
        // `simulate` validates the plan first: an invalid one is an error here, not a hang.
        let sim: Simulation = simulate(&plan, &costs)?;
        let overlaps = plan
            .actions()
            .filter(|a| a.kind == ActionKind::Overlap)
            .count();
        let overlapped = match overlaps {
            0 => None,
            _ => {
                let at_once = simulate(&plan, &costs.clone().with_overlaps(true))?;
                Some(Overlapped {
                    overlaps,
                    makespan: at_once.makespan,
                    bubble_fraction: at_once.bubble_fraction,
                })
            }
        };
        let stash_in_stages = match v {
            0 | 1 => None,
            _ => {
                let one = lower(&ScheduleKind::OneFOneB.plan(p, m)?, Lowering::default());
                let one = simulate(&one, &Costs::uniform(p, 1.0, 2.0))?;
                Some(StashInStages {
                    per_worker: sim
                        .stages
                        .iter()
                        .map(|s| s.peak_stash as f64 / v as f64)
                        .collect(),
                    one_f_one_b: one.stages.iter().map(|s| s.peak_stash).collect(),
                })
            }
        };
        let size = render::timeline_size(&sim);
        let drawn = size.bytes <= MAX_GRID_BYTES;
        Ok(Self {
            schedule,
            stages: p,
            micro_batches: m,
            costs: CostsReport {
                forward: given.forward,
                backward: given.backward,
                weight: given.backward * costs.weight_fraction,
                transfer: given.transfer,
            },
            makespan: sim.makespan,
            bubble_fraction: sim.bubble_fraction,
            virtual_stages: v,
            ideal_bubble_fraction: (p - 1) as f64 / (v * m + p - 1) as f64,
            peak_stash: sim.stages.iter().map(|s| s.peak_stash).collect(),
            per_stage: sim
                .stages
                .iter()
                .map(|s| StageLine {
                    stage: s.stage,
                    busy: s.busy,
                    idle: s.idle,
                    bubble_fraction: s.bubble_fraction,
                    peak_stash: s.peak_stash,
                })
                .collect(),
            grid: match drawn {
                true => render::timeline(&sim),
                false => String::new(),
            },
            grid_omitted: (!drawn).then_some(GridSize {
                rows: size.rows,
                columns: size.columns,
                bytes: size.bytes,
            }),
            unit: sim
                .stages
                .iter()
                .flat_map(|s| &s.timeline)
                .filter(|slot| slot.action.kind.is_compute() && slot.end > slot.start)
                .map(|slot| slot.end - slot.start)
                .reduce(f64::min),
            skip_routes: plan.skip_routes(),
            skip_flows: render::skips(&plan),
            lowered_plan: (settings.lowered || settings.zero.shards_gradients())
                .then(|| plan.to_string()),
            zero: settings.zero.level(),
            whole_gradients: match settings.zero.shards_gradients() {
                true => gradient_windows(&plan),
                false => Vec::new(),
            },
            overlapped,
            stash_in_stages,
        })
    }

    /// The text format: header, grid, per-stage table, totals, and the lowered plan if asked.
    pub fn text(&self) -> String {
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
        match (self.unit, self.grid_omitted) {
            (_, Some(size)) => {
                out += &format!(
                    "(no grid: {} stages by {} columns would take {:.1} MiB, above the {} MiB a \
                     grid is drawn in; fewer stages or micro-batches, or costs closer together, \
                     make it smaller)\n\n",
                    size.rows,
                    size.columns,
                    size.bytes as f64 / f64::from(1u32 << 20),
                    MAX_GRID_BYTES >> 20
                );
            }
            (Some(unit), None) => {
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
            (None, None) => out += "(no grid: every compute action costs 0)\n\n",
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
        out += &columns(&["stage", "busy", "idle", "bubble", "peak stash"], &rows);
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
        if let Some(o) = &self.overlapped {
            out += &format!(
                "overlaps  {} pairs, run above in sequence (F + B, as pipetrain's workers run \
                 them); on workers that overlap each pair (max(F, B)): makespan {}, bubble {}\n",
                o.overlaps,
                num(o.makespan),
                percent(o.bubble_fraction),
            );
        }
        if let Some(s) = &self.stash_in_stages {
            let list = |v: Vec<String>| v.join(" ");
            out += &format!(
                "stash     per worker in stages' activations (a chunk is 1/{v} of a stage): {}; \
                 1f1b's at this shape: {}\n",
                list(s.per_worker.iter().map(|&x| num(x)).collect()),
                list(s.one_f_one_b.iter().map(ToString::to_string).collect()),
            );
        }
        if !self.skip_flows.is_empty() {
            out += "\nskips, straight from the stashing to the popping stage:\n";
            out += &self.skip_flows;
        }
        if let Some(plan) = &self.lowered_plan {
            out += &match self.zero {
                2 => "\nlowered plan (ZeRO-2: sRG reduces stage s's gradients to their owners \
                      after its last weight gradient; sUS hands the owners' updated values to \
                      every replica after sOPT):\n"
                    .to_string(),
                3 => "\nlowered plan (ZeRO-3: stage s's parameters are whole only from sUS to \
                      sRS, after its last computation that reads them; sW may follow it; sRG \
                      reduces its gradients to their owners):\n"
                    .to_string(),
                _ => "\nlowered plan:\n".to_string(),
            };
            out += plan;
        }
        if !self.whole_gradients.is_empty() {
            out += "whole gradients (the schedule accumulates each micro-batch's into them; the \
                    shard only after sRG):\n";
            for w in &self.whole_gradients {
                out += &format!(
                    "  stage {}: {} of its {} actions, from `{}` to `{}`\n",
                    w.stage.index(),
                    w.held,
                    w.actions,
                    w.from,
                    w.to
                );
            }
        }
        out
    }
}

/// Where a ZeRO-2/3 plan keeps a stage's whole gradient ([`PlanReport::whole_gradients`]).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "commands", derive(serde::Serialize))]
pub struct GradientWindow {
    /// The stage.
    pub stage: StageId,
    /// Its actions from its first weight gradient (a `B` or `W`) up to its reduce (`sRG`).
    pub held: usize,
    /// All its actions in the step.
    pub actions: usize,
    /// The first weight gradient's text.
    pub from: String,
    /// The reduce's text.
    pub to: String,
}

/// Per stage of `plan` (lowered for ZeRO-2/3), the window from its first weight gradient to its
/// `sRG`, counted in its own actions.
fn gradient_windows(plan: &Plan) -> Vec<GradientWindow> {
    StageId::range(plan.stages())
        .filter_map(|stage| {
            let own: Vec<Action> = plan
                .programs()
                .iter()
                .flatten()
                .flat_map(|a| a.in_sequence())
                .filter(|a| a.stage == stage)
                .collect();
            let first = own.iter().position(|a| {
                matches!(a.kind, ActionKind::Backward | ActionKind::BackwardWeight)
            })?;
            let reduce = own.iter().position(|a| a.kind == ActionKind::ReduceGrad)?;
            Some(GradientWindow {
                stage,
                held: reduce - first,
                actions: own.len(),
                from: own[first].to_string(),
                to: own[reduce].to_string(),
            })
        })
        .collect()
}
