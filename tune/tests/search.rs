//! Property tests of the search on synthetic cost tables: it never returns an infeasible
//! configuration, and on small spaces its feasible set and splits match brute force over every
//! balance. With one chunk per worker every configuration some split fits is found, at the
//! fastest split that fits. With several chunks per worker (interleaved, ZB-V) the space is the
//! time-optimal split alone: it is found whenever that split fits, and otherwise the search must
//! report it over budget naming the worker and bytes the brute force finds; a slower split that
//! would fit is out of the space by design (`evaluate.rs`), and the test says so.

use pipetrain_partitioner::Partition;
use pipetrain_schedules::{ScheduleKind, StageId, Zero, peak_stash};
use pipetrain_tune::{
    CostTable, Knobs, LayerTimes, Reason, Recompute, RowsCosts, Space, chunk_held, knobs, search,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const SCHEDULES: [ScheduleKind; 5] = [
    ScheduleKind::GPipe,
    ScheduleKind::OneFOneB,
    ScheduleKind::ZbH1,
    ScheduleKind::Interleaved { virtual_stages: 2 },
    ScheduleKind::ZbV,
];

/// A space over `workers` workers and a table of random per-layer costs for it.
fn case() -> impl Strategy<Value = (CostTable, Space)> {
    (2usize..=6, 1usize..=3, prop::option::of(1u64..4000)).prop_flat_map(
        |(layers, workers, budget)| {
            let layer = (
                1u32..100,
                1u32..100,
                1u32..100,
                0u32..50,
                0u64..40,
                0u64..30,
                any::<bool>(),
            );
            (
                prop::collection::vec(0u64..300, layers),
                prop::collection::vec(0u64..600, layers),
                prop::collection::vec(layer, layers),
            )
                .prop_map(move |(params, state, per_layer)| {
                    let space = Space {
                        batch: 16,
                        workers,
                        memory_budget: budget,
                        schedules: SCHEDULES.to_vec(),
                        remats: Recompute::ALL.to_vec(),
                        zeros: vec![Zero::Off, Zero::OptimizerState],
                        max_micro_batches: 8,
                    };
                    let rows = space
                        .rows_in_play(layers)
                        .into_iter()
                        .map(|r| RowsCosts {
                            rows: r,
                            layers: per_layer
                                .iter()
                                .map(|&(f, b, i, w, a, d, dense)| LayerTimes {
                                    forward: (f as usize * r) as f64 * 1e-3,
                                    backward: (b as usize * r) as f64 * 1e-3,
                                    input: (i as usize * r) as f64 * 1e-3,
                                    weight: if dense {
                                        (w as usize * r) as f64 * 1e-3
                                    } else {
                                        0.0
                                    },
                                    activation_bytes: a * r as u64,
                                    output_bytes: a * r as u64,
                                    deferred_bytes: if dense { d * r as u64 } else { 0 },
                                })
                                .collect(),
                        })
                        .collect();
                    let table = CostTable {
                        param_bytes: params,
                        optimizer_bytes: state,
                        rows,
                        transfer: 1e-4,
                        all_reduce_per_byte: 1e-6,
                        optimizer_per_byte: 1e-7,
                        turn: 1e-4,
                        step: 1e-3,
                        slowdown: vec![1.0, 1.1, 1.2],
                    };
                    (table, space)
                })
        },
    )
}

/// The budget's headroom on a term: 1/32 more (as `pipetrain_partitioner::with_headroom`).
fn headroom(bytes: u64) -> u64 {
    bytes + bytes / 32
}

/// Each term as it is.
fn raw(bytes: u64) -> u64 {
    bytes
}

/// The oracle's bytes of each rank under `knobs` with the chunks split as `partition`, each
/// layer's and each chunk's extra term `charge`d ([`raw`], or with the budget's [`headroom`]).
fn rank_bytes(
    table: &CostTable,
    space: &Space,
    k: Knobs,
    partition: &Partition,
    charge: fn(u64) -> u64,
) -> Vec<u64> {
    let plan = k.schedule.plan(k.stages, k.micro_batches).unwrap();
    let times = table
        .at(space.batch / (k.replicas * k.micro_batches))
        .unwrap();
    let mut ranks = vec![0u64; plan.ranks()];
    for (stage, range) in partition.iter() {
        let rank = plan.rank_of(stage).unwrap_or(stage.index());
        let own: Vec<_> = plan.programs()[rank]
            .iter()
            .filter(|a| a.stage == stage)
            .copied()
            .collect();
        let stash = peak_stash(&own) as u64;
        let held = if k.remat == Recompute::Never {
            stash
        } else {
            stash.min(1)
        };
        let deferred = chunk_held(&plan, stage, k.schedule.splits_backward()).1 as u64;
        ranks[rank] += charge(extra_bytes(
            times,
            range.clone(),
            stash,
            deferred,
            !k.schedule.splits_backward(),
        ));
        for i in range {
            let t = &times[i];
            // ZeRO-1: each replica holds its share of the optimizer state.
            let state = match k.zero {
                Zero::Off => table.optimizer_bytes[i],
                _ => table.optimizer_bytes[i].div_ceil(k.replicas as u64),
            };
            ranks[rank] += charge(
                table.param_bytes[i] * 2
                    + state
                    + layer_held(
                        t.activation_bytes * held,
                        t.deferred_bytes * deferred,
                        !k.schedule.splits_backward(),
                    ),
            );
        }
    }
    ranks
}

/// Every split of `layers` layers into `chunks` non-empty contiguous ranges.
fn balances(layers: usize, chunks: usize) -> Vec<Vec<usize>> {
    if chunks == 1 {
        return vec![vec![layers]];
    }
    (1..=layers.saturating_sub(chunks - 1))
        .flat_map(|first| {
            balances(layers - first, chunks - 1)
                .into_iter()
                .map(move |mut rest| {
                    rest.insert(0, first);
                    rest
                })
        })
        .collect()
}

/// Whether two predicted times are the same up to rounding (the search scales and sums them in
/// another order).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The partitioner's choice among `all` by brute force, as `partition_by_time` documents it:
/// the least stage times sorted slowest first (lexicographically), then the smallest balance
/// (each stage as few layers as it can, from the first on). Stage times are `layer_time` summed
/// left to right and compared exactly, as the partitioner does: `layer_time` must be the very
/// value the search hands it.
fn leximax<'a>(all: &'a [Partition], layer_time: &dyn Fn(usize) -> f64) -> &'a Partition {
    let times = |p: &Partition| {
        let mut t: Vec<f64> = p
            .iter()
            .map(|(_, r)| r.map(layer_time).sum::<f64>())
            .collect();
        t.sort_by(|a, b| b.total_cmp(a));
        t
    };
    let order = |a: &Partition, b: &Partition| {
        let (ta, tb) = (times(a), times(b));
        ta.iter()
            .zip(&tb)
            .map(|(x, y)| x.total_cmp(y))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| a.balance().cmp(&b.balance()))
    };
    all.iter().min_by(|a, b| order(a, b)).expect("a split")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn never_returns_an_infeasible_configuration((table, space) in case()) {
        let ranking = search(&table, &space).unwrap();
        for c in &ranking.candidates {
            let k = c.knobs;
            prop_assert!(k.workers() <= space.workers);
            prop_assert_eq!(space.batch % (k.replicas * k.micro_batches), 0);
            prop_assert_eq!(c.partition.stages(), k.stages * k.schedule.virtual_stages());
            prop_assert_eq!(c.partition.layers(), table.layers());
            prop_assert_eq!(&rank_bytes(&table, &space, k, &c.partition, raw), &c.memory);
            // The budget is compared with the bytes and their headroom.
            let bytes = rank_bytes(&table, &space, k, &c.partition, headroom);
            if let Some(budget) = space.memory_budget {
                prop_assert!(bytes.iter().all(|&b| b <= budget), "{k}: {bytes:?} > {budget}");
            }
            prop_assert!(c.samples_per_sec.is_finite() && c.samples_per_sec > 0.0);
        }
        for pair in ranking.candidates.windows(2) {
            prop_assert!(pair[0].samples_per_sec >= pair[1].samples_per_sec);
        }
        let total = ranking.candidates.len() + ranking.infeasible.len() + ranking.equivalent.len();
        prop_assert_eq!(total, knobs(&space, table.layers()).len());
    }

    #[test]
    fn matches_brute_force_over_every_balance((table, space) in case()) {
        let ranking = search(&table, &space).unwrap();
        for k in knobs(&space, table.layers()) {
            let v = k.schedule.virtual_stages();
            let chunks = k.stages * v;
            let kept = ranking.equivalent.iter().find(|(e, _)| *e == k).map_or(k, |(_, kept)| *kept);
            let found = ranking.candidates.iter().find(|c| c.knobs == kept);
            if chunks > table.layers() || k.schedule.plan(k.stages, k.micro_batches).is_err() {
                prop_assert!(found.is_none());
                continue;
            }
            let times = table.at(space.batch / (k.replicas * k.micro_batches)).unwrap();
            let extra = k.remat.recomputed(k.micro_batches) as f64 / k.micro_batches as f64;
            // A layer's backward per micro-batch: I + W at its rows when the schedule places
            // them, else I plus its share of one weight-gradient product over the replica's rows.
            let back = |i: usize| {
                let t = &times[i];
                let whole = &table.at(space.batch / k.replicas).unwrap()[i];
                if k.schedule.splits_backward() {
                    t.input + t.weight
                } else {
                    t.input + whole.weight / k.micro_batches as f64
                }
            };
            let layer_time = |i: usize| times[i].forward + back(i) + extra * times[i].forward;
            let slowest = |p: &Partition| {
                p.iter().map(|(_, r)| r.map(layer_time).sum::<f64>()).fold(0.0, f64::max)
            };
            // One chunk per worker: the fastest split that fits (charged at the most any stage
            // stashes); several: the fastest split, which must then fit.
            let all: Vec<Partition> = balances(table.layers(), chunks)
                .iter()
                .map(|b| Partition::from_balance(b, table.layers()).unwrap())
                .collect();
            let fits = |p: &Partition, conservative: bool| {
                let Some(budget) = space.memory_budget else { return true };
                let mut bytes = rank_bytes(&table, &space, k, p, headroom);
                if conservative {
                    let plan = k.schedule.plan(k.stages, k.micro_batches).unwrap();
                    let most = (0..chunks).map(|s| {
                        let rank = plan.rank_of(StageId::from(s)).unwrap_or(s);
                        let own: Vec<_> = plan.programs()[rank].iter()
                            .filter(|a| a.stage == StageId::from(s)).copied().collect();
                        peak_stash(&own)
                    }).max().unwrap_or(0);
                    let held = if k.remat == Recompute::Never { most as u64 } else { (most as u64).min(1) };
                    let group = (0..chunks)
                        .map(|s| chunk_held(&plan, StageId::from(s), k.schedule.splits_backward()).1)
                        .max()
                        .unwrap_or(0) as u64;
                    // Per layer at the most stashed, and per chunk its received inputs and W's
                    // copies at the same (as `--memory-budget` splits), each with the headroom.
                    let to_end = !k.schedule.splits_backward();
                    bytes = p.iter().map(|(_, r)| r.clone().map(|i| {
                        headroom(table.param_bytes[i] * 2 + table.optimizer_bytes[i]
                            + layer_held(
                                times[i].activation_bytes * held,
                                times[i].deferred_bytes * group,
                                to_end,
                            ))
                    }).sum::<u64>() + headroom(extra_bytes(times, r, most as u64, group, to_end))).collect();
                }
                bytes.iter().all(|&b| b <= budget)
            };
            let best = |ps: &mut dyn Iterator<Item = &Partition>| {
                ps.map(slowest).fold(f64::INFINITY, f64::min)
            };
            if v == 1 {
                // The fastest split within the budget's per-layer sums and per-chunk terms at the
                // most any chunk stashes, refused if a rank's bytes at its own stash are over it.
                let mut expected = best(&mut all.iter().filter(|p| fits(p, true)));
                let chosen = all.iter().filter(|p| fits(p, true)).find(|p| slowest(p) == expected);
                if chosen.is_some_and(|p| !fits(p, false)) {
                    expected = f64::INFINITY;
                }
                match found {
                    None => prop_assert!(expected.is_infinite(), "{k}: brute force fits at {expected}"),
                    Some(c) => {
                        let got = slowest(&c.partition);
                        prop_assert!(close(got, expected), "{k}: {got} vs {expected}");
                    }
                }
                continue;
            }
            // Several chunks per worker: the space is the time-optimal split alone (the
            // partitioner's, found here by brute force with its tie-breaks), kept if every
            // worker's chunks fit together. A slower split that would fit is out of the space by
            // design (evaluate.rs), and then the search must say so: over budget, naming the
            // first worker that does not fit the time-optimal split and its bytes.
            // The partitioner's inputs exactly: forward and backward each scaled by the
            // table's slowdown for this many workers (evaluate.rs), then added.
            let slow = table.slowdown(k.workers());
            let exact = |i: usize| {
                let t = &times[i];
                t.forward * slow + (back(i) + extra * t.forward) * slow
            };
            let optimal = leximax(&all, &exact);
            if fits(optimal, false) {
                let c = found.ok_or_else(|| TestCaseError::fail(format!(
                    "{k}: the time-optimal split {optimal} fits, but the search has no candidate"
                )))?;
                prop_assert_eq!(&c.partition, optimal, "{}: the split", k);
            } else {
                prop_assert!(found.is_none(), "{k}: found, but {optimal} does not fit");
                let bytes = rank_bytes(&table, &space, k, optimal, headroom);
                let budget = space.memory_budget.unwrap();
                let (rank, &needed) = bytes.iter().enumerate().find(|(_, b)| **b > budget).unwrap();
                let reason = ranking.infeasible.iter().find(|i| i.knobs == k).map(|i| &i.reason);
                prop_assert_eq!(
                    reason,
                    Some(&Reason::OverBudget { stage: StageId::from(rank), needed, budget }),
                    "{}: out of the space because {} needs {} bytes on worker {} > {}",
                    k, optimal, needed, rank, budget
                );
            }
        }
    }
}

