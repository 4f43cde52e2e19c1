//! The split a [`Setup`](super::Setup) measures: balance by the layers' times, profiled on one
//! micro-batch, under the memory budget if there is one; and the budget's error with its
//! remedies when nothing fits.

use crate::BuildError;
use pipetrain_engine::{Activation, Layer, Remat, costs};
use pipetrain_partitioner::{
    LayerCost, Partition, PartitionError, partition_by_time, partition_by_time_with,
};
use pipetrain_schedules::{Costs, Lowering, Schedule, Zero, lower, simulate};

use crate::builder::Config;
use crate::error::{Error, Result};
use crate::memory::{self, Bytes};
use crate::remedy::{Remedy, Setting, Value};

/// Measures per-layer costs on `sample` (one micro-batch) and splits into `stages` by time,
/// under the memory budget if there is one.
pub(super) fn measure<L: Layer>(
    c: &Config,
    layers: &[L],
    sample: &Activation,
    stages: usize,
) -> Result<(Partition, Vec<LayerCost>)> {
    let device = &c.devices[0];
    let m = c.runtime.micro_batches;
    let group = memory::weight_group(
        c.runtime.backward,
        c.runtime.precision,
        m,
        c.runtime.schedule.splits_backward(),
    );
    // Each layer's graph as the step keeps it: with the split backward's zeros leaves where
    // its `Linear`s split (a GPT's or a Llama's without a bias: 0.98 of the budget's stage
    // without them measured 1.02 of it).
    let costs = costs::layer_costs_split(layers, sample, device, 5, group > 0)
        .map_err(pipetrain_engine::EngineError::bad_batch)?;
    let Some(budget) = c.memory_budget else {
        return Ok((partition_by_time(&costs, stages, None)?, costs));
    };
    let in_flight = peak_in_flight(&c.runtime.schedule, stages, m)?;
    let slots = memory::optimizer_slots(&c.optimizer);
    let stashed = memory::charged_micro_batches(c.runtime.remat, in_flight);
    let (split, stacks) = match group {
        0 => (vec![0; layers.len()], vec![0; layers.len()]),
        _ => (
            memory::split_bytes_held(layers, sample, device)?,
            costs::split_parts(layers, sample, device)
                .map_err(pipetrain_engine::EngineError::bad_batch)?
                .iter()
                .map(|p| p.stack)
                .collect(),
        ),
    };
    let deferred = memory::deferred_bytes(&split, group);
    let to_end = memory::deferred_to_end(group, m);
    let relu = memory::relu_layers(layers);
    let zero = c.runtime.data_parallel.zero;
    let budgeted = memory::with_headrooms(memory::budget_costs(
        &costs,
        (
            slots,
            state_sharers(c, zero),
            value_holders(c, zero, to_end),
        ),
        stashed,
        (&deferred, to_end),
        c.runtime.precision,
        &relu,
    ));
    let cut = memory::cut_bytes(&costs, &stacks, c.runtime.precision, in_flight, group);
    let partition = partition_by_time_with(&budgeted, stages, Some(budget), |r| cut.of(r));
    let partition = partition.map_err(|e| {
        let trial = Trial {
            c,
            costs: &costs,
            split: &split,
            stacks: &stacks,
            relu: &relu,
            rows: sample.batch_size(),
            budget,
        };
        over_budget(&trial, stages, e, in_flight)
    })?;
    Ok((partition, costs))
}

/// The budget's accounting of one split, tried again under other settings: whether a remedy
/// fits before it is offered.
struct Trial<'a> {
    c: &'a Config,
    /// The layers' costs, measured on one micro-batch of `rows` rows.
    costs: &'a [LayerCost],
    /// Each layer's deferred weight-gradient bytes per micro-batch.
    split: &'a [u64],
    /// Each layer's `W` stack per micro-batch ([`pipetrain_partitioner::CutBytes`]'s).
    stacks: &'a [u64],
    /// Which layers are dense with a ReLU ([`memory::relu_layers`]).
    relu: &'a [bool],
    rows: usize,
    budget: u64,
}

