//! `MatmulPrecision` (issue 34): what f32 matmuls compute in on a GPU. A CPU has no TF32: the
//! setting is accepted there and changes nothing, in the library and on the command line; a
//! value other than fp32 or tf32 is refused naming it. (On a GPU, tests/gpu.rs checks that a
//! device keeps the precision it started with and refuses the other.)

use crate::common;
use common::{TINY, USAGE, failure_with, success};

use burn::prelude::*;
use pipetrain::{MatmulPrecision, OptimizerConfig, Pipeline};
use pipetrain_models::{MlpConfig, synthetic};

#[test]
fn on_a_cpu_tf32_trains_the_same_bits_as_fp32() {
    let init = common::seeded(7, |d| MlpConfig::new(8, 2, 3).init(d));
    let run = |precision| {
        let mut pipeline = Pipeline::builder()
            .layers(init.clone())
            .balance([2, 1])
            .micro_batches(2)
            .optimizer(OptimizerConfig::adam())
            .matmul_precision(precision)
            .threads_per_worker(1)
            .build()
            .unwrap();
        for k in 0..2 {
            let batch = synthetic::classification(7, k, 8, 8, 3, &Device::flex());
            pipeline.train_step(&batch).unwrap();
        }
        pipeline.parameters()
    };
    assert!(run(MatmulPrecision::Tf32) == run(MatmulPrecision::Fp32));
    assert_eq!(
        pipetrain::engine::device::matmul_precision(&Device::flex()),
        Some(MatmulPrecision::Fp32),
        "a CPU multiplies in IEEE fp32"
    );
}

#[test]
fn the_command_line_takes_both_precisions_on_a_cpu_and_refuses_others() {
    let run = |precision: &str| {
        let mut args: Vec<&str> = vec!["train"];
        args.extend(TINY);
        args.extend(["--steps", "2", "--matmul-precision", precision]);
        let out = success(&args);
        out.lines()
            .find(|l| l.starts_with("step") && l.contains(" 2/2 "))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no step 2 line in:\n{out}"))
    };
    let loss = |line: String| {
        let after = line.split("loss").nth(1).unwrap_or_default().to_string();
        after.split_whitespace().next().map(str::to_string)
    };
    assert_eq!(loss(run("tf32")), loss(run("fp32")));
    let mut args: Vec<&str> = vec!["train"];
    args.extend(TINY);
    args.extend(["--matmul-precision", "bf16"]);
    let err = failure_with(USAGE, &args);
    assert!(
        err.contains("bf16") && err.contains("fp32 or tf32"),
        "{err}"
    );
}
