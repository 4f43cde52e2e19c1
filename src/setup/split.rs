//! The split a [`Setup`](super::Setup) measures: balance by the layers' times, profiled on one
//! micro-batch, under the memory budget if there is one; and the budget's error with its
//! remedies when nothing fits.

use pipetrain_engine::{Activation, Layer, Remat, profile};
use pipetrain_partitioner::{LayerCost, Partition, PartitionError, partition_by_time};
use pipetrain_schedules::{Costs, Lowering, Schedule, lower, simulate};

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
    let costs = profile::layer_costs(layers, sample, device, 5)
        .map_err(pipetrain_engine::EngineError::bad_batch)?;
    let Some(budget) = c.memory_budget else {
        return Ok((partition_by_time(&costs, stages, None)?, costs));
    };
    let m = c.runtime.micro_batches;
    let in_flight = peak_in_flight(&c.runtime.schedule, stages, m)?;
    let slots = memory::optimizer_slots(&c.optimizer);
    let stashed = memory::charged_micro_batches(c.runtime.remat, in_flight);
    let group = memory::weight_group(c.runtime.backward, m, c.runtime.schedule.splits_backward());
    let split = match group {
        0 => vec![0; layers.len()],
        _ => profile::split_bytes(layers, sample, device)
            .map_err(pipetrain_engine::EngineError::bad_batch)?,
    };
    let deferred = memory::deferred_bytes(&split, group);
    let budgeted = memory::budget_costs(&costs, slots, stashed, &deferred, c.runtime.precision);
    let partition = partition_by_time(&budgeted, stages, Some(budget)).map_err(|e| {
        let deferring = deferred.iter().any(|&d| d > 0);
        over_budget(
            c,
            stages,
            e,
            costs.len(),
            sample.batch_size(),
            in_flight,
            deferring,
        )
    })?;
    Ok((partition, costs))
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

/// The partitioner's [`PartitionError::OverBudget`] as the user's [`Error::MemoryBudget`],
/// with the remedies that apply here.
fn over_budget(
    c: &Config,
    stages: usize,
    error: PartitionError,
    layers: usize,
    rows: usize,
    in_flight: usize,
    deferring: bool,
) -> Error {
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
    let schedule = &c.runtime.schedule;
    let m = c.runtime.micro_batches;
    let mut remedies = vec![Remedy::set(Setting::MemoryBudget, Value::Bytes(needed))];
    if stages < layers {
        remedies.push(Remedy::set(Setting::Stages, Value::Count(stages + 1)));
    }
    if c.runtime.remat == Remat::Never && in_flight > 1 {
        remedies.push(Remedy::set(Setting::Remat, Value::mode("always")));
    }
    // Twice the micro-batches halves each one; it helps where the schedule then stashes
    // fewer than twice as many (1F1B's p, not GPipe's m).
    let fewer =
        peak_in_flight(schedule, stages, 2 * m).is_ok_and(|doubled| doubled < 2 * in_flight);
    if rows > 1 && fewer {
        remedies.push(Remedy::set(Setting::MicroBatches, Value::Count(2 * m)));
    }
    if deferring && memory::weight_group(c.runtime.backward, m, schedule.splits_backward()) > 1 {
        remedies.push(Remedy::set(Setting::WeightGroup, Value::Count(1)));
    }
    let remedy = Remedy::one_of(remedies);
    Error::MemoryBudget {
        budget: Bytes(budget),
        smallest: Bytes(needed),
        smallest_bytes: needed,
        stages,
        micro_batches: m,
        stage,
        layers: range,
        remedy,
    }
}
