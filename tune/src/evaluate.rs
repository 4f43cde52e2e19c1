//! One configuration, evaluated: its split (the partitioner, under the budget), its memory per
//! worker and its simulated step.
//!
//! ```text
//! knobs ─► plan (schedule, stages, m) ─► peak stash per chunk
//!   │       cost table at batch/(R·m) rows ─► per-layer time (+ recompute) and bytes
//!   └─► partition_by_time(layers, chunks, budget) ─► per-rank bytes ≤ budget?
//!         └─► lower + simulate(per-chunk F, B, W; transfer, all-reduce, optimizer, turns)
//!               └─► samples/s = batch / (makespan + step overhead)
//! ```
//! Memory is counted as `pipetrain::memory` counts it: per layer parameters × 2 (weights and
//! gradients) and its measured optimizer state, its output × the micro-batches it holds (one
//! under re-materialization), and the split backward's deferred inputs × the micro-batches
//! between an `I` and its `W` (the most the plan keeps waiting under the zero-bubble schedules,
//! which place each `W`; m for GPipe and 1F1B, which batch them at the end: there each backward
//! releases a micro-batch's stash as it keeps its deferred inputs, so a layer holds the larger of
//! its stash and its deferred bytes, not both). Schedules with one chunk per worker split under
//! the budget charged at the most micro-batches any stage stashes (as the builder does, so the
//! split it reports is the one `--memory-budget` would pick); schedules with several chunks per
//! worker split by time and check each worker's chunks together. Per chunk, what depends on
//! the cut, its received inputs and `W`'s copies of its largest layer, is
//! [`CutBytes`](pipetrain_partitioner::CutBytes), and the budget is compared with the bytes
//! and 1/32 headroom ([`with_headroom`]): the code `--memory-budget` splits with, so a split
//! `tune` reports under a budget is the one the builder finds.

use pipetrain_partitioner::{
    CutBytes, LayerCost, Partition, PartitionError, held_at_once, partition_by_time_with,
    with_headroom,
};
use pipetrain_schedules::{
    Action, ActionKind, Costs, Lowering, Plan, StageId, lower, peak_stash, simulate,
};

use crate::candidate::{Candidate, Infeasible, Knobs, Reason};
use crate::error::Result;
use crate::space::Space;
use crate::table::{CostTable, LayerTimes};