impl Trial<'_> {
    /// What `stages` model stages at `m` micro-batches, `remat` and a weight-gradient group of
    /// `group` (see [`memory::weight_group`]) need beyond the budget: `None` where they fit it,
    /// else the least budget that would do (`u64::MAX` where no split is possible). More
    /// micro-batches than the measured ones have fewer rows each: their activations are scaled
    /// by the rows.
    fn need(&self, stages: usize, m: usize, remat: Remat, group: u64) -> Option<u64> {
        self.need_at(stages, m, remat, group, self.c.runtime.data_parallel.zero)
    }

    /// [`need`](Self::need) at ZeRO level `zero`.
    fn need_at(
        &self,
        stages: usize,
        m: usize,
        remat: Remat,
        group: u64,
        zero: Zero,
    ) -> Option<u64> {
        let c = self.c;
        let Ok(in_flight) = peak_in_flight(&c.runtime.schedule, stages, m) else {
            return Some(u64::MAX);
        };
        let measured = c.runtime.micro_batches;
        let rows = (self.rows * measured).div_ceil(m.max(1)).max(1);
        let scale = |bytes: u64| (bytes as u128 * rows as u128 / self.rows.max(1) as u128) as u64;
        let costs: Vec<LayerCost> = self
            .costs
            .iter()
            .map(|cost| {
                cost.with_memory(cost.param_bytes, scale(cost.activation_bytes))
                    .with_output(scale(cost.output_bytes))
            })
            .collect();
        let split: Vec<u64> = self.split.iter().map(|&b| scale(b)).collect();
        let stacks: Vec<u64> = self.stacks.iter().map(|&b| scale(b)).collect();
        let slots = memory::optimizer_slots(&c.optimizer);
        let stashed = memory::charged_micro_batches(remat, in_flight);
        let deferred = memory::deferred_bytes(&split, group);
        let to_end = memory::deferred_to_end(group, m);
        let budgeted = memory::with_headrooms(memory::budget_costs(
            &costs,
            (
                slots,
                state_sharers(c, zero),
                value_holders(c, zero, to_end),
            ),
            stashed,
            (&deferred, to_end),
            c.runtime.precision,
            self.relu,
        ));
        let cut = memory::cut_bytes(&costs, &stacks, c.runtime.precision, in_flight, group);
        match partition_by_time_with(&budgeted, stages, Some(self.budget), |r| cut.of(r)) {
            Ok(_) => None,
            Err(PartitionError::OverBudget { needed, .. }) => Some(needed),
            Err(_) => Some(u64::MAX),
        }
    }
}

/// Most micro-batches any stage stashes at once under `schedule` with `m` micro-batches.
fn peak_in_flight(schedule: &Schedule, stages: usize, m: usize) -> Result<usize> {
    let plan = lower(&schedule.plan(stages, m)?, Lowering::default());
    let simulated = simulate(&plan, &Costs::uniform(stages, 1.0, 2.0))?;
    Ok(simulated
        .stages
        .iter()
        .map(|s| s.peak_stash)
        .max()
        .unwrap_or(1))
}

