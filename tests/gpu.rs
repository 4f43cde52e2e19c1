//! The GPU suite: every equivalence case of the CPU suite, on CUDA GPU 0, against single-device
//! training on that same GPU (same init, same data), at the CPU suite's bars: within 1e-5
//! (norm-wise relative, per parameter tensor) with SGD and with Adam, and bitwise equal across
//! schedules at the same micro-batch count and weight-gradient group.
//!
//! It is one test that runs every case and prints one table (case, measured, bar, verdict), so
//! that a device check reads one result (`scripts/gpu-check.sh` runs this binary). Without a
//! GPU it prints one line, `skipped: no CUDA device (...)`, and passes: that is the case in a
//! build without the `cuda` feature, and on a machine without a driver or GPU.
//!
//! Its twin, `the_suites_cases_pass_on_the_cpu`, runs the same cases on the CPU (burn's `flex`)
//! in every CI run: the suite's own check, on machines without a GPU.
//! `PIPETRAIN_GPU_SUITE_TABLE=PATH` also writes the GPU run's table to PATH;
//! `PIPETRAIN_GPU_SUITE_SECTIONS="handoffs models"` runs only the sections named (their names
//! are in `suite`), and the log gives each section's time.
//!
//! Cases: MLP on 1–3 stages under GPipe, 1F1B, ZB-H1, ZB-V, interleaved, looped BFS,
//! interleaved zero bubble and DualPipeV, split and fused
//! backward, every remat mode; the GPT (plain and with tied embeddings), the ResNet and the
//! U-Net (skips) on 2–3 stages; 2 replicas on one GPU (plain all-reduce, ZeRO-1, accumulation),
//! uneven micro-batches; a checkpoint saved on the GPU and resumed on the CPU, and the reverse.
//! And the regression cases of the first H200 run (issue 25): replicas on one GPU must hold
//! bitwise equal weights after every one of 10 steps; the 2-stage ResNet, repeated; the 2-stage
//! GPT under SGD; ZB-H1 and the fused backward under Adam at its defaults.
//! Mixed precision (issue 35): the MLP in bf16 on 1–3 stages × 1–2 replicas under every schedule,
//! split and fused backward, remat, against single-device bf16 training on the same GPU
//! (micro-batch by micro-batch), bitwise across schedules; the tied GPT in bf16; bf16 apart from
//! fp32; the bytes sent between stages halved.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use burn::prelude::*;
use pipetrain::engine::{SgdOptions, SingleDevice, difference};
use pipetrain::{
    Activation, Backward, Batch, CrossEntropy, Handoff, Layer, MatmulPrecision, OptimizerConfig,
    Pipeline, PipelineBuilder, Precision, Remat, ScheduleKind,
};
use pipetrain_models::{
    GptConfig, GptLayer, MlpConfig, MlpLayer, ResNetConfig, ResNetLayer, UNetConfig, UNetLayer,
    synthetic,
};

/// The CPU suite's bar against single-device training.
const BAR: f64 = 1e-5;
const SEED: u64 = 25;

/// The matmul precision the suite runs at: `PIPETRAIN_GPU_SUITE_PRECISION` (fp32 or tf32),
/// else the default (fp32).
fn precision() -> MatmulPrecision {
    std::env::var("PIPETRAIN_GPU_SUITE_PRECISION")
        .ok()
        .map(|p| {
            p.parse()
                .expect("PIPETRAIN_GPU_SUITE_PRECISION: fp32 or tf32")
        })
        .unwrap_or_default()
}

/// CUDA GPU 0 at [`precision`], or `None` (after printing the skip line).
fn gpu() -> Option<Device> {
    match pipetrain::engine::device::cuda_with(0, precision()) {
        Ok(device) => Some(device),
        Err(why) => {
            println!("skipped: no CUDA device ({why})");
            None
        }
    }
}

/// One row of the table.
struct Row {
    case: String,
    measured: String,
    bar: String,
    ok: bool,
}

/// The cases' verdicts, in order.
#[derive(Default)]
struct Table {
    rows: Vec<Row>,
}

impl Table {
    /// `got` against `expected`: max_rel_diff within `bar`.
    fn close(
        &mut self,
        case: impl Into<String>,
        got: &[Vec<f32>],
        expected: &[Vec<f32>],
        bar: f64,
    ) {
        let d = difference(got, expected);
        self.rows.push(Row {
            case: case.into(),
            measured: format!(
                "max_rel {:.3e} (abs {:.3e})",
                d.max_relative, d.max_absolute
            ),
            bar: format!("<= {bar:e}"),
            ok: d.max_relative <= bar,
        });
    }

    /// `got` and `theirs` bit for bit.
    fn bitwise(&mut self, case: impl Into<String>, got: &[Vec<f32>], theirs: &[Vec<f32>]) {
        let d = difference(got, theirs);
        self.rows.push(Row {
            case: case.into(),
            measured: match got == theirs {
                true => "bitwise equal".into(),
                false => format!(
                    "differ: max_rel {:.3e} (abs {:.3e})",
                    d.max_relative, d.max_absolute
                ),
            },
            bar: "bitwise".into(),
            ok: got == theirs,
        });
    }

    /// A case that failed to run at all.
    fn failed(&mut self, case: impl Into<String>, error: impl std::fmt::Display) {
        self.rows.push(Row {
            case: case.into(),
            measured: format!("error: {error}"),
            bar: "runs".into(),
            ok: false,
        });
    }