/// What a chunk holds beyond its layers' sums: its received input for each stashed
/// micro-batch (not the first chunk's: the caller's rows), and with the weight gradients held
/// to the step's end (`to_end`) over `group` > 1 micro-batches, `W`'s stacked copy of its
/// largest layer's group (the larger of a layer's input and output gradient).
fn extra_bytes(
    times: &[LayerTimes],
    range: std::ops::Range<usize>,
    stash: u64,
    group: u64,
    to_end: bool,
) -> u64 {
    let input = match range.start {
        0 => 0,
        first => times[first - 1].output_bytes * stash,
    };
    let stacked = |t: &LayerTimes| match t.deferred_bytes {
        0 => 0,
        d => t.output_bytes.max(d - t.output_bytes.min(d)),
    };
    let copies = match to_end && group > 1 {
        true => range.map(|i| stacked(&times[i])).max().unwrap_or(0) * group,
        false => 0,
    };
    input + copies
}

/// A layer's stash and deferred bytes at once: the larger of the two where the step's weight
/// gradients wait for its end (`to_end`), else both (as `pipetrain::memory::held_at_once`).
fn layer_held(stash: u64, deferred: u64, to_end: bool) -> u64 {
    if to_end {
        stash.max(deferred)
    } else {
        stash + deferred
    }
}