/// The partitioner's [`PartitionError::OverBudget`] as the user's [`BuildError::MemoryBudget`](crate::BuildError::MemoryBudget),
/// with the remedies that work: the least budget, and of more stages (the fewest), every
/// micro-batch re-materialized, twice the micro-batches and one micro-batch per weight-gradient
/// group, each tried first and offered where it fits the budget, or with the smaller budget it
/// then needs (`--micro-batches 16` and `--stages 3` were offered where they did not fit, and
/// came back to the same error).
fn over_budget(trial: &Trial<'_>, stages: usize, error: PartitionError, in_flight: usize) -> Error {
    let PartitionError::OverBudget {
        stage,
        layers: range,
        needed,
        budget,
        ..
    } = error
    else {
        return error.into();
    };
    let c = trial.c;
    let schedule = &c.runtime.schedule;
    let (m, remat, layers) = (c.runtime.micro_batches, c.runtime.remat, trial.costs.len());
    let group = memory::weight_group(
        c.runtime.backward,
        c.runtime.precision,
        m,
        schedule.splits_backward(),
    );
    let budget_of = |bytes| Remedy::set(Setting::MemoryBudget, Value::Bytes(bytes));
    let mut remedies = vec![budget_of(needed)];
    // A change that fits the budget alone, or with the smaller budget it then needs; none that
    // does not lower the need.
    let mut offer = |remedy: Remedy, need: Option<u64>| match need {
        None => remedies.push(remedy),
        Some(less) if less < needed => remedies.push(Remedy::all_of([remedy, budget_of(less)])),
        Some(_) => {}
    };
    // Stages counted as the user counts them: ranks, of v chunks each; the fewest that fit,
    // else one more.
    let v = schedule.virtual_stages();
    let more = (stages / v + 1..=layers / v)
        .find(|&r| trial.need(r * v, m, remat, group).is_none())
        .or((stages / v < layers / v).then_some(stages / v + 1));
    if let Some(ranks) = more {
        let need = trial.need(ranks * v, m, remat, group);
        offer(Remedy::set(Setting::Stages, Value::Count(ranks)), need);
    }
    if remat == Remat::Never && in_flight > 1 {
        let need = trial.need(stages, m, Remat::Always, group);
        offer(Remedy::set(Setting::Remat, Value::mode("always")), need);
    }
    let doubled_group = memory::weight_group(
        c.runtime.backward,
        c.runtime.precision,
        2 * m,
        schedule.splits_backward(),
    );
    if trial.rows > 1 {
        let need = trial.need(stages, 2 * m, remat, doubled_group);
        offer(
            Remedy::set(Setting::MicroBatches, Value::Count(2 * m)),
            need,
        );
    }
    if group > 1 {
        let need = trial.need(stages, m, remat, 1);
        offer(Remedy::set(Setting::WeightGroup, Value::Count(1)), need);
    }
    // With replicas, a higher ZeRO level: the least that fits (1 shards the optimizer state, 3
    // the values while the weight gradients are made; 2 saves nothing at the step's peak).
    let zero = c.runtime.data_parallel.zero;
    if c.replicas > 1 {
        let higher = [Zero::OptimizerState, Zero::Parameters]
            .into_iter()
            .filter(|&z| z > zero)
            .map(|z| (z, trial.need_at(stages, m, remat, group, z)));
        let fits = higher.clone().find(|(_, need)| need.is_none());
        if let Some((z, need)) = fits.or_else(|| higher.clone().next_back()) {
            offer(
                Remedy::set(Setting::Zero, Value::Count(usize::from(z.level()))),
                need,
            );
        }
    }
    let remedy = Remedy::one_of(remedies);
    Error::Build(BuildError::MemoryBudget {
        budget: Bytes(budget),
        smallest: Bytes(needed),
        smallest_bytes: needed,
        stages,
        micro_batches: m,
        stage,
        layers: range,
        remedy,
    })
}

/// The replicas that share each stage's optimizer state at `zero`: all of them from ZeRO-1 on
/// (each holds its share), else 1.
fn state_sharers(c: &Config, zero: Zero) -> u64 {
    match zero.shards_optimizer_state() {
        true => c.replicas as u64,
        false => 1,
    }
}

/// The replicas that share each stage's values while its weight gradients are made at `zero`:
/// all of them at ZeRO-3 where those wait for the step's end (`to_end`: the stage reshards
/// before them), else 1.
fn value_holders(c: &Config, zero: Zero, to_end: bool) -> u64 {
    match zero.shards_parameters() && to_end {
        true => c.replicas as u64,
        false => 1,
    }
}