    fn render(&self, on: &str) -> String {
        let width = self.rows.iter().map(|r| r.case.len()).max().unwrap_or(4);
        let mut out = format!("GPU suite on {on}\n");
        let _ = writeln!(
            out,
            "{:<width$}  {:<44}  {:<10}  verdict",
            "case", "measured", "bar"
        );
        for r in &self.rows {
            let verdict = if r.ok { "ok" } else { "FAILED" };
            let _ = writeln!(
                out,
                "{:<width$}  {:<44}  {:<10}  {verdict}",
                r.case, r.measured, r.bar
            );
        }
        let failed = self.rows.iter().filter(|r| !r.ok).count();
        let _ = writeln!(out, "{} passed, {failed} failed", self.rows.len() - failed);
        out
    }
}

/// The optimizers every core case runs under: name, config, learning rate.
/// An optimizer under test: name, config, learning rate.
type OptimizerCase = (&'static str, fn() -> OptimizerConfig, f64);

fn optimizers() -> [OptimizerCase; 2] {
    [
        ("sgd", OptimizerConfig::sgd, 0.1),
        ("adam", OptimizerConfig::adam, 1e-2),
    ]
}

fn mlp(width: usize, hidden: usize, classes: usize) -> Vec<MlpLayer> {
    common::seeded(SEED, |d| MlpConfig::new(width, hidden, classes).init(d))
}

fn mlp_data(steps: u64, rows: usize, width: usize, classes: usize) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::classification(SEED, k, rows, width, classes, &Device::flex()))
        .collect()
}

fn gpt_config() -> GptConfig {
    GptConfig::new(16, 4, 8, 2, 2)
}

fn gpt() -> Vec<GptLayer> {
    common::seeded(SEED, |d| gpt_config().init(d))
}

fn tokens(steps: u64) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::tokens(SEED, k, 8, 4, 16, &Device::flex()))
        .collect()
}

fn resnet() -> Vec<ResNetLayer> {
    common::seeded(SEED, |d| {
        ResNetConfig::new(4, 2, 3).with_image(3, 8).init(d)
    })
}

fn unet() -> Vec<UNetLayer> {
    common::seeded(SEED, |d| UNetConfig::new(2, 2, 3).with_image(1, 4).init(d))
}

fn images(steps: u64, channels: usize, side: usize) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::images(SEED, k, 8, channels, side, 3, &Device::flex()))
        .collect()
}

/// Single-device training of `layers` on `device`, one full-batch step per batch; with
/// `accumulation` k, one step per k batches (on their concatenation).
fn reference<L: Layer>(
    layers: &[L],
    data: &[Batch],
    device: &Device,
    optimizer: &OptimizerConfig,
    lr: f64,
    accumulation: usize,
    ties: &[pipetrain::Tie],
) -> Result<Vec<Vec<f32>>, String> {
    let mut single = SingleDevice::new(layers.to_vec(), device, optimizer)
        .with_ties(ties)
        .map_err(|e| e.to_string())?;
    for group in data.chunks(accumulation) {
        let inputs = Activation::cat(group.iter().map(|b| b.inputs.clone()).collect());
        let targets = Activation::cat(group.iter().map(|b| b.targets.clone()).collect());
        let (inputs, targets) = (
            inputs.map_err(|e| e.to_string())?,
            targets.map_err(|e| e.to_string())?,
        );
        single
            .step(inputs, targets, &CrossEntropy, lr)
            .map_err(|e| e.to_string())?;
    }
    Ok(single.parameters())
}

/// A pipeline of `layers` on `device` (every worker), set up by `setup`, trained on `data`
/// (a split by time needs at least one batch to be measured on).
fn train<L: Layer>(
    layers: &[L],
    data: &[Batch],
    device: &Device,
    setup: impl FnOnce(PipelineBuilder<L>) -> PipelineBuilder<L>,
) -> Result<Pipeline<L>, String> {
    let builder = Pipeline::builder()
        .layers(layers.to_vec())
        .devices([device.clone()])
        .threads_per_worker(1);
    // A split by time is measured on the first batch.
    let built = match data.first() {
        Some(first) => setup(builder).build_with(first),
        None => setup(builder).build(),
    };
    let mut pipeline = built.map_err(|e| e.to_string())?;
    for batch in data {
        let report = pipeline.train_step(batch).map_err(|e| e.to_string())?;
        if !report.loss.is_finite() {
            return Err(format!("loss {}", report.loss));
        }
    }
    Ok(pipeline)
}

/// Runs one case, recording an error as a failed row.
fn run(table: &mut Table, case: &str, body: impl FnOnce(&mut Table) -> Result<(), String>) {
    if let Err(e) = body(table) {
        table.failed(case, e);
    }
}

