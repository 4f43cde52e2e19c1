//! `MatmulPrecision` (issue 34): what f32 matmuls compute in on a GPU. A CPU has no TF32: the
//! setting is accepted there, reaches every worker's setup and the banner, and changes nothing; a
//! value other than fp32 or tf32 is refused naming it. (On a GPU, tests/gpu.rs checks that a
//! device keeps the precision it started with and refuses the other.)

use crate::common;
use common::{TINY, USAGE, failure_with};

use pipetrain::{MatmulPrecision, OptimizerConfig, Pipeline};
use pipetrain_models::MlpConfig;

/// What a CPU can observe of the setting (issue 48 item 5; the bits are the GPU suite's, a CPU
/// has no TF32): it reaches every worker's setup, and the CPU device still multiplies in IEEE
/// fp32.
#[test]
fn the_precision_reaches_every_workers_setup_and_a_cpu_keeps_fp32() {
    let init = common::seeded(7, |d| MlpConfig::new(8, 2, 3).init(d));
    for precision in [MatmulPrecision::Tf32, MatmulPrecision::Fp32] {
        let pipeline = Pipeline::builder()
            .layers(init.clone())
            .balance([2, 1])
            .replicas(2)
            .micro_batches(2)
            .optimizer(OptimizerConfig::adam())
            .matmul_precision(precision)
            .threads_per_worker(1)
            .build()
            .unwrap();
        let workers = pipeline.setup().workers();
        assert_eq!(workers.len(), 4);
        for w in workers {
            assert_eq!(w.matmul_precision, precision, "{}", w.worker);
            assert_eq!(
                pipetrain::engine::device::matmul_precision(&w.device),
                Some(MatmulPrecision::Fp32),
                "a CPU multiplies in IEEE fp32"
            );
        }
    }
}

/// The command line's setting reaches the workers and the banner, which says what a CPU does
/// instead; the default says nothing; a value other than fp32 or tf32 is refused naming it.
#[test]
fn the_command_line_takes_both_precisions_on_a_cpu_and_refuses_others() {
    let banner = |extra: &[&str]| {
        let mut args: Vec<&str> = vec!["train"];
        args.extend(TINY);
        args.extend(extra);
        let out = common::pipetrain(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        all.lines()
            .find(|l| l.starts_with("gpu settings on a cpu:"))
            .map(str::to_string)
    };
    let tf32 = banner(&["--matmul-precision", "tf32"]).expect("a banner line for tf32");
    assert!(
        tf32.contains("f32 matmuls in tf32 (a CPU multiplies in IEEE fp32)")
            && tf32.contains("by device copy"),
        "{tf32}"
    );
    // The device hand-off is the default (since the H200 check of 2026-11-28); `host` is the
    // setting a banner names.
    let host = banner(&["--handoff", "host"]).expect("a banner line for the hand-off");
    assert!(
        host.contains("in fp32") && host.contains("by host copy (a CPU passes handles)"),
        "{host}"
    );
    assert_eq!(banner(&["--matmul-precision", "fp32"]), None);
    assert_eq!(banner(&["--handoff", "device"]), None);
    let mut args: Vec<&str> = vec!["train"];
    args.extend(TINY);
    args.extend(["--matmul-precision", "bf16"]);
    let err = failure_with(USAGE, &args);
    assert!(
        err.contains("bf16") && err.contains("fp32 or tf32"),
        "{err}"
    );
}
