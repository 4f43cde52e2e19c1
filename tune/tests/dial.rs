//! The memory dial: under a budget between V-Min's peak and 1F1B's, the search picks a
//! controllable-memory schedule (V-Min or V-Half), never one that does not fit.

use pipetrain_schedules::{ScheduleKind, Zero};
use pipetrain_tune::{CostTable, LayerTimes, Recompute, RowsCosts, Space, search};

/// Every schedule of the default space (2 chunks where a schedule takes chunks).
const SCHEDULES: [ScheduleKind; 10] = [
    ScheduleKind::OneFOneB,
    ScheduleKind::GPipe,
    ScheduleKind::ZbH1,
    ScheduleKind::Zb2p,
    ScheduleKind::Interleaved { virtual_stages: 2 },
    ScheduleKind::ZbV,
    ScheduleKind::LoopedBfs { virtual_stages: 2 },
    ScheduleKind::InterleavedZb { virtual_stages: 2 },
    ScheduleKind::VMin,
    ScheduleKind::VHalf,
];

/// 32 equal layers on 4 workers whose parameters only fit 4 stages, and whose activations
/// (200 bytes a row per layer) dominate what each stage adds: a stash-dominated model.
fn case(budget: Option<u64>) -> (CostTable, Space) {
    let layers = 32;
    let space = Space {
        batch: 64,
        workers: 4,
        memory_budget: budget,
        schedules: SCHEDULES.to_vec(),
        remats: vec![Recompute::Never],
        zeros: vec![Zero::Off],
        max_micro_batches: 16,
    };
    let rows = space
        .rows_in_play(layers)
        .into_iter()
        .map(|r| RowsCosts {
            rows: r,
            layers: vec![
                LayerTimes {
                    forward: r as f64 * 1e-3,
                    backward: 2.0 * r as f64 * 1e-3,
                    input: r as f64 * 1e-3,
                    weight: r as f64 * 1e-3,
                    activation_bytes: 200 * r as u64,
                    output_bytes: 200 * r as u64,
                    deferred_bytes: 0,
                };
                layers
            ],
        })
        .collect();
    let table = CostTable {
        param_bytes: vec![4_000; layers],
        optimizer_bytes: vec![0; layers],
        rows,
        transfer: 1e-5,
        all_reduce_per_byte: 1e-9,
        optimizer_per_byte: 1e-9,
        turn: 1e-5,
        step: 1e-4,
        slowdown: vec![1.0, 1.0, 1.0, 1.0],
    };
    (table, space)
}

#[test]
fn a_budget_between_v_mins_peak_and_1f1bs_picks_v_min_or_v_half() {
    let (table, space) = case(None);
    let all = search(&table, &space).unwrap();
    let least = |kind: ScheduleKind| {
        all.candidates
            .iter()
            .filter(|c| c.knobs.schedule == kind)
            .map(|c| c.peak_memory())
            .min()
            .unwrap_or_else(|| panic!("{kind} has a candidate"))
    };
    let (v_min, one_f_one_b) = (least(ScheduleKind::VMin), least(ScheduleKind::OneFOneB));
    assert!(
        v_min < one_f_one_b,
        "v-min {v_min} against 1f1b {one_f_one_b}"
    );
    // What else fits below 1F1B's least peak: only the controllable-memory schedules.
    for kind in SCHEDULES {
        if ![ScheduleKind::VMin, ScheduleKind::VHalf].contains(&kind) {
            assert!(least(kind) >= one_f_one_b, "{kind}: {}", least(kind));
        }
    }
    let budget = (v_min + one_f_one_b) / 2;
    let (table, space) = case(Some(budget));
    let ranking = search(&table, &space).unwrap();
    let best = ranking.best().expect("v-min fits");
    assert!(
        [ScheduleKind::VMin, ScheduleKind::VHalf].contains(&best.knobs.schedule),
        "budget {budget}: picked {:?}",
        best.knobs
    );
    for c in &ranking.candidates {
        assert!(
            c.peak_memory() <= budget,
            "{:?} over {budget}: {}",
            c.knobs,
            c.peak_memory()
        );
    }
    // Every other schedule was considered, and refused for its memory.
    for kind in SCHEDULES {
        if ![ScheduleKind::VMin, ScheduleKind::VHalf].contains(&kind) {
            assert!(
                ranking.infeasible.iter().any(|i| i.knobs.schedule == kind),
                "{kind} was not considered"
            );
        }
    }
}