/// The candidate `knobs` make, or why they cannot.
///
/// # Errors
/// A cost table without the micro-batch size these knobs need.
pub fn evaluate(
    table: &CostTable,
    space: &Space,
    knobs: Knobs,
) -> Result<std::result::Result<Candidate, Infeasible>> {
    let refuse = |reason| Ok(Err(Infeasible { knobs, reason }));
    let Knobs {
        replicas,
        stages,
        micro_batches: m,
        schedule,
        remat,
        zero,
    } = knobs;
    let rows = space.batch / (replicas * m);
    let times = table.at(rows)?;
    // The whole replica's rows in one micro-batch: GPipe and 1F1B batch the step's weight
    // gradients into one product over all of them.
    let batched = table.at(space.batch / replicas)?;
    let v = schedule.virtual_stages();
    let chunks = stages * v;
    if chunks > table.layers() {
        return refuse(Reason::TooFewLayers {
            chunks,
            layers: table.layers(),
        });
    }
    let plan = match schedule.plan(stages, m) {
        Ok(plan) => plan,
        Err(e) => return refuse(Reason::Schedule(e.to_string())),
    };
    let split = schedule.splits_backward();
    let held: Vec<(usize, usize)> = StageId::range(chunks)
        .map(|s| chunk_held(&plan, s, split))
        .collect();
    let slow = table.slowdown(knobs.workers());
    let extra = remat.recomputed(m) as f64 / m as f64;
    let layer_bytes = |i: usize, (stashed, deferred): (usize, usize)| {
        let t = &times[i];
        let state = table.optimizer_bytes.get(i).copied().unwrap_or(0);
        // ZeRO-1 and up: each worker holds its share of the stage's optimizer state.
        let state = match zero.shards_optimizer_state() {
            true => state.div_ceil(replicas as u64),
            false => state,
        };
        // The values and the gradients; at ZeRO-3, where the weight gradients are made at the
        // step's end (not placed by the schedule), the stage is resharded before they are, so
        // its share of the values is held beside the whole gradients.
        let values = match zero.shards_parameters() && !split {
            true => table.param_bytes[i].div_ceil(replicas as u64),
            false => table.param_bytes[i],
        };
        table.param_bytes[i]
            .saturating_add(values)
            .saturating_add(state)
            .saturating_add(held_at_once(
                t.activation_bytes.saturating_mul(remat.charged(stashed)),
                t.deferred_bytes.saturating_mul(deferred as u64),
                !split,
            ))
    };
    let most = (
        held.iter().map(|h| h.0).max().unwrap_or(0),
        held.iter().map(|h| h.1).max().unwrap_or(0),
    );
    let costs: Vec<LayerCost> = times
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let back = backward(t, &batched[i], split, m) + extra * t.forward;
            let bytes = with_headroom(layer_bytes(i, most));
            LayerCost::new(t.forward * slow, back * slow).with_memory(bytes, 0)
        })
        .collect();
    let cut = cut_bytes(times, most.0, if split { 1 } else { m as u64 });
    let budget = space.memory_budget;
    let per_stage = |r| cut.of(r);
    let partition =
        match partition_by_time_with(&costs, chunks, budget.filter(|_| v == 1), per_stage) {
            Ok(p) => p,
            Err(PartitionError::OverBudget {
                stage,
                needed,
                budget,
                ..
            }) => {
                return refuse(Reason::OverBudget {
                    stage,
                    needed,
                    budget,
                });
            }
            Err(e) => return refuse(Reason::Schedule(e.to_string())),
        };
    let rank = |charge: fn(u64) -> u64| {
        rank_memory(
            &plan,
            &partition,
            &held,
            |i, h| charge(layer_bytes(i, h)),
            (&cut, charge),
        )
    };
    let memory = rank(|bytes| bytes);
    if let Some(budget) = budget
        && let Some((rank, &needed)) = rank(with_headroom)
            .iter()
            .enumerate()
            .find(|(_, b)| **b > budget)
    {
        return refuse(Reason::OverBudget {
            stage: StageId::from(rank),
            needed,
            budget,
        });
    }
    let sim_costs = chunk_costs(table, &partition, times, knobs, &costs);
    let lowered = lower(
        &plan,
        Lowering {
            all_reduce: replicas > 1,
            optimizer_step: true,
            // ZeRO-2/3's reduce and unshard are charged half an all-reduce each.
            zero: match replicas > 1 {
                true => zero,
                false => pipetrain_schedules::Zero::Off,
            },
        },
    );
    let simulated = simulate(&lowered, &sim_costs).expect("a generated plan is valid");
    let step_seconds = simulated.makespan + table.step;
    Ok(Ok(Candidate {
        knobs,
        partition,
        samples_per_sec: space.batch as f64 / step_seconds.max(1e-12),
        step_seconds,
        bubble: simulated.bubble_fraction,
        memory,
    }))
}

/// A layer's backward per micro-batch: under a schedule that places `I` and `W` (`split`), both
/// at the micro-batch's rows (`t`); under GPipe and 1F1B, `I` at its rows and its m-th share of
/// the one weight-gradient product over the replica's rows (`batched`). A layer that cannot
/// split has no `W`: its `I` is its whole backward.
pub fn backward(t: &LayerTimes, batched: &LayerTimes, split: bool, m: usize) -> f64 {
    if split {
        t.input + t.weight
    } else {
        t.input + batched.weight / m as f64
    }
}

/// Most micro-batches chunk `stage` stashes at once in `plan`, and most whose weight gradients
/// wait at once: between `I` and `W` when the plan places them (`split`), else every one of
/// the step's (the batched weight gradients at the end).
pub fn chunk_held(plan: &Plan, stage: StageId, split: bool) -> (usize, usize) {
    let rank = plan.rank_of(stage).unwrap_or(stage.index());
    // An overlap is its forward and its backward (each on its own chunk).
    let own: Vec<Action> = plan.programs()[rank]
        .iter()
        .flat_map(Action::in_sequence)
        .filter(|a| a.stage == stage)
        .collect();
    let deferred = match split {
        false => plan.micro_batches(),
        true => {
            let (mut live, mut peak) = (0usize, 0usize);
            for a in &own {
                match a.kind {
                    ActionKind::BackwardInput => {
                        live += 1;
                        peak = peak.max(live);
                    }
                    ActionKind::BackwardWeight => live = live.saturating_sub(1),
                    _ => {}
                }
            }
            peak
        }
    };
    (peak_stash(&own), deferred)
}

