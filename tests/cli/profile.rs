//! `pipetrain train --profile trace.json`: the chrome trace of a tiny run, checked against the
//! lowered plan the run interprets.

use crate::common;
use common::{scratch, success};

use std::collections::{BTreeMap, BTreeSet};

use pipetrain::ScheduleKind;
use pipetrain::schedules::{Lowering, StageId, lower};
use serde_json::Value;

/// Runs `pipetrain train <args>`, which must succeed; returns stdout.
fn train(args: &[&str]) -> String {
    success(&[&["train"], args].concat())
}

/// Profiles `steps` steps of `replicas` × `stages` with `m` micro-batches (1F1B) and checks the
/// trace: one slice per action of the lowered plan per worker per step, one track per worker,
/// and one flow (start and finish) per send.
fn check_trace(replicas: usize, stages: usize, m: usize, steps: usize) {
    let tmp = scratch(&format!("profile-{replicas}x{stages}"));
    let dir = tmp.path();
    let path = dir.join("t.json");
    let (r, p, m_s, steps_s) = (
        replicas.to_string(),
        stages.to_string(),
        m.to_string(),
        steps.to_string(),
    );
    let stdout = train(&[
        "--stages",
        &p,
        "--replicas",
        &r,
        "--micro-batches",
        &m_s,
        "--width",
        "16",
        "--hidden-layers",
        "3",
        "--batch",
        "16",
        "--steps",
        &steps_s,
        "--profile",
        path.to_str().unwrap(),
    ]);
    assert!(stdout.contains("profile:"), "{stdout}");
    // Bubble per worker next to the simulator's prediction is still printed.
    assert!(stdout.contains("simulated"), "{stdout}");
    let events: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("valid JSON");
    let leftovers: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "only the trace is left: {leftovers:?}");

    // The MLP's layers are dense: every stage runs the split backward (I and W for B).
    let plan = lower(
        &ScheduleKind::OneFOneB
            .plan(stages, m)
            .unwrap()
            .split_backward(|_| true),
        Lowering::default(),
    );
    let actions: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "action")
        .collect();
    // The held-out evaluation at the end streams through the pipeline too: forwards only.
    let (slices, inference): (Vec<&Value>, Vec<&Value>) = actions
        .into_iter()
        .partition(|e| e["args"]["phase"] == "train");
    assert!(
        !inference.is_empty(),
        "the evaluation's forwards are traced"
    );
    for e in &inference {
        assert_eq!(e["args"]["phase"], "inference", "{e}");
        let name = e["name"].as_str().unwrap();
        assert!(
            ["F", "SF", "RF"].iter().any(|k| name[1..].starts_with(k)),
            "inference runs forwards only: {name}"
        );
    }
    // (replica, stage) → slice names
    let mut per_worker: BTreeMap<(i64, i64), Vec<String>> = BTreeMap::new();
    let mut tid_of: BTreeMap<(i64, i64), BTreeSet<u64>> = BTreeMap::new();
    for s in &slices {
        let key = (
            s["args"]["replica"].as_i64().unwrap(),
            s["args"]["stage"].as_i64().unwrap(),
        );
        per_worker
            .entry(key)
            .or_default()
            .push(s["name"].as_str().unwrap().to_string());
        tid_of
            .entry(key)
            .or_default()
            .insert(s["tid"].as_u64().unwrap());
    }
    assert_eq!(per_worker.len(), replicas * stages);
    for ((replica, stage), names) in &per_worker {
        let program = plan.program(StageId(*stage as u32));
        assert_eq!(
            names.len(),
            steps * program.len(),
            "replica {replica} stage {stage}: {names:?}"
        );
        let mut expected: Vec<String> = program.iter().map(|a| a.to_string()).collect();
        expected.sort();
        for step in names.chunks(program.len()) {
            let mut got = step.to_vec();
            got.sort();
            assert_eq!(got, expected);
        }
    }
    let tids: BTreeSet<u64> = tid_of.values().flatten().copied().collect();
    assert_eq!(tids.len(), replicas * stages, "one track per worker");
    assert!(tid_of.values().all(|t| t.len() == 1));

    let sends = slices
        .iter()
        .chain(&inference)
        .filter(|s| s["name"].as_str().unwrap().contains('S'))
        .count();
    let starts: BTreeMap<u64, &Value> = events
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| (e["id"].as_u64().unwrap(), e))
        .collect();
    let finishes: BTreeMap<u64, &Value> = events
        .iter()
        .filter(|e| e["ph"] == "f")
        .map(|e| (e["id"].as_u64().unwrap(), e))
        .collect();
    assert_eq!(starts.len(), sends, "one flow per send");
    assert_eq!(
        starts.keys().collect::<Vec<_>>(),
        finishes.keys().collect::<Vec<_>>()
    );
    for (id, s) in &starts {
        let f = finishes[id];
        assert_eq!(f["bp"], "e");
        assert_eq!(s["name"], f["name"]);
        assert_eq!(s["cat"], f["cat"]);
        assert_ne!(s["tid"], f["tid"], "a flow crosses workers");
        assert!(s["ts"].as_f64() <= f["ts"].as_f64(), "{s} → {f}");
    }
}

#[test]
fn two_stage_profile_has_one_slice_per_action_and_paired_flows() {
    check_trace(1, 2, 4, 2);
}

#[test]
fn replicated_profile_has_a_track_per_worker_and_all_reduce_slices() {
    check_trace(2, 2, 2, 1);
}

/// The U-Net cut `2,1,1,2`: `skip0` goes from stage 0 straight to stage 3 and `skip1` from 1 to
/// 2; the trace draws each skip transfer as its own flow (category `skip`), between the pair
/// only.
#[test]
fn unet_profile_draws_skip_flows_straight_between_their_stages() {
    let tmp = scratch("profile-unet");
    let path = tmp.path().join("t.json");
    let unet = [&common::TINY_UNET[..], &["--classes", "3", "--batch", "6"]].concat();
    let layout = [
        "--stages",
        "4",
        "--balance",
        "2,1,1,2",
        "--micro-batches",
        "2",
        "--steps",
        "1",
        "--profile",
        path.to_str().unwrap(),
    ];
    train(&[&unet[..], &layout[..]].concat());
    let events: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("valid JSON");
    let skip_sends: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "action")
        .filter_map(|e| e["name"].as_str())
        .filter(|n| n.contains("SK"))
        .collect();
    let flows: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["ph"] == "s" && e["cat"] == "skip")
        .filter_map(|e| e["name"].as_str())
        .collect();
    for mb in 0..2 {
        for flow in [
            format!("0SK{mb}>3→3RK{mb}<0"),
            format!("3SKB{mb}>0→0RKB{mb}<3"),
            format!("1SK{mb}>2→2RK{mb}<1"),
            format!("2SKB{mb}>1→1RKB{mb}<2"),
        ] {
            assert!(flows.contains(flow.as_str()), "{flow} in {flows:?}");
        }
    }
    let skip_flows = events
        .iter()
        .filter(|e| e["ph"] == "s" && e["cat"] == "skip")
        .count();
    assert_eq!(skip_flows, skip_sends.len(), "one flow per skip send");
    // Training step: 2 micro-batches × (2 skips + 2 gradients); the held-out evaluation
    // streams forwards only, skips included.
    assert!(skip_sends.len() >= 8, "{skip_sends:?}");
}