/// MLP: 1–3 stages × GPipe/1F1B/ZB-H1 × backward (split, fused, split per micro-batch) × remat,
/// under SGD and Adam, against one device; bitwise across schedules at the same weight group.
fn mlp_schedules(t: &mut Table, device: &Device) {
    let init = mlp(8, 5, 3); // 6 layers
    let data = mlp_data(3, 16, 8, 3);
    let m = 4;
    for (name, optimizer, lr) in optimizers() {
        let Ok(expected) = reference(&init, &data, device, &optimizer(), lr, 1, &[]) else {
            t.failed(
                format!("mlp {name} reference"),
                "single-device training failed",
            );
            continue;
        };
        for stages in 1..=3 {
            for (remat, backward) in [
                (Remat::Never, Backward::default()),
                (Remat::ExceptLast, Backward::default()),
                (Remat::Always, Backward::default()),
                (Remat::Never, Backward::Fused),
                (Remat::Always, Backward::Fused),
                (Remat::Never, Backward::Split { weight_group: 1 }),
            ] {
                let mut by_schedule = Vec::new();
                for schedule in ScheduleKind::ALL {
                    let case = format!(
                        "mlp {name} {schedule} p={stages} m={m} remat={remat} {backward:?}"
                    );
                    let got = train(&init, &data, device, |b| {
                        b.stages(stages)
                            .micro_batches(m)
                            .schedule(schedule)
                            .remat(remat)
                            .backward(backward)
                            .optimizer(optimizer())
                            .learning_rate(lr)
                    });
                    match got {
                        Ok(p) => {
                            let got = p.parameters();
                            t.close(case, &got, &expected, BAR);
                            by_schedule.push((schedule, got));
                        }
                        Err(e) => t.failed(case, e),
                    }
                }
                // Same weight-gradient group: GPipe and 1F1B batch the step's W (group m), ZB-H1
                // computes each micro-batch's (group 1) unless the group is given.
                let group = |s: ScheduleKind| match backward {
                    Backward::Split { weight_group: 0 } if s.splits_backward() => 1,
                    Backward::Split { weight_group: 0 } => m,
                    Backward::Split { weight_group } => weight_group,
                    Backward::Fused => 0,
                };
                for (schedule, got) in &by_schedule {
                    if let Some((first, theirs)) = by_schedule
                        .iter()
                        .find(|(other, _)| other != schedule && group(*other) == group(*schedule))
                    {
                        t.bitwise(
                            format!("mlp {name} {schedule} == {first} p={stages} remat={remat} {backward:?}"),
                            got,
                            theirs,
                        );
                    }
                }
            }
        }
    }
}

/// Interleaved (v = 2) and ZB-V on 2 ranks: against one device, and bitwise equal to GPipe over
/// the same chunks at the same weight group.
fn mlp_virtual_stages(t: &mut Table, device: &Device) {
    let init = mlp(8, 7, 3); // 8 layers
    let data = mlp_data(2, 16, 8, 3);
    let (optimizer, lr) = (OptimizerConfig::adam, 1e-2);
    let Ok(expected) = reference(&init, &data, device, &optimizer(), lr, 1, &[]) else {
        return t.failed(
            "mlp virtual stages reference",
            "single-device training failed",
        );
    };
    let balance = [2, 2, 2, 2];
    let per_micro_batch = Backward::Split { weight_group: 1 };
    for (schedule, backward, gpipe_backward) in [
        (
            ScheduleKind::Interleaved { virtual_stages: 2 },
            Backward::default(),
            Backward::default(),
        ),
        (
            ScheduleKind::Interleaved { virtual_stages: 2 },
            Backward::Fused,
            Backward::Fused,
        ),
        (ScheduleKind::ZbV, Backward::default(), per_micro_batch),
        (ScheduleKind::ZbV, Backward::Fused, Backward::Fused),
        (
            ScheduleKind::LoopedBfs { virtual_stages: 2 },
            Backward::default(),
            Backward::default(),
        ),
        (
            ScheduleKind::InterleavedZb { virtual_stages: 2 },
            Backward::default(),
            per_micro_batch,
        ),
        (
            ScheduleKind::DualPipeV,
            Backward::default(),
            per_micro_batch,
        ),
        (ScheduleKind::DualPipeV, Backward::Fused, Backward::Fused),
    ] {
        let case = format!("mlp adam {schedule} p=2 m=4 {backward:?}");
        run(t, &case.clone(), |t| {
            let got = train(&init, &data, device, |b| {
                b.stages(2)
                    .balance(balance)
                    .micro_batches(4)
                    .schedule(schedule)
                    .backward(backward)
                    .optimizer(optimizer())
                    .learning_rate(lr)
            })?
            .parameters();
            t.close(case.clone(), &got, &expected, BAR);
            let gpipe = train(&init, &data, device, |b| {
                b.balance(balance)
                    .micro_batches(4)
                    .schedule(ScheduleKind::GPipe)
                    .backward(gpipe_backward)
                    .optimizer(optimizer())
                    .learning_rate(lr)
            })?
            .parameters();
            t.bitwise(format!("{case} == gpipe over its chunks"), &got, &gpipe);
            Ok(())
        });
    }
}

/// The other models on 2–3 stages, both optimizers; the GPT also tied.
fn models(t: &mut Table, device: &Device) {
    for (name, optimizer, lr) in optimizers() {
        let data = tokens(3);
        for (balance, tied) in [
            (vec![2, 2], false),
            (vec![1, 2, 1], false),
            (vec![2, 2], true),
        ] {
            let ties = if tied {
                vec![gpt_config().tie_embeddings()]
            } else {
                Vec::new()
            };
            let case = format!(
                "gpt {name} balance={balance:?}{}",
                if tied { " tied" } else { "" }
            );
            run(t, &case.clone(), |t| {
                let expected = reference(&gpt(), &data, device, &optimizer(), lr, 1, &ties)?;
                let got = train(&gpt(), &data, device, |mut b| {
                    for tie in ties.clone() {
                        b = b.tie(tie);
                    }
                    b.balance(balance.clone())
                        .micro_batches(4)
                        .optimizer(optimizer())
                        .learning_rate(lr)
                })?;
                t.close(case, &got.parameters(), &expected, BAR);
                Ok(())
            });
        }
        let data = images(3, 3, 8);
        for balance in [vec![2, 2], vec![1, 2, 1]] {
            let layers = resnet();
            let balance = rebalance(&balance, layers.len());
            let case = format!("resnet {name} balance={balance:?}");
            run(t, &case.clone(), |t| {
                let expected = chunked_reference(&layers, &data, device, &optimizer(), lr, 4)?;
                let got = train(&layers, &data, device, |b| {
                    b.balance(balance.clone())
                        .remat(Remat::Never) // batch norm: no re-materialization
                        .micro_batches(4)
                        .optimizer(optimizer())
                        .learning_rate(lr)
                })?;
                t.close(case, &got.parameters(), &expected, BAR);
                Ok(())
            });
        }
        let data = images(3, 1, 4);
        for (balance, replicas) in [(vec![2, 2, 2], 1), (vec![3, 3], 2)] {
            let case = format!("unet {name} balance={balance:?} replicas={replicas} (skips)");
            run(t, &case.clone(), |t| {
                let expected = reference(&unet(), &data, device, &optimizer(), lr, 1, &[])?;
                let got = train(&unet(), &data, device, |b| {
                    b.balance(balance.clone())
                        .replicas(replicas)
                        .micro_batches(2)
                        .optimizer(optimizer())
                        .learning_rate(lr)
                })?;
                t.close(case, &got.parameters(), &expected, BAR);
                Ok(())
            });
        }
    }
}

