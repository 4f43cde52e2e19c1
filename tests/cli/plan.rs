//! `pipetrain plan`, run as a user runs it: the built binary, its stdout, stderr and exit code.

use crate::common;

use pipetrain_schedules::{Lowering, Plan, ScheduleKind, SkipRoute, lower, route_skips};
use serde_json::Value;

/// `pipetrain plan <args>`.
fn plan<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [&["plan"], args].concat()
}

/// Runs `pipetrain plan <args>`, expects success and returns stdout.
fn stdout_of(args: &[&str]) -> String {
    common::success(&plan(args))
}

/// Runs `pipetrain plan <args> --format json` and parses its stdout.
fn json_of(args: &[&str]) -> Value {
    let text = stdout_of(&[args, &["--format", "json"]].concat());
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// Runs `pipetrain plan <args>`, expects it refused as a usage error (exit 2: every failure
/// here is the command line's) and returns stderr.
fn stderr_of_failure(args: &[&str]) -> String {
    let args = plan(args);
    let out = common::pipetrain(&args);
    assert_eq!(out.status.code(), Some(common::USAGE), "{args:?}: {out:?}");
    let stdout = out.stdout.clone();
    let stderr = common::stderr_of_failure(&args, out);
    assert!(stdout.is_empty(), "a failure prints nothing on stdout");
    stderr
}

fn stashes(report: &Value) -> Vec<u64> {
    let stash = report["peak_stash"]
        .as_array()
        .expect("peak_stash is an array");
    stash
        .iter()
        .map(|v| v.as_u64().expect("a stash is a count"))
        .collect()
}

fn number(report: &Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is a number in {report}"))
}

#[test]
fn gpipe_json_has_the_ideal_bubble_and_stashes_every_micro_batch() {
    let report = json_of(&[
        "--stages",
        "4",
        "--micro-batches",
        "8",
        "--schedule",
        "gpipe",
    ]);
    assert_eq!(report["schedule"], "gpipe");
    assert_eq!(report["stages"], 4);
    assert_eq!(report["micro_batches"], 8);
    assert!((number(&report, "bubble_fraction") - 3.0 / 11.0).abs() < 1e-9);
    assert_eq!(stashes(&report), [8, 8, 8, 8]);
    // (m + p − 1)(F + B) with F = 1, B = 2.
    assert!((number(&report, "makespan") - 33.0).abs() < 1e-9);
    assert_eq!(report["costs"]["forward"], 1.0);
    assert_eq!(report["costs"]["backward"], 2.0);
    assert_eq!(report["costs"]["transfer"], 0.0);
    let per_stage = report["per_stage"]
        .as_array()
        .expect("per_stage is an array");
    assert_eq!(per_stage.len(), 4);
    for (s, stage) in per_stage.iter().enumerate() {
        assert_eq!(stage["stage"], s);
        assert_eq!(stage["peak_stash"], 8);
        assert!((number(stage, "busy") - 24.0).abs() < 1e-9);
        assert!((number(stage, "idle") - 9.0).abs() < 1e-9);
    }
    let grid = report["grid"].as_str().expect("grid is text");
    assert!(grid.starts_with("stage 0 | F0"), "{grid}");
    assert_eq!(grid.lines().count(), 4);
}

#[test]
fn one_f_one_b_json_stashes_at_most_p_minus_s() {
    let report = json_of(&[
        "--stages",
        "4",
        "--micro-batches",
        "8",
        "--schedule",
        "1f1b",
    ]);
    assert_eq!(report["schedule"], "1f1b");
    assert!((number(&report, "bubble_fraction") - 3.0 / 11.0).abs() < 1e-9);
    assert_eq!(stashes(&report), [4, 3, 2, 1]);
}

#[test]
fn the_default_schedule_is_1f1b_on_4_stages_and_8_micro_batches() {
    let report = json_of(&[]);
    assert_eq!(report["schedule"], "1f1b");
    assert_eq!(report["stages"], 4);
    assert_eq!(report["micro_batches"], 8);
}

#[test]
fn text_shows_the_grid_the_table_and_the_totals() {
    let text = stdout_of(&[
        "--stages",
        "4",
        "--micro-batches",
        "8",
        "--schedule",
        "gpipe",
    ]);
    assert!(
        text.starts_with("plan: gpipe, 4 stages, 8 micro-batches"),
        "{text}"
    );
    for s in 0..4 {
        assert!(
            text.contains(&format!("stage {s} |")),
            "no grid row for stage {s}:\n{text}"
        );
    }
    assert!(text.contains("peak stash"), "{text}");
    assert!(text.contains("27.27 %"), "{text}");
    assert!(text.contains("3/11"), "{text}");
    assert!(text.contains("makespan  33"), "{text}");
    assert!(
        !text.contains("lowered plan"),
        "--lowered not given:\n{text}"
    );
}

#[test]
fn lowered_prints_the_plan_text_form_which_parses_back() {
    let text = stdout_of(&["--stages", "3", "--micro-batches", "4", "--lowered"]);
    let (_, plan_text) = text
        .split_once("lowered plan:\n")
        .expect("a lowered plan section");
    let printed: Plan = plan_text.parse().expect("the printed plan parses");
    let expected = lower(
        &ScheduleKind::OneFOneB.plan(3, 4).unwrap(),
        Lowering::default(),
    );
    assert_eq!(printed, expected);
}

#[test]
fn skip_routes_show_their_flows_and_transfers_in_the_lowered_plan() {
    for schedule in ["gpipe", "1f1b", "zb-h1", "zb-v"] {
        let args = [
            "--stages",
            "4",
            "--micro-batches",
            "4",
            "--schedule",
            schedule,
        ];
        let text = stdout_of(&[&args[..], &["--skip", "0:3,1:2", "--lowered"]].concat());
        assert!(
            text.contains("skip stage 0 -> stage 3: 4 sends (SK), 4 gradients back (SKB)"),
            "{schedule}:\n{text}"
        );
        let (_, plan_text) = text.split_once("lowered plan:\n").expect("a lowered plan");
        let printed: Plan = plan_text.parse().expect("the printed plan parses");
        let routes: Vec<SkipRoute> = vec!["0:3".parse().unwrap(), "1:2".parse().unwrap()];
        assert_eq!(printed.skip_routes(), routes);
        if schedule == "1f1b" {
            let compute = ScheduleKind::OneFOneB.plan(4, 4).unwrap();
            let routed = route_skips(&compute, &routes).unwrap();
            assert_eq!(printed, lower(&routed, Lowering::default()));
        }
    }
    let report = json_of(&["--stages", "3", "--skip", "0:2"]);
    assert_eq!(report["skip_routes"][0]["pop"], 2);
    let e = stderr_of_failure(&["--stages", "3", "--skip", "1:3"]);
    assert!(
        e.contains("skip route 1:3") && e.contains("3 stages"),
        "{e}"
    );
    let e = stderr_of_failure(&["--stages", "3", "--skip", "2:1"]);
    assert!(e.contains("`1:2`"), "{e}");
}

#[test]
fn fewer_micro_batches_than_stages_works() {
    let report = json_of(&["--stages", "8", "--micro-batches", "2"]);
    assert!((number(&report, "bubble_fraction") - 7.0 / 9.0).abs() < 1e-9);
    assert_eq!(stashes(&report).len(), 8);
    assert!(stdout_of(&["--stages", "8", "--micro-batches", "2"]).contains("stage 7 |"));
}

#[test]
fn transfer_costs_lengthen_the_makespan() {
    let shape = [
        "--stages",
        "3",
        "--micro-batches",
        "4",
        "--schedule",
        "gpipe",
    ];
    let free = json_of(&shape);
    let paid = json_of(&[&shape[..], &["--transfer-cost", "0.5"]].concat());
    assert_eq!(paid["costs"]["transfer"], 0.5);
    // Fill and drain each cross p − 1 = 2 links, 0.5 each.
    assert!((number(&paid, "makespan") - number(&free, "makespan") - 2.0).abs() < 1e-9);
    assert!(number(&paid, "bubble_fraction") > number(&free, "bubble_fraction"));
}

#[test]
fn zero_stages_fails_naming_the_value() {
    let err = stderr_of_failure(&["--stages", "0"]);
    assert!(err.contains("stages = 0"), "{err}");
    assert!(err.contains("--stages 1"), "no remedy: {err}");
}

#[test]
fn zero_micro_batches_fails_naming_the_value() {
    let err = stderr_of_failure(&["--micro-batches", "0"]);
    assert!(err.contains("micro_batches = 0"), "{err}");
}

#[test]
fn unknown_schedule_fails_naming_it_and_the_choices() {
    let err = stderr_of_failure(&["--schedule", "zb"]);
    assert!(err.contains("zb"), "{err}");
    assert!(err.contains("gpipe") && err.contains("1f1b"), "{err}");
}

#[test]
fn bad_costs_fail_naming_the_flag_and_the_value() {
    for (flag, value, problem) in [
        ("--forward-cost", "-1", "negative"),
        ("--backward-cost", "NaN", "not a finite number"),
        ("--transfer-cost", "inf", "not a finite number"),
        ("--forward-cost", "fast", "not a number"),
    ] {
        let err = stderr_of_failure(&[flag, value]);
        assert!(
            err.contains(flag) && err.contains(value),
            "{flag} {value}: {err}"
        );
        assert!(err.contains(problem), "{flag} {value}: {err}");
    }
}

#[test]
fn costs_out_of_range_or_far_apart_fail_naming_the_flag_and_the_value_in_short() {
    // Issue 38: the first four panicked with "capacity overflow" (exit 101), the fifth
    // allocated until killed (a grid of 384 GB).
    for (args, named) in [
        (
            &["--transfer-cost", "1e308"][..],
            "--transfer-cost <T>': 1e308 is above 1e12",
        ),
        (
            &["--transfer-cost", "1e308", "--format", "json"],
            "--transfer-cost <T>': 1e308 is above 1e12",
        ),
        (
            &["--forward-cost", "1e308", "--backward-cost", "1e308"],
            "--forward-cost <F>': 1e308 is above 1e12",
        ),
        (
            &["--forward-cost", "1e-300"],
            "--forward-cost <F>': 1e-300 is below 1e-12",
        ),
        (
            &["--transfer-cost", "1e9"],
            "--transfer-cost 1e9: the transfer cost 1e9 is more than 1e6 times the forward cost 1",
        ),
        (
            &["--forward-cost", "1e-9", "--format", "json"],
            "--forward-cost 1e-9: the backward cost 2 is more than 1e6 times the forward cost 1e-9",
        ),
    ] {
        let err = stderr_of_failure(args);
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_grid_too_large_to_draw_is_left_out_and_the_rest_reported() {
    // Issue 38: costs 1e6 apart drew a grid of 192 MB.
    let text = stdout_of(&["--transfer-cost", "1e6"]);
    assert!(text.len() < 1 << 20, "{} bytes", text.len());
    assert!(
        text.contains("(no grid: 4 stages by 16000033 columns would take")
            && text.contains("fewer stages or micro-batches, or costs closer together"),
        "{text}"
    );
    assert!(text.contains("makespan  16000033"), "{text}");
    let report = json_of(&["--transfer-cost", "1e6"]);
    assert_eq!(report["grid"], "");
    assert_eq!(report["grid_omitted"]["columns"], 16000033);
    let drawn = json_of(&[]);
    assert!(drawn.get("grid_omitted").is_none(), "{drawn}");
}

#[test]
fn unknown_format_fails() {
    let err = stderr_of_failure(&["--format", "xml"]);
    assert!(err.contains("xml") && err.contains("json"), "{err}");
}

/// Flags of `plan` (and `train`) that changed nothing (issue 47, class 3): `--virtual-stages`
/// beside `--plan` or with a schedule of fixed chunks (not even range-checked there),
/// `--lowered` with `--compare`; and `--compare` left out schedules that do not fit the shape
/// without saying so.
#[test]
fn plan_flags_that_change_nothing_are_refused_and_compare_names_what_it_leaves_out() {
    use crate::common::{USAGE, failure_with, success};
    let dir = crate::common::scratch("plan-unread");
    let file = dir.path().join("p.csv");
    std::fs::write(&file, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n").unwrap();
    let f = file.to_str().unwrap();
    for (args, said) in [
        (
            vec!["plan", "--schedule", "1f1b", "--virtual-stages", "0"],
            "--virtual-stages 0 applies to --schedule interleaved",
        ),
        (
            vec!["plan", "--schedule", "zb-v", "--virtual-stages", "3"],
            "--virtual-stages 3 applies to --schedule interleaved",
        ),
        (
            vec!["plan", "--plan", f, "--virtual-stages", "3"],
            "--virtual-stages 3: the --plan file gives its own chunks",
        ),
        (
            vec![
                "train",
                "--width",
                "16",
                "--plan",
                f,
                "--virtual-stages",
                "3",
            ],
            "--virtual-stages 3: the --plan file",
        ),
        (vec!["plan", "--compare", "--lowered"], "--lowered"),
    ] {
        let e = failure_with(USAGE, &args);
        assert!(e.contains(said), "{args:?}: {e}");
    }
    let out = success(&["plan", "--compare", "--stages", "4", "--micro-batches", "6"]);
    assert!(
        out.contains(
            "not compared: interleaved-v2: the micro-batches (6) are not a multiple of the \
             stages (4)"
        ) && out.contains("not compared: dualpipev: the micro-batches (6) are fewer than twice"),
        "{out}"
    );
    // Interleaved rows read it under --compare.
    success(&["plan", "--compare", "--virtual-stages", "3"]);
}

/// `plan --zero 3` (issue 50) shows each stage's unshard before its first action, reshard after
/// its last computation that reads the values (the last `B` split around it), and reduce; `--zero 2` the reduce and the unshard after the optimizer
/// step; levels 0 and 1 add nothing to a plan, so the flag refuses them.
#[test]
fn zero_levels_show_their_actions_in_the_lowered_plan() {
    let three = stdout_of(&["--stages", "2", "--micro-batches", "2", "--zero", "3"]);
    assert!(
        three.contains("0: 0US 0F0 0SF0 0F1 0SF1 0RB0 0B0 0RB1 0I1 0RS 0W1 0RG 0OPT")
            && three.contains("1: 1US 1RF0")
            && three.contains("whole only from sUS to sRS"),
        "{three}"
    );
    // Where the schedule keeps the whole gradient, said and counted: stage 0 from its first
    // backward to its reduce.
    assert!(
        three.contains("stage 0: 5 of its 13 actions, from `0B0` to `0RG`"),
        "{three}"
    );
    let two = stdout_of(&["--stages", "2", "--micro-batches", "2", "--zero", "2"]);
    assert!(two.contains("0B1 0RG 0OPT 0US\n"), "{two}");
    let zbv = json_of(&["--schedule", "zb-v", "--stages", "2", "--zero", "3"]);
    let lowered = zbv["lowered_plan"].as_str().unwrap();
    assert_eq!(lowered.matches("US ").count(), 4, "{lowered}");
    assert_eq!(zbv["zero"], 3);
    let refused = stderr_of_failure(&["--zero", "1"]);
    assert!(
        refused.contains("'1'") && refused.contains("2..=3"),
        "{refused}"
    );
    let csv = stderr_of_failure(&["--zero", "3", "--format", "csv"]);
    assert!(csv.contains("drop --zero"), "{csv}");
}
