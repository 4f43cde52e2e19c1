//! `pipetrain train --schedule zb-h1`: the zero-bubble schedule from the command line, on models
//! whose every stage splits its backward (the MLP, the GPT) and on a stage that does not (a
//! ResNet's convolutions).

use crate::common;
use common::{TINY_GPT, TINY_RESNET, max_rel_diff, pipetrain, stdout_of_success};

/// Runs `args` (a `--verify` run) to success: its stdout, after checking the verification line,
/// and its stderr.
fn verified(args: &[&str]) -> (String, String) {
    let out = pipetrain(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let stdout = stdout_of_success(args, out);
    max_rel_diff(&stdout);
    (stdout, stderr)
}

#[test]
fn zb_h1_over_three_stages_matches_single_device() {
    let args = [
        "train",
        "--stages",
        "3",
        "--micro-batches",
        "6",
        "--schedule",
        "zb-h1",
        "--width",
        "32",
        "--hidden-layers",
        "4",
        "--batch",
        "24",
        "--steps",
        "2",
        "--verify",
    ];
    let (stdout, stderr) = verified(&args);
    assert!(
        stdout.contains("zb-h1"),
        "the header names the schedule:\n{stdout}"
    );
    assert!(
        !stderr.contains("warning"),
        "every MLP stage splits:\n{stderr}"
    );
}

/// A ResNet's convolution stage has no split layer (only its head's `Linear` splits): ZB-H1
/// warns for that stage alone, runs full backwards there, and still trains like one device.
#[test]
fn zb_h1_on_a_stage_without_split_backward_warns_and_still_matches() {
    let args = [
        &["train"][..],
        &TINY_RESNET,
        &[
            "--remat",
            "never",
            "--classes",
            "3",
            "--batch",
            "8",
            "--balance",
            "3,1",
        ],
        &["--micro-batches", "2", "--steps", "1"],
        &["--schedule", "zb-h1", "--verify"],
    ]
    .concat();
    let (_, stderr) = verified(&args);
    assert!(
        stderr.contains("warning: zb-h1 places split backwards, but stage 0 (layers 0.."),
        "{stderr}"
    );
    assert!(stderr.contains("runs full backwards"), "{stderr}");
    assert!(
        !stderr.contains("stage 1 (layers"),
        "the head's stage splits:\n{stderr}"
    );
}

/// The GPT splits its projections, MLP and unembedding: ZB-H1 places `I` and `W` on every
/// stage holding a block or the head, without a warning.
#[test]
fn zb_h1_splits_every_gpt_stage_of_blocks() {
    let args = [
        &["train"][..],
        &TINY_GPT,
        &["--balance", "2,2", "--micro-batches", "2", "--steps", "1"],
        &["--schedule", "zb-h1", "--verify"],
    ]
    .concat();
    let (_, stderr) = verified(&args);
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// `pipetrain plan --format csv` writes the plan `train --plan` runs: the same training as
/// `--schedule`, bitwise (same plan, same order: the two final checkpoints hold the same bits
/// after 3 steps), and within the tolerance of one device.
#[test]
fn a_plan_written_as_csv_trains_like_its_schedule() {
    let dir = common::scratch("plan-csv");
    let path = dir.path().join("zb.csv");
    let csv = common::success(&[
        "plan",
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--schedule",
        "zb-h1",
        "--format",
        "csv",
    ]);
    assert_eq!(csv.lines().count(), 2, "one row per stage:\n{csv}");
    assert!(csv.starts_with("0F0,0F1,0I0,0W0,"), "{csv}");
    std::fs::write(&path, &csv).unwrap();
    let shape = ["--stages", "2", "--micro-batches", "4", "--batch", "16"];
    let run = |how: &[&str], checkpoint: &str| {
        let path = dir.path().join(checkpoint);
        let path = path.to_str().unwrap();
        let args = [
            &["train"][..],
            &common::TINY,
            &shape,
            how,
            &["--steps", "3", "--verify", "--checkpoint", path],
        ]
        .concat();
        common::success(&args)
    };
    let from_file = run(&["--plan", path.to_str().unwrap()], "file.st");
    let generated = run(&["--schedule", "zb-h1"], "generated.st");
    max_rel_diff(&from_file);
    max_rel_diff(&generated);
    // Bitwise: every tensor of the two final checkpoints, weights and optimizer state.
    let (a, b) = (
        common::tensors(&dir.path().join("file.st")),
        common::tensors(&dir.path().join("generated.st")),
    );
    let mut names: Vec<&String> = a.keys().collect();
    names.sort();
    let mut others: Vec<&String> = b.keys().collect();
    others.sort();
    assert_eq!(names, others, "the same tensors");
    assert!(names.iter().any(|n| n.ends_with("weight")), "{names:?}");
    for name in names {
        assert!(
            a[name] == b[name],
            "`{name}` differs bitwise between the plan file's run and the schedule's"
        );
    }
    assert!(from_file.contains("a given plan"), "{from_file}");
}

/// A hand-written plan that deadlocks is refused before training, naming the file, line and
/// column; so is one of the wrong shape, naming the flags that fix it, by `train` and `plan`.
#[test]
fn a_bad_plan_file_is_refused_with_line_and_column() {
    let dir = common::scratch("plan-bad");
    let path = dir.path().join("mine.csv");
    std::fs::write(&path, "# mine\n0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n").unwrap();
    let file = path.to_str().unwrap();
    let args = |extra: &[&'static str]| -> Vec<String> {
        [&["train", "--plan", file][..], &common::TINY, extra]
            .concat()
            .into_iter()
            .map(String::from)
            .collect()
    };
    let refused = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::failure_with(common::USAGE, &args)
    };
    let err = refused(args(&["--stages", "2", "--micro-batches", "2"]));
    assert!(
        err.contains(&format!(
            "--plan {file}: plan file line 2, column 2 (`0B0`): deadlock"
        )),
        "{err}"
    );
    std::fs::write(&path, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n").unwrap();
    let err = refused(args(&["--stages", "2", "--micro-batches", "4"]));
    assert!(err.contains("--micro-batches 2"), "{err}");
    // Issue 38: `plan` ran the file's 2 micro-batches where 4 were asked for.
    let err = common::failure_with(
        common::USAGE,
        &["plan", "--plan", file, "--micro-batches", "4"],
    );
    assert!(
        err.contains("not --micro-batches 4") && err.contains("--micro-batches 2"),
        "{err}"
    );
    let plan = common::success(&["plan", "--plan", file, "--stages", "2"]);
    assert!(plan.contains("2 stages, 2 micro-batches"), "{plan}");
    std::fs::write(&path, "0F0,0RB0,0B0\n").unwrap();
    let err = refused(args(&["--stages", "1", "--micro-batches", "1"]));
    assert!(
        err.contains("line 1: column 2") && err.contains("compute actions only"),
        "{err}"
    );
}

/// `plan --compare` puts every schedule in one table, with the simulator's speed-up over 1F1B.
#[test]
fn plan_compare_tables_every_schedule() {
    let out = common::success(&["plan", "--compare", "--stages", "4", "--micro-batches", "8"]);
    let row = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row:\n{out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("1f1b")[1..],
        ["33", "27.27", "%", "1.00x", "4", "3", "2", "1"]
    );
    assert_eq!(row("gpipe")[1..5], ["33", "27.27", "%", "1.00x"]);
    assert_eq!(
        row("zb-h1")[1..],
        ["27", "11.11", "%", "1.22x", "4", "4", "4", "4"]
    );
    let json: serde_json::Value = serde_json::from_str(&common::success(&[
        "plan",
        "--compare",
        "--format",
        "json",
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--weight-cost",
        "0.5",
    ]))
    .unwrap();
    assert_eq!(json["weight_cost"], 0.5);
    // gpipe, 1f1b, zb-h1, zb-2p, zb-v, v-min, v-half, interleaved-v2 and interleaved-zb-v2
    // (4 micro-batches fill whole rounds of 2), looped-bfs-v2 and dualpipev (4 micro-batches,
    // twice the stages)
    assert_eq!(json["schedules"].as_array().unwrap().len(), 11);
}

/// `--schedule interleaved --virtual-stages 2`: the model is cut into stages × 2 chunks and
/// trains like one device; a micro-batch count that is not a multiple of the stages is refused
/// naming the nearest that work.
#[test]
fn interleaved_from_the_command_line() {
    let shape = [
        "--stages",
        "2",
        "--virtual-stages",
        "2",
        "--schedule",
        "interleaved",
        "--width",
        "16",
        "--hidden-layers",
        "4",
    ];
    let stdout = common::success(
        &[
            &["train"][..],
            &shape,
            &[
                "--micro-batches",
                "4",
                "--batch",
                "16",
                "--steps",
                "2",
                "--verify",
            ],
        ]
        .concat(),
    );
    max_rel_diff(&stdout);
    assert!(stdout.contains("interleaved-v2"), "{stdout}");
    // The split is measured (by time): only its chunk count is fixed, stages × v = 4.
    let split = stdout
        .lines()
        .find(|l| l.starts_with("stage split: ["))
        .unwrap_or_else(|| panic!("no split line:\n{stdout}"));
    assert_eq!(split.matches(" | ").count(), 3, "{split}");
    let err = common::failure_with(
        common::USAGE,
        &[
            &["train"][..],
            &shape,
            &["--micro-batches", "3", "--batch", "12"],
        ]
        .concat(),
    );
    assert!(
        err.contains("--micro-batches 2 or --micro-batches 4"),
        "{err}"
    );
    let out = common::success(&["plan", "--compare", "--stages", "2", "--micro-batches", "4"]);
    assert!(out.contains("interleaved-v2"), "{out}");
}

/// `--schedule zb-v`: two chunks per worker in a V, trained like one device; `plan --compare`
/// lists it.
#[test]
fn zb_v_from_the_command_line() {
    let stdout = common::success(&[
        "train",
        "--schedule",
        "zb-v",
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--batch",
        "16",
        "--width",
        "16",
        "--hidden-layers",
        "4",
        "--steps",
        "2",
        "--verify",
    ]);
    max_rel_diff(&stdout);
    assert!(stdout.contains("zb-v"), "{stdout}");
    let out = common::success(&["plan", "--compare", "--stages", "4", "--micro-batches", "8"]);
    let zb_v = out
        .lines()
        .find(|l| l.trim_start().starts_with("zb-v "))
        .unwrap_or_else(|| panic!("no zb-v row:\n{out}"));
    assert!(zb_v.contains("5.88 %"), "{zb_v}");
}

/// The controllable-memory schedules from the command line (issue 51's bars): at 4 stages and
/// 16 micro-batches `plan` shows V-Min's first worker holding at most half of 1F1B's first
/// stage's activations, and V-Half's at most ⌊(p + 2)/2⌋/p of them (¾ at p = 4: the paper's
/// V-Half memory); `train --schedule v-half --stages 2 --micro-batches 8 --verify` passes, and
/// so do V-Min and ZB-2P.
#[test]
fn controllable_memory_schedules_from_the_command_line() {
    let first = |schedule: &str| {
        let json: serde_json::Value = serde_json::from_str(&common::success(&[
            "plan",
            "--schedule",
            schedule,
            "--stages",
            "4",
            "--micro-batches",
            "16",
            "--format",
            "json",
        ]))
        .unwrap();
        let s = &json["stash_in_stages"];
        (
            s["per_worker"][0].as_f64().unwrap(),
            s["one_f_one_b"][0].as_f64().unwrap(),
        )
    };
    let (v_min, one_f_one_b) = first("v-min");
    assert_eq!(one_f_one_b, 4.0);
    assert!(
        v_min <= one_f_one_b / 2.0,
        "v-min {v_min} against 1f1b {one_f_one_b}"
    );
    let (v_half, _) = first("v-half");
    assert!(v_half <= one_f_one_b * 3.0 / 4.0, "v-half {v_half}");
    assert!(v_min < v_half, "v-min {v_min}, v-half {v_half}");
    let text = common::success(&[
        "plan",
        "--schedule",
        "v-min",
        "--stages",
        "4",
        "--micro-batches",
        "16",
    ]);
    assert!(
        text.contains("(a chunk is 1/2 of a stage): 2 2 2 2; 1f1b's at this shape: 4 3 2 1"),
        "{text}"
    );
    for schedule in ["v-half", "v-min", "zb-2p"] {
        let args = [
            "train",
            "--schedule",
            schedule,
            "--stages",
            "2",
            "--micro-batches",
            "8",
            "--width",
            "16",
            "--hidden-layers",
            "4",
            "--batch",
            "16",
            "--steps",
            "2",
            "--verify",
        ];
        let (stdout, _) = verified(&args);
        assert!(stdout.contains(schedule), "{stdout}");
    }
}

/// `pipetrain plan --schedule SCHEDULE --stages 2 --micro-batches M`, and its timeline's row of
/// `rank`.
fn plan_row(schedule: &str, micro_batches: &str, rank: usize) -> (String, String) {
    let plan = common::success(&[
        "plan",
        "--schedule",
        schedule,
        "--stages",
        "2",
        "--micro-batches",
        micro_batches,
    ]);
    let row = plan
        .lines()
        .find(|l| l.starts_with(&format!("rank {rank} |")))
        .unwrap_or_else(|| panic!("no rank {rank} row:\n{plan}"))
        .to_string();
    (plan, row)
}

/// `--schedule looped-bfs`: chunks placed as interleaved's, trained like one device under
/// `--verify`, any micro-batch count (3 over 2 stages here); `plan` draws it rank by rank and
/// `--compare` has its row.
#[test]
fn looped_bfs_from_the_command_line() {
    let stdout = common::success(&[
        "train",
        "--stages",
        "2",
        "--virtual-stages",
        "2",
        "--schedule",
        "looped-bfs",
        "--width",
        "16",
        "--hidden-layers",
        "4",
        "--micro-batches",
        "3",
        "--batch",
        "12",
        "--steps",
        "2",
        "--verify",
    ]);
    max_rel_diff(&stdout);
    assert!(stdout.contains("looped-bfs-v2"), "{stdout}");
    // Rank 0 forwards all three micro-batches through chunk 0, then through chunk 2.
    let (plan, rank0) = plan_row("looped-bfs", "3", 0);
    let cells: Vec<&str> = rank0.split_whitespace().skip(3).take(6).collect();
    assert_eq!(cells, ["0F0", "0F1", "0F2", "2F0", "2F1", "2F2"], "{plan}");
    let out = common::success(&["plan", "--compare", "--stages", "2", "--micro-batches", "4"]);
    assert!(out.contains("looped-bfs-v2"), "{out}");
}

/// `--schedule interleaved-zb`: interleaved's chunks with the split backward, trained like one
/// device under `--verify`; `plan` draws its `I`s and `W`s rank by rank; a micro-batch count
/// that is not a multiple of the stages is refused naming the nearest that work.
#[test]
fn interleaved_zb_from_the_command_line() {
    let shape = [
        "--stages",
        "2",
        "--schedule",
        "interleaved-zb",
        "--width",
        "16",
        "--hidden-layers",
        "4",
    ];
    let train = |m: &'static str, batch: &'static str| {
        let run = ["--micro-batches", m, "--batch", batch, "--steps", "2"];
        [&["train"][..], &shape, &run, &["--verify"]].concat()
    };
    let stdout = common::success(&train("4", "16"));
    max_rel_diff(&stdout);
    assert!(stdout.contains("interleaved-zb-v2"), "{stdout}");
    let err = common::failure_with(common::USAGE, &train("3", "12"));
    assert!(
        err.contains("--micro-batches 2 or --micro-batches 4"),
        "{err}"
    );
    // Rank 1 (the last) runs chunk 3's first input gradient right after its first forward.
    let (plan, rank1) = plan_row("interleaved-zb", "4", 1);
    assert!(rank1.contains("3F0 3I0"), "{plan}");
}

/// `--schedule dualpipev`: trained like one device under `--verify`; fewer micro-batches than
/// twice the stages are refused naming the least that works.
#[test]
fn dualpipev_from_the_command_line() {
    let train = |m: &'static str, batch: &'static str| {
        let run = ["--micro-batches", m, "--batch", batch, "--steps", "2"];
        let shape = ["--stages", "2", "--schedule", "dualpipev", "--width", "16"];
        [
            &["train"][..],
            &shape,
            &run,
            &["--hidden-layers", "4", "--verify"],
        ]
        .concat()
    };
    let stdout = common::success(&train("4", "16"));
    max_rel_diff(&stdout);
    assert!(stdout.contains("dualpipev"), "{stdout}");
    let err = common::failure_with(common::USAGE, &train("3", "12"));
    assert!(err.contains("--micro-batches 4"), "{err}");
    // Rank 0 pairs stage 0's forward of micro-batch 3 with stage 3's backward of 1.
    let (plan, rank0) = plan_row("dualpipev", "4", 0);
    assert!(rank0.contains("0F3 3B1"), "{plan}");
}

/// Every schedule with several chunks per rank under `--verify` on the layouts the equivalence
/// suite sweeps, 2 ranks × 2 chunks each: 2 replicas with `--remat always` (the MLP), the
/// U-Net's skips cut at every chunk boundary (`1,2,2,1`: `skip0` goes from chunk 0 to chunk 3,
/// on another rank under interleaved's placement and on the same rank under the V's), and the
/// GPT's tied embeddings on 2 replicas (the tie's halves on chunks 0 and 3).
#[test]
fn multi_chunk_schedules_pass_verify_on_replicas_remat_skips_and_ties() {
    let m = ["--micro-batches", "4", "--steps", "2", "--stages", "2"];
    let mlp = [
        "--width",
        "16",
        "--hidden-layers",
        "4",
        "--batch",
        "16",
        "--replicas",
        "2",
        "--remat",
        "always",
    ];
    let unet = [&common::TINY_UNET[..], &["--classes", "3", "--batch", "12"]].concat();
    let unet = [&unet[..], &["--balance", "1,2,2,1"]].concat();
    let gpt = [&TINY_GPT[..], &["--tie-embeddings", "--replicas", "2"]].concat();
    let gpt = [&gpt[..], &["--balance", "1,1,1,1"]].concat();
    for schedule in [
        "interleaved",
        "zb-v",
        "looped-bfs",
        "interleaved-zb",
        "dualpipev",
        "v-min",
        "v-half",
    ] {
        for model in [&mlp[..], &unet, &gpt] {
            let args = [
                &["train", "--schedule", schedule][..],
                &m,
                model,
                &["--verify"],
            ]
            .concat();
            let (stdout, _) = verified(&args);
            assert!(
                max_rel_diff(&stdout) <= common::TOLERANCE,
                "{args:?}:\n{stdout}"
            );
        }
    }
}