/// `balance` scaled to a model of `layers` layers: the last stage takes what is left.
fn rebalance(balance: &[usize], layers: usize) -> Vec<usize> {
    let mut out: Vec<usize> = balance[..balance.len() - 1].to_vec();
    let used: usize = out.iter().sum();
    out.push(layers.saturating_sub(used).max(1));
    out
}

/// Single-device training that cuts each batch into `chunks` micro-batches (batch norm: the
/// reference a pipeline with that many micro-batches must match).
fn chunked_reference<L: Layer>(
    layers: &[L],
    data: &[Batch],
    device: &Device,
    optimizer: &OptimizerConfig,
    lr: f64,
    chunks: usize,
) -> Result<Vec<Vec<f32>>, String> {
    precise_reference(
        layers,
        data,
        device,
        (optimizer, lr),
        chunks,
        Precision::Fp32,
        &[],
    )
}

/// Data parallelism on one GPU: plain all-reduce, ZeRO-1, accumulation, uneven micro-batches.
fn data_parallel(t: &mut Table, device: &Device) {
    let init = mlp(8, 3, 3); // 4 layers
    for (name, optimizer, lr) in optimizers() {
        let data = mlp_data(4, 16, 8, 3);
        for (what, zero, accumulation, stages) in [
            ("2 replicas × 1 stage", 0, 1, 1),
            ("2 replicas × 2 stages", 0, 1, 2),
            ("2 replicas × 2 stages zero-1", 1, 1, 2),
            ("2 replicas × 1 stage accumulation 2", 0, 2, 1),
        ] {
            let case = format!("mlp {name} {what}");
            run(t, &case.clone(), |t| {
                let expected =
                    reference(&init, &data, device, &optimizer(), lr, accumulation, &[])?;
                let got = train(&init, &data, device, |b| {
                    b.stages(stages)
                        .replicas(2)
                        .zero(zero)
                        .accumulation(accumulation)
                        .micro_batches(2)
                        .optimizer(optimizer())
                        .learning_rate(lr)
                })?;
                t.close(case.clone(), &got.parameters(), &expected, BAR);
                t.bitwise(
                    format!("{case}: replica 1 == replica 0"),
                    &got.replica_parameters(1),
                    &got.replica_parameters(0),
                );
                Ok(())
            });
        }
        // 15 rows into 2 replicas × 4 micro-batches: parts of 2 and 1 rows.
        let data = mlp_data(3, 15, 8, 3);
        let case = format!("mlp {name} uneven: 15 rows, 2 replicas × 2 stages × m=4");
        run(t, &case.clone(), |t| {
            let expected = reference(&init, &data, device, &optimizer(), lr, 1, &[])?;
            let got = train(&init, &data, device, |b| {
                b.stages(2)
                    .replicas(2)
                    .micro_batches(4)
                    .optimizer(optimizer())
                    .learning_rate(lr)
            })?;
            t.close(case, &got.parameters(), &expected, BAR);
            Ok(())
        });
    }
}

/// A checkpoint saved on one device and resumed on the other continues the run: 2 steps on
/// `from`, save, 1 step on `to`, against 3 steps on `to`... and the saved weights load unchanged.
///
/// SGD with momentum: its velocity is optimizer state the checkpoint must carry (a lost one
/// changes the 3rd step far beyond the bar), and it adds the devices' rounding without
/// amplifying it. Adam would not do here: its first steps divide each gradient by its own
/// magnitude, so rounding differences between the two devices' first two steps become
/// update-sized (1e-4 on an H100, the first device check), which says nothing about the
/// checkpoint.
fn checkpoints(t: &mut Table, device: &Device) {
    let init = mlp(8, 3, 3);
    let data = mlp_data(3, 16, 8, 3);
    let dir = common::scratch("gpu-suite-checkpoints");
    let cpu = Device::flex();
    for (from, to, what) in [(device, &cpu, "gpu -> cpu"), (&cpu, device, "cpu -> gpu")] {
        let case = format!("checkpoint {what}");
        run(t, &case.clone(), |t| {
            let setup = |b: PipelineBuilder<MlpLayer>| {
                b.balance([2, 2])
                    .micro_batches(2)
                    .optimizer(
                        OptimizerConfig::torch_sgd(SgdOptions {
                            momentum: 0.9,
                            ..SgdOptions::default()
                        })
                        .expect("SGD with momentum 0.9 is valid"),
                    )
                    .learning_rate(1e-2)
            };
            let first = train(&init, &data[..2], from, setup)?;
            let path = dir
                .path()
                .join(format!("{}.ckpt", what.replace([' ', '>'], "")));
            first
                .save_checkpoint(&path, BTreeMap::new())
                .map_err(|e| e.to_string())?;
            let mut resumed = train(&init, &[], to, setup)?;
            resumed.load_checkpoint(&path).map_err(|e| e.to_string())?;
            t.bitwise(
                format!("{case}: weights as saved"),
                &resumed.parameters(),
                &first.parameters(),
            );
            resumed.train_step(&data[2]).map_err(|e| e.to_string())?;
            let straight = train(&init, &data, to, setup)?;
            t.close(
                format!("{case}: 3rd step vs 3 steps there"),
                &resumed.parameters(),
                &straight.parameters(),
                BAR,
            );
            Ok(())
        });
    }
}

