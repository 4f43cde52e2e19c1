//! `pipetrain doctor --quick` on the CPU: what it found, one line per case under its section as
//! the case ends, one table, exit 0; a failing case exits 4 and is named; bad input is refused.

use crate::common;

/// Exit code of a doctor whose sweep had a failed case.
const DOCTOR_FAILED: i32 = 4;

/// The case lines (`ok      NAME  (MEASURED)`) of a doctor's stdout, before its table, by the
/// section printed above them; and the table's case names and verdicts.
#[allow(clippy::type_complexity)]
fn parse(stdout: &str) -> (Vec<(String, String)>, Vec<(String, String)>, String) {
    let (lines, table) = stdout
        .split_once("\ndoctor: the sweep on ")
        .unwrap_or_else(|| panic!("no table in:\n{stdout}"));
    let mut section = String::new();
    let mut cases = Vec::new();
    for line in lines.lines() {
        if let Some(name) = line.strip_prefix("section ") {
            section = name.to_string();
        } else if let Some(rest) = line
            .strip_prefix("ok      ")
            .or_else(|| line.strip_prefix("FAILED  "))
        {
            let name = rest.rsplit_once("  (").map_or(rest, |(n, _)| n);
            cases.push((section.clone(), name.to_string()));
        }
    }
    let rows: Vec<(String, String)> = table
        .lines()
        .skip(2)
        .filter_map(|l| {
            let verdict = l.rsplit_once("  ")?.1.trim();
            let name = l.split("  ").next()?.trim();
            matches!(verdict, "ok" | "FAILED").then(|| (name.to_string(), verdict.to_string()))
        })
        .collect();
    let last = table.lines().last().unwrap_or_default().to_string();
    (cases, rows, last)
}

#[test]
fn doctor_quick_prints_each_case_under_its_section_then_one_table_and_exits_0() {
    let args = ["doctor", "--quick"];
    let out = common::success(&args);
    assert!(
        out.starts_with("pipetrain doctor on cpu (quick)\n"),
        "{out}"
    );
    assert!(
        out.contains("cache:  none: flex's kernels are compiled into the binary"),
        "{out}"
    );
    let (cases, rows, last) = parse(&out);
    // One line per case, each under the section that ran it, and the same cases in the table.
    assert!(cases.len() >= 20, "{out}");
    let names: Vec<&str> = cases.iter().map(|(_, n)| n.as_str()).collect();
    let table: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, table, "{out}");
    for (section, name) in &cases {
        let expected = match name.split(' ').next().unwrap_or_default() {
            "matmul" => "matmul_precision",
            "regression:" => "regressions",
            "handoff" => "handoffs",
            "gpt" | "resnet" | "unet" => "models",
            "checkpoint" => "checkpoints",
            "bf16" => "mixed_precision",
            _ if name.contains("replicas") => "data_parallel",
            _ if name.contains("interleaved") || name.contains("zb-v") => "mlp_virtual_stages",
            _ => "mlp_schedules",
        };
        assert_eq!(section, expected, "{name}");
    }
    for needle in [
        "bf16 ",
        "handoff device",
        "checkpoint ",
        "zb-h1",
        "replicas",
    ] {
        assert!(
            names.iter().any(|n| n.contains(needle)),
            "no {needle:?} case:\n{out}"
        );
    }
    assert!(rows.iter().all(|(_, v)| v == "ok"), "{out}");
    assert_eq!(last, format!("{} passed, 0 failed", cases.len()), "{out}");
}

#[test]
fn a_failing_case_makes_the_doctor_exit_4_and_names_it() {
    let args = [
        "doctor",
        "--quick",
        "--sections",
        "mlp_schedules",
        "--perturb",
        "mlp sgd 1f1b p=2 m=4 remat=never",
    ];
    let stderr = common::failure_with(DOCTOR_FAILED, &args);
    assert!(
        stderr.contains("error: doctor: 1 of ")
            && stderr.contains("mlp sgd 1f1b p=2 m=4 remat=never Split"),
        "{stderr}"
    );
    let out = common::pipetrain(&args);
    let (cases, rows, last) = parse(&String::from_utf8_lossy(&out.stdout));
    assert!(cases.iter().all(|(s, _)| s == "mlp_schedules"), "{cases:?}");
    let failed: Vec<&str> = rows
        .iter()
        .filter(|(_, v)| v == "FAILED")
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        failed,
        ["mlp sgd 1f1b p=2 m=4 remat=never Split { weight_group: 0 }"],
        "{rows:?}"
    );
    assert_eq!(last, format!("{} passed, 1 failed", rows.len() - 1));
}

#[test]
fn the_doctor_refuses_an_unknown_section_and_a_device_it_cannot_use() {
    let stderr = common::failure_with(common::USAGE, &["doctor", "--sections", "mlp,nope"]);
    assert!(
        stderr.contains("\"mlp\"") && stderr.contains("mlp_schedules, mlp_virtual_stages"),
        "{stderr}"
    );
    let stderr = common::failure_with(
        common::USAGE,
        &["doctor", "--device", "cpu", "--matmul-precision", "tf32"],
    );
    assert!(
        stderr.contains("--matmul-precision tf32: a CPU has no TF32"),
        "{stderr}"
    );
    let stderr = common::failure_with(common::USAGE, &["doctor", "--device", "gpu0"]);
    assert!(stderr.contains("expected cpu, cuda or cuda:N"), "{stderr}");
    // Without a GPU the probe's words, before any case runs.
    if pipetrain::engine::device::cuda(0).is_err() {
        let stderr = common::failure_with(common::USAGE, &["doctor", "--device", "cuda:0"]);
        assert!(stderr.contains("--device cuda:0: "), "{stderr}");
    }
}

#[test]
fn a_missing_python_skips_the_speed_check_and_says_why() {
    let args = [
        "doctor",
        "--quick",
        "--sections",
        "matmul_precision",
        "--compare-pytorch",
        "/nonexistent/python3",
    ];
    let out = common::success(&args);
    assert!(
        out.contains("speed check skipped: /nonexistent/python3 does not exist"),
        "{out}"
    );
}
