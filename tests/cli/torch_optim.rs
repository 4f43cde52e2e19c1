//! The optimizer flags (torch.optim's settings and defaults) and `--lr-schedule` from the
//! command line: each under `--verify` at 2 stages × 2 replicas, the rates in `--metrics`, and a
//! scheduled run resumed bit for bit (issue 17, items 3 and 4).

use crate::common;
use common::{TINY, USAGE, failure_with, max_rel_diff, scratch, success, tensors};

/// `pipetrain train <TINY> --micro-batches 2 --steps <steps> <extra>`.
fn tiny<'a>(steps: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train"];
    args.extend_from_slice(&TINY[..6]);
    args.extend_from_slice(&["--steps", steps, "--micro-batches", "2"]);
    args.extend_from_slice(extra);
    args
}

/// The `lr` column of a metrics CSV.
fn rates(csv: &std::path::Path) -> Vec<f64> {
    let text = std::fs::read_to_string(csv).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|c| *c == "lr").unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').nth(col).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn every_optimizer_and_schedule_verifies_at_two_by_two() {
    let runs: [&[&str]; 6] = [
        &[
            "--optimizer",
            "sgd",
            "--momentum",
            "0.9",
            "--dampening",
            "0.1",
            "--weight-decay",
            "0.01",
        ],
        &[
            "--optimizer",
            "sgd",
            "--momentum",
            "0.9",
            "--nesterov",
            "--lr-schedule",
            "linear",
        ],
        &[
            "--optimizer",
            "adam",
            "--betas",
            "0.8,0.99",
            "--eps",
            "1e-6",
            "--weight-decay",
            "0.01",
        ],
        &[
            "--optimizer",
            "adamw",
            "--lr",
            "1e-3",
            "--lr-schedule",
            "cosine",
            "--warmup-steps",
            "1",
            "--min-lr",
            "1e-5",
        ],
        &[
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--lr-schedule",
            "step",
            "--lr-step-size",
            "1",
            "--lr-gamma",
            "0.5",
        ],
        &["--optimizer", "sgd-momentum", "--weight-decay", "1e-4"],
    ];
    for extra in runs {
        let mut args = tiny("3", &["--stages", "2", "--replicas", "2", "--verify"]);
        args.extend_from_slice(extra);
        max_rel_diff(&success(&args));
    }
}

#[test]
fn the_metrics_show_the_scheduled_rates() {
    let tmp = scratch("lr-schedule");
    let csv = tmp.path().join("m.csv");
    let m = csv.to_str().unwrap();
    let args = [
        "--lr",
        "0.1",
        "--lr-schedule",
        "cosine",
        "--warmup-steps",
        "2",
        "--min-lr",
        "0.01",
    ];
    let mut run = tiny("6", &args);
    run.extend_from_slice(&["--metrics", m]);
    let out = success(&run);
    assert!(
        out.contains("lr schedule cosine to 0.01 at step 6 after 2 warm-up steps"),
        "{out}"
    );
    // LinearLR(start_factor=1/2, total_iters=1), then CosineAnnealingLR(T_max=4, eta_min=0.01).
    let cosine = |u: f64| 0.01 + 0.09 * (1.0 + (std::f64::consts::PI * u / 4.0).cos()) / 2.0;
    let expected = [
        0.05,
        0.1,
        cosine(0.0),
        cosine(1.0),
        cosine(2.0),
        cosine(3.0),
    ];
    for (got, want) in rates(&csv).iter().zip(expected) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
}

#[test]
fn a_scheduled_run_resumes_bit_for_bit() {
    let tmp = scratch("lr-resume");
    let path = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let (full, half, m_full, m_rest) = (path("full"), path("half"), path("mf.csv"), path("mr.csv"));
    let schedule = [
        "--optimizer",
        "adam",
        "--lr-schedule",
        "step",
        "--lr-step-size",
        "1",
        "--lr-gamma",
        "0.5",
        "--warmup-steps",
        "1",
    ];
    let mut a = tiny("4", &schedule);
    a.extend_from_slice(&["--checkpoint", &full, "--metrics", &m_full]);
    success(&a);
    let mut b = tiny("2", &schedule);
    b.extend_from_slice(&["--checkpoint", &half]);
    success(&b);
    let mut c = tiny("4", &schedule);
    c.extend_from_slice(&[
        "--resume",
        &half,
        "--checkpoint",
        &half,
        "--metrics",
        &m_rest,
    ]);
    success(&c);
    assert_eq!(rates(m_rest.as_ref()), rates(m_full.as_ref())[2..]);
    let (x, y) = (tensors(full.as_ref()), tensors(half.as_ref()));
    for (name, bytes) in &x {
        if name.ends_with("weight") || name.ends_with("bias") {
            assert_eq!(Some(bytes), y.get(name), "{name}");
        }
    }
    // A cosine schedule's rates depend on --steps: resuming with others is refused.
    let cosine = ["--lr-schedule", "cosine"];
    let mut d = tiny("2", &cosine);
    d.extend_from_slice(&["--checkpoint", &half]);
    success(&d);
    let mut e = tiny("4", &cosine);
    e.extend_from_slice(&["--resume", &half]);
    let err = failure_with(USAGE, &e);
    assert!(err.contains("--lr-schedule"), "{err}");
}

#[test]
fn settings_of_another_optimizer_and_torchs_refusals_are_usage_errors() {
    let e = failure_with(
        USAGE,
        &tiny("1", &["--optimizer", "sgd", "--betas", "0.9,0.99"]),
    );
    assert!(
        e.contains("--betas is not a setting of --optimizer sgd"),
        "{e}"
    );
    let e = failure_with(USAGE, &tiny("1", &["--optimizer", "adam", "--nesterov"]));
    assert!(
        e.contains("--nesterov is not a setting of --optimizer adam"),
        "{e}"
    );
    let e = failure_with(USAGE, &tiny("1", &["--optimizer", "sgd", "--nesterov"]));
    assert!(e.contains("Nesterov momentum needs momentum > 0"), "{e}");
    let e = failure_with(
        USAGE,
        &tiny("1", &["--lr-schedule", "cosine", "--min-lr", "1"]),
    );
    assert!(e.contains("min_lr 1: must be in [0, lr = 0.001]"), "{e}");
}