/// Per micro-batch, what `W` stacks of layer `t` beyond its deferred bytes: the larger of its
/// input and its output gradient (0 for a layer that defers nothing).
pub(crate) fn stacked(t: &LayerTimes) -> u64 {
    match t.deferred_bytes {
        0 => 0,
        d => t.output_bytes.max(d.saturating_sub(t.output_bytes)),
    }
}

/// What depends on where a chunk is cut ([`CutBytes`]): each layer's output and `W` stack per
/// micro-batch ([`stacked`]), with `in_flight` micro-batches stashed and weight-gradient groups
/// of `group` (1 where the plan places each `W`, whose stack is the micro-batch's own).
fn cut_bytes(times: &[LayerTimes], in_flight: usize, group: u64) -> CutBytes {
    let outputs = times.iter().map(|t| t.output_bytes).collect();
    let stacks: Vec<u64> = times.iter().map(stacked).collect();
    CutBytes::new(outputs, &stacks, in_flight, group)
}

/// Bytes per rank: the sum over the chunks it holds of their layers' bytes at their stash
/// (`layer_bytes`), and of what depends on the cut ([`CutBytes::bytes`]: the received inputs
/// each chunk stashes, `W`'s copies of its largest layer), each term `charge`d (with the
/// budget's headroom, or as it is).
fn rank_memory(
    plan: &Plan,
    partition: &Partition,
    held: &[(usize, usize)],
    layer_bytes: impl Fn(usize, (usize, usize)) -> u64,
    (cut, charge): (&CutBytes, fn(u64) -> u64),
) -> Vec<u64> {
    let mut memory = vec![0u64; plan.ranks()];
    for (stage, range) in partition.iter() {
        let rank = plan.rank_of(stage).unwrap_or(stage.index());
        let (stashed, _) = held[stage.index()];
        let cut = charge(cut.bytes(range.clone(), stashed));
        let bytes: u64 = range.map(|i| layer_bytes(i, held[stage.index()])).sum();
        memory[rank] = memory[rank].saturating_add(bytes).saturating_add(cut);
    }
    memory
}

/// The simulator's per-chunk costs: the chunk's layers summed (with the slowdown and the
/// recomputed forwards already in `costs`), a turn hand-over per compute action when a worker
/// holds several chunks, and the all-reduce and optimizer step of the largest chunk.
fn chunk_costs(
    table: &CostTable,
    partition: &Partition,
    times: &[LayerTimes],
    knobs: Knobs,
    costs: &[LayerCost],
) -> Costs {
    let turn = if knobs.schedule.virtual_stages() > 1 {
        table.turn
    } else {
        0.0
    };
    let slow = table.slowdown(knobs.workers());
    let split = knobs.schedule.splits_backward();
    let mut c = Costs::uniform(partition.stages(), 0.0, 0.0);
    let mut largest = 0u64;
    for (stage, range) in partition.iter() {
        let s = stage.index();
        c.forward[s] = costs[range.clone()].iter().map(|l| l.forward).sum::<f64>() + turn;
        let weight: f64 = times[range.clone()].iter().map(|t| t.weight).sum::<f64>() * slow;
        let has_weight = split && times[range.clone()].iter().any(|t| t.weight > 0.0);
        let turns = if has_weight { 2.0 } else { 1.0 } * turn;
        c.backward[s] = costs[range.clone()].iter().map(|l| l.backward).sum::<f64>() + turns;
        c.weight.push(if has_weight { weight + turn } else { 0.0 });
        largest = largest.max(range.map(|i| table.param_bytes[i]).sum());
    }
    c.transfer = table.transfer;
    if knobs.replicas > 1 {
        c.all_reduce = largest as f64 * table.all_reduce_per_byte;
    }
    c.optimizer = largest as f64 * table.optimizer_per_byte;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_counts_its_own_stash() {
        use pipetrain_schedules::ScheduleKind;
        let plan = ScheduleKind::GPipe.plan(2, 4).unwrap();
        assert_eq!(chunk_held(&plan, StageId(0), false), (4, 4));
        let plan = ScheduleKind::OneFOneB.plan(2, 4).unwrap();
        assert_eq!(chunk_held(&plan, StageId(0), false), (2, 4));
        assert_eq!(chunk_held(&plan, StageId(1), false), (1, 4));
        // ZB-H1 on 2 stages, m = 2: the last stage runs I0 I1 before W0 (the engine measured
        // two micro-batches deferred there).
        let plan = ScheduleKind::ZbH1.plan(2, 2).unwrap();
        assert_eq!(chunk_held(&plan, StageId(1), true).1, 2);
    }
}