/// The first H200 run's failures (issue 25), as regression cases.
fn regressions(t: &mut Table, device: &Device) {
    // 1. Replicas on one GPU drifted apart from step 5 on (plain all-reduce, SGD, width 64).
    let init = mlp(64, 7, 10);
    let data = mlp_data(10, 256, 64, 10);
    run(t, "regression: 2 replicas × 1 stage, 10 steps sgd", |t| {
        let mut pipeline = Pipeline::builder()
            .layers(init.clone())
            .devices([device.clone()])
            .stages(1)
            .replicas(2)
            .micro_batches(1)
            .optimizer(OptimizerConfig::sgd())
            .learning_rate(0.01)
            .build()
            .map_err(|e| e.to_string())?;
        let mut first_split = None;
        for (k, batch) in data.iter().enumerate() {
            pipeline.train_step(batch).map_err(|e| e.to_string())?;
            let (r0, r1) = (
                pipeline.replica_parameters(0),
                pipeline.replica_parameters(1),
            );
            if first_split.is_none() && r0 != r1 {
                first_split = Some((k + 1, difference(&r1, &r0)));
            }
        }
        let case = "regression: 2 replicas × 1 stage, 10 steps sgd: replicas equal every step";
        t.rows.push(Row {
            case: case.into(),
            measured: match &first_split {
                None => "bitwise equal at every step".into(),
                Some((step, d)) => format!(
                    "differ from step {step}: max_rel {:.3e} (abs {:.3e})",
                    d.max_relative, d.max_absolute
                ),
            },
            bar: "bitwise".into(),
            ok: first_split.is_none(),
        });
        let expected = reference(&init, &data, device, &OptimizerConfig::sgd(), 0.01, 1, &[])?;
        t.close(
            "regression: 2 replicas × 1 stage, 10 steps sgd vs one device",
            &pipeline.parameters(),
            &expected,
            BAR,
        );
        Ok(())
    });
    // 2. ZB-H1 and the fused backward at Adam's defaults (lr 1e-3), 5 steps, width 64.
    let init = mlp(64, 7, 10);
    let data = mlp_data(5, 256, 64, 10);
    for (schedule, backward) in [
        (ScheduleKind::ZbH1, Backward::default()),
        (ScheduleKind::OneFOneB, Backward::Fused),
    ] {
        let case = format!("regression: {schedule} {backward:?} p=2 m=4 adam lr 1e-3, 5 steps");
        run(t, &case.clone(), |t| {
            let expected = reference(&init, &data, device, &OptimizerConfig::adam(), 1e-3, 1, &[])?;
            let got = train(&init, &data, device, |b| {
                b.stages(2)
                    .micro_batches(4)
                    .schedule(schedule)
                    .backward(backward)
                    .optimizer(OptimizerConfig::adam())
                    .learning_rate(1e-3)
            })?;
            t.close(case, &got.parameters(), &expected, BAR);
            Ok(())
        });
    }
    // 2b. Taking 2 apart (the H100 check of 2026-11-26, docs/gpu.md): against the CLI's reference
    //     through the same 4 micro-batches, Adam was exact with `--remat never` or host timing,
    //     and 4.995e-4 off with re-materialization under device timing. A pipeline that
    //     recomputes its forward must train the same bits as one that keeps it.
    let case = "regression: 1f1b p=2 m=4 adam lr 1e-3, 5 steps: remat except-last == never";
    run(t, case, |t| {
        let go = |remat| {
            train(&init, &data, device, |b| {
                b.stages(2)
                    .micro_batches(4)
                    .remat(remat)
                    .optimizer(OptimizerConfig::adam())
                    .learning_rate(1e-3)
            })
        };
        let kept = go(Remat::Never)?;
        let recomputed = go(Remat::ExceptLast)?;
        t.bitwise(case, &recomputed.parameters(), &kept.parameters());
        Ok(())
    });
    // 3. The 2-stage ResNet, once 7.6e-2 off: five runs, each within the bar.
    let data = images(3, 3, 8);
    let layers = resnet();
    let balance = rebalance(&[2], layers.len());
    for run_index in 1..=5 {
        let case = format!("regression: resnet 2 stages m=4 adam, run {run_index}/5");
        run(t, &case.clone(), |t| {
            let expected =
                chunked_reference(&layers, &data, device, &OptimizerConfig::adam(), 1e-3, 4)?;
            let got = train(&layers, &data, device, |b| {
                b.balance(balance.clone())
                    .remat(Remat::Never) // batch norm: no re-materialization
                    .micro_batches(4)
                    .optimizer(OptimizerConfig::adam())
                    .learning_rate(1e-3)
            })?;
            t.close(case, &got.parameters(), &expected, BAR);
            Ok(())
        });
    }
    // 4. The 2-stage GPT under SGD (1.97e-5 against the CPU reference).
    let data = tokens(5);
    let case = "regression: gpt 2 stages m=4 sgd lr 0.01, 5 steps";
    run(t, case, |t| {
        let expected = reference(&gpt(), &data, device, &OptimizerConfig::sgd(), 0.01, 1, &[])?;
        let got = train(&gpt(), &data, device, |b| {
            b.stages(2)
                .micro_batches(4)
                .optimizer(OptimizerConfig::sgd())
                .learning_rate(0.01)
        })?;
        t.close(case, &got.parameters(), &expected, BAR);
        Ok(())
    });
    // 5. The replica drift taken apart (docs/gpu.md): the all-reduce alone, between threads.
    all_reduce_between_threads(t, device);
}

/// The in-process all-reduce between two member threads, as replicas run it: each round, both
/// members sum four tensors and at once scale their result in place (the only handle, as an
/// optimizer step does with a gradient), then read it. Both must hold the rank-order sum's bits
/// every round (halving is exact). Two ways to break it on a GPU, both closed since the H100
/// check (`engine::handoff`): an owner that adds into the first peer's own buffer on its
/// stream and sends it back, and a lazy device read that an in-place write overtakes.
fn all_reduce_between_threads(t: &mut Table, device: &Device) {
    use pipetrain::engine::{Abort, ChannelCollective, Collective};
    let (rounds, big) = match pipetrain::engine::device::is_cpu(device) {
        true => (10, 1 << 14),
        false => (50, 1 << 22),
    };
    let lens = [big, big / 16, 4096, 1000];
    let value = |rank: usize, k: usize, i: usize| {
        ((i * 7 + k * 31 + rank * 29) % 1021) as f32 / 1024.0 - 0.5
    };
    let inputs = |rank: usize| -> Vec<Vec<f32>> {
        let n = lens.iter().enumerate();
        n.map(|(k, &n)| (0..n).map(|i| value(rank, k, i)).collect())
            .collect()
    };
    // The rank-order sum, halved (exact), as bits.
    let expected: Vec<Vec<u32>> = inputs(0)
        .iter()
        .zip(inputs(1))
        .map(|(a, b)| {
            a.iter()
                .zip(b)
                .map(|(a, b)| ((a + b) * 0.5).to_bits())
                .collect()
        })
        .collect();
    let case = format!(
        "regression: all-reduce between 2 threads, {rounds} rounds, sums scaled in place at once"
    );
    let abort = std::sync::Arc::new(Abort::new());
    let members = ChannelCollective::group(2, &abort);
    // Per member: the rounds whose result differs from the rank-order sum.
    let outcome: Result<Vec<Vec<usize>>, String> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .into_iter()
            .map(|mut c| {
                let (mine, expected) = (inputs(c.rank()), &expected);
                s.spawn(move || -> Result<Vec<usize>, String> {
                    let mut wrong = Vec::new();
                    for round in 1..=rounds {
                        let tensors = mine
                            .iter()
                            .map(|v| {
                                Tensor::<1>::from_data(
                                    TensorData::new(v.clone(), [v.len()]),
                                    device,
                                )
                            })
                            .collect();
                        let sums = c.all_reduce_tensors(tensors).map_err(|e| e.to_string())?;
                        // As an optimizer step does with a gradient: scale in place at once.
                        let halves: Vec<Tensor<1>> =
                            sums.into_iter().map(|s| s.mul_scalar(0.5)).collect();
                        let exact = halves.into_iter().zip(expected).all(|(h, bits)| {
                            let got = h.into_data().try_to_vec::<f32>().expect("f32 values");
                            got.iter().map(|g| g.to_bits()).eq(bits.iter().copied())
                        });
                        if !exact {
                            wrong.push(round);
                        }
                    }
                    Ok(wrong)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a member panicked".into())))
            .collect()
    });
    match outcome {
        Err(e) => t.failed(case, e),
        Ok(wrong) => t.rows.push(Row {
            case,
            measured: match wrong.iter().all(Vec::is_empty) {
                true => "bitwise equal every round".into(),
                false => wrong
                    .iter()
                    .enumerate()
                    .map(|(rank, w)| format!("rank {rank}: {} wrong {w:?}", w.len()))
                    .collect::<Vec<_>>()
                    .join("; "),
            },
            bar: "bitwise".into(),
            ok: wrong.iter().all(Vec::is_empty),
        }),
    }
}

/// The device hand-off (issue 34): tensors cross between worker threads as copies the sender
/// made on its own stream. Replicas on one GPU must stay bitwise equal at every step, 2 × 2
/// must match one device and train the bits of the host hand-off. On the CPU the device path's
/// copies are forced (`DeviceOnCpuToo`), so the suite's own check runs them too.
fn handoffs(t: &mut Table, device: &Device) {
    let handoff = match pipetrain::engine::device::is_cpu(device) {
        true => Handoff::DeviceOnCpuToo,
        false => Handoff::Device,
    };
    let init = mlp(64, 7, 10);
    let data = mlp_data(10, 256, 64, 10);
    run(
        t,
        "handoff device: 2 replicas × 1 stage, 10 steps sgd",
        |t| {
            let mut pipeline = Pipeline::builder()
                .layers(init.clone())
                .devices([device.clone()])
                .stages(1)
                .replicas(2)
                .optimizer(OptimizerConfig::sgd())
                .learning_rate(0.01)
                .handoff(handoff)
                .build()
                .map_err(|e| e.to_string())?;
            let mut first_split = None;
            for (k, batch) in data.iter().enumerate() {
                pipeline.train_step(batch).map_err(|e| e.to_string())?;
                let (r0, r1) = (
                    pipeline.replica_parameters(0),
                    pipeline.replica_parameters(1),
                );
                if first_split.is_none() && r0 != r1 {
                    first_split = Some(k + 1);
                }
            }
            t.rows.push(Row {
                case:
                    "handoff device: 2 replicas × 1 stage, 10 steps sgd: replicas equal every step"
                        .into(),
                measured: match first_split {
                    None => "bitwise equal at every step".into(),
                    Some(step) => format!("differ from step {step}"),
                },
                bar: "bitwise".into(),
                ok: first_split.is_none(),
            });
            let expected = reference(&init, &data, device, &OptimizerConfig::sgd(), 0.01, 1, &[])?;
            t.close(
                "handoff device: 2 replicas × 1 stage, 10 steps sgd vs one device",
                &pipeline.parameters(),
                &expected,
                BAR,
            );
            Ok(())
        },
    );
    let data = mlp_data(5, 256, 64, 10);
    run(
        t,
        "handoff device: 2 replicas × 2 stages 1f1b m=4 adam",
        |t| {
            let two_by_two = |handoff| {
                train(&init, &data, device, |b| {
                    b.balance([4, 4])
                        .replicas(2)
                        .micro_batches(4)
                        .optimizer(OptimizerConfig::adam())
                        .learning_rate(1e-3)
                        .handoff(handoff)
                })
                .map(|p| p.parameters())
            };
            let got = two_by_two(handoff)?;
            let expected = reference(&init, &data, device, &OptimizerConfig::adam(), 1e-3, 1, &[])?;
            t.close(
                "handoff device: 2 replicas × 2 stages 1f1b m=4 adam, 5 steps vs one device",
                &got,
                &expected,
                BAR,
            );
            t.bitwise(
                "handoff device == host: 2 replicas × 2 stages 1f1b m=4 adam",
                &got,
                &two_by_two(Handoff::Host)?,
            );
            Ok(())
        },
    );
}

/// The matmul precision (issue 34): the GPU runs at the precision it started with, and refuses
/// the other one (nothing to refuse on the CPU).
fn matmul_precision(t: &mut Table, device: &Device) {
    let running = pipetrain::engine::device::matmul_precision(device);
    let other = match precision() {
        MatmulPrecision::Fp32 => MatmulPrecision::Tf32,
        MatmulPrecision::Tf32 => MatmulPrecision::Fp32,
    };
    let cpu = pipetrain::engine::device::is_cpu(device);
    let refused = pipetrain::engine::device::require_matmul_precision(device, other);
    let ok = match cpu {
        true => running == Some(MatmulPrecision::Fp32) && refused.is_ok(),
        false => {
            running == Some(precision())
                && matches!(
                    refused,
                    Err(pipetrain::EngineError::MatmulPrecisionFixed { running: r, .. })
                        if r == precision()
                )
        }
    };
    t.rows.push(Row {
        case: format!("matmul precision: runs {}, {other} refused", precision()),
        measured: format!(
            "runs {}; {other}: {}",
            running.map_or("-".to_string(), |p| p.to_string()),
            match &refused {
                Ok(()) => "taken (no TF32 on a CPU)".to_string(),
                Err(e) => e.to_string().chars().take(60).collect(),
            }
        ),
        bar: "as started".into(),
        ok,
    });
}

/// Single-device training in `precision` on `device`, each batch cut into `chunks`
/// micro-batches (bf16's reference: each micro-batch's weight gradients round to bf16 before
/// they are summed).
fn precise_reference<L: Layer>(
    layers: &[L],
    data: &[Batch],
    device: &Device,
    (optimizer, lr): (&OptimizerConfig, f64),
    chunks: usize,
    precision: Precision,
    ties: &[pipetrain::Tie],
) -> Result<Vec<Vec<f32>>, String> {
    let mut single = SingleDevice::new(layers.to_vec(), device, optimizer)
        .with_precision(precision)
        .with_ties(ties)
        .map_err(|e| e.to_string())?;
    for b in data {
        single
            .step_chunked(
                b.inputs.clone(),
                b.targets.clone(),
                chunks,
                &CrossEntropy,
                lr,
            )
            .map_err(|e| e.to_string())?;
    }
    Ok(single.parameters())
}

/// bf16 (issue 35): the MLP on 1–3 stages × 1–2 replicas, every schedule, split and fused
/// backward, remat, SGD and Adam, against single-device bf16 on the same device and bitwise
/// across schedules; bf16 apart from fp32; the tied GPT; the bytes sent halved.
fn mixed_precision(t: &mut Table, device: &Device) {
    let init = mlp(16, 5, 3); // 6 layers
    let data = mlp_data(3, 16, 16, 3);
    let m = 4;
    for (name, optimizer, lr) in optimizers() {
        for replicas in [1, 2] {
            let chunks = replicas * m;
            let reference = |precision| {
                precise_reference(
                    &init,
                    &data,
                    device,
                    (&optimizer(), lr),
                    chunks,
                    precision,
                    &[],
                )
            };
            let (expected, fp32) = match (reference(Precision::Bf16), reference(Precision::Fp32)) {
                (Ok(e), Ok(f)) => (e, f),
                (Err(e), _) | (_, Err(e)) => {
                    t.failed(format!("bf16 mlp {name} r={replicas} reference"), e);
                    continue;
                }
            };
            let apart = difference(&fp32, &expected).max_relative;
            t.rows.push(Row {
                case: format!("bf16 mlp {name} r={replicas}: single-device bf16 is not fp32"),
                measured: format!("{apart:.3e} apart"),
                bar: "> 1e-4".into(),
                ok: apart > 1e-4,
            });
            for stages in 1..=3 {
                for (remat, backward) in [
                    (Remat::Never, Backward::default()),
                    (Remat::Always, Backward::default()),
                    (Remat::Never, Backward::Fused),
                ] {
                    let mut first: Option<(ScheduleKind, Vec<Vec<f32>>)> = None;
                    for schedule in ScheduleKind::ALL {
                        let case = format!(
                            "bf16 mlp {name} {schedule} {replicas}x{stages} m={m} \
                             remat={remat} {backward:?}"
                        );
                        let got = train(&init, &data, device, |b| {
                            b.stages(stages)
                                .replicas(replicas)
                                .micro_batches(m)
                                .schedule(schedule)
                                .remat(remat)
                                .backward(backward)
                                .precision(Precision::Bf16)
                                .optimizer(optimizer())
                                .learning_rate(lr)
                        });
                        let got = match got {
                            Ok(p) => p.parameters(),
                            Err(e) => {
                                t.failed(case, e);
                                continue;
                            }
                        };
                        t.close(case.clone(), &got, &expected, BAR);
                        match &first {
                            None => first = Some((schedule, got)),
                            Some((them, theirs)) => {
                                t.bitwise(format!("{case} == {them}"), &got, theirs)
                            }
                        }
                    }
                }
            }
        }
    }
    // The GPT: bundles, int ids, norms and softmax in fp32 inside bf16 blocks, a tie.
    let init = gpt();
    let data = tokens(2);
    let ties = [gpt_config().tie_embeddings()];
    let adam = OptimizerConfig::adam;
    run(t, "bf16 gpt tied 4 stages 1f1b", |t| {
        let expected = precise_reference(
            &init,
            &data,
            device,
            (&adam(), 1e-2),
            4,
            Precision::Bf16,
            &ties,
        )?;
        let got = train(&init, &data, device, |b| {
            b.balance([1, 1, 1, 1])
                .micro_batches(4)
                .tie(ties[0].clone())
                .precision(Precision::Bf16)
                .optimizer(adam())
                .learning_rate(1e-2)
        })?;
        t.close(
            "bf16 gpt tied 4 stages 1f1b",
            &got.parameters(),
            &expected,
            BAR,
        );
        Ok(())
    });
    // Half the bytes between stages.
    run(t, "bf16 sends half the bytes", |t| {
        let init = mlp(16, 5, 3);
        let data = mlp_data(1, 16, 16, 3);
        let sent = |precision| -> Result<u64, String> {
            let mut p = train(&init, &[], device, |b| {
                b.balance([3, 3]).micro_batches(4).precision(precision)
            })?;
            let report = p.train_step(&data[0]).map_err(|e| e.to_string())?;
            Ok(report.workers.iter().map(|w| w.sent_bytes).sum())
        };
        let (fp32, bf16) = (sent(Precision::Fp32)?, sent(Precision::Bf16)?);
        t.rows.push(Row {
            case: "bf16 sends half the bytes between 2 stages".into(),
            measured: format!("fp32 {fp32} B, bf16 {bf16} B"),
            bar: "half".into(),
            ok: fp32 > 0 && 2 * bf16 == fp32,
        });
        Ok(())
    });
}

/// One section of the suite: adds its cases' rows to the table.
type Section = fn(&mut Table, &Device);

/// The sections `PIPETRAIN_GPU_SUITE_SECTIONS` names (space- or comma-separated, from `all`),
/// else all of them. A name that is no section's panics, listing the names.
fn chosen_sections(all: &[&'static str]) -> Vec<&'static str> {
    let Ok(wanted) = std::env::var("PIPETRAIN_GPU_SUITE_SECTIONS") else {
        return all.to_vec();
    };
    wanted
        .split([' ', ','])
        .filter(|w| !w.is_empty())
        .map(|w| {
            *all.iter().find(|name| **name == w).unwrap_or_else(|| {
                panic!("PIPETRAIN_GPU_SUITE_SECTIONS: no section {w:?}; the sections: {all:?}")
            })
        })
        .collect()
}

/// Runs every case on `device` (or the sections `PIPETRAIN_GPU_SUITE_SECTIONS` names) and
/// prints the table; the failed cases' names.
fn suite(device: &Device, on: &str, table_file: Option<String>) -> Vec<String> {
    let mut table = Table::default();
    // bf16 last: its first use of each shape tunes and compiles tensor-core kernels, which on
    // the H100 check of 2026-11-27 had not ended one case in 240 s.
    let sections: [(&str, Section); 9] = [
        ("matmul_precision", matmul_precision),
        ("regressions", regressions),
        ("handoffs", handoffs),
        ("mlp_schedules", mlp_schedules),
        ("mlp_virtual_stages", mlp_virtual_stages),
        ("models", models),
        ("data_parallel", data_parallel),
        ("checkpoints", checkpoints),
        ("mixed_precision", mixed_precision),
    ];
    let chosen = chosen_sections(&sections.map(|(name, _)| name));
    for (name, section) in sections {
        if !chosen.contains(&name) {
            continue;
        }
        let (done, started) = (table.rows.len(), std::time::Instant::now());
        eprintln!("section {name}: started");
        section(&mut table, device);
        // Each verdict as it comes, so that a run stopped at a time limit still shows them.
        for r in &table.rows[done..] {
            eprintln!(
                "{}: {} ({})",
                if r.ok { "ok" } else { "FAILED" },
                r.case,
                r.measured
            );
        }
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "section {name}: {} cases in {seconds:.1} s",
            table.rows.len() - done
        );
    }
    let rendered = table.render(on);
    println!("{rendered}");
    if let Some(path) = table_file {
        std::fs::write(&path, &rendered)
            .unwrap_or_else(|e| panic!("writing the table to {path}: {e}"));
    }
    table
        .rows
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.case.clone())
        .collect()
}

#[test]
fn every_equivalence_case_on_the_gpu_matches_the_same_gpu_alone() {
    let Some(device) = gpu() else {
        return;
    };
    let failed = suite(
        &device,
        "cuda:0",
        std::env::var("PIPETRAIN_GPU_SUITE_TABLE").ok(),
    );
    assert!(
        failed.is_empty(),
        "{} case(s) failed on cuda:0: {failed:#?}",
        failed.len()
    );
}

#[test]
fn the_suites_cases_pass_on_the_cpu() {
    let failed = suite(&Device::flex(), "cpu (the suite's own check)", None);
    assert!(
        failed.is_empty(),
        "{} case(s) failed on the cpu: {failed:#?}",
        failed.len()
    );
}
