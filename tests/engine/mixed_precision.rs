//! Mixed precision (`Precision::Bf16`): a bf16 pipeline equals single-device training in bf16,
//! as an fp32 one equals it in fp32.
//!
//! - The sweep: schedule {GPipe, 1F1B, ZB-H1} × stages {1, 2, 3} × replicas {1, 2} ×
//!   micro-batches {1, 4} × {remat never + split backward, remat always + split, fused} ×
//!   {SGD, Adam}, 3 steps of an MLP: within 1e-5 of `SingleDevice::with_precision(Bf16)`
//!   stepping micro-batch by micro-batch, and every schedule bitwise equal at the same m.
//! - The casts happen: bf16 training ends elsewhere than fp32 training (by far more than 1e-5),
//!   a layer sees bf16 weights and a bf16 input on every stage, and the masters stay fp32.
//! - Layouts: ZeRO-1, gradient accumulation, tied weights (the GPT), skips (the U-Net).
//! - A layer holding a `BatchNorm` is refused at build, naming it.

use crate::common;

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::DType;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::partitioner::Partition;
use pipetrain::{
    Activation, AdamOptions, Backward, Batch, CrossEntropy, EngineError, Error, Layer,
    OptimizerConfig, Pipeline, Precision, Remat, ScheduleKind, Tie,
};
use pipetrain_models::{
    GptConfig, GptLayer, MlpConfig, MlpLayer, ResNetConfig, UNetConfig, UNetLayer, synthetic,
};

const STEPS: u64 = 3;
const BATCH: usize = 16;
const WIDTH: usize = 16;
const CLASSES: usize = 3;
const SEED: u64 = 35;

fn mlp() -> Vec<MlpLayer> {
    common::seeded(SEED, |d| MlpConfig::new(WIDTH, 5, CLASSES).init(d)) // 6 layers
}

fn batches(steps: u64) -> Vec<Batch> {
    (0..steps)
        .map(|k| synthetic::classification(SEED, k, BATCH, WIDTH, CLASSES, &Device::flex()))
        .collect()
}

/// One pipelined layout.
#[derive(Clone, Copy, Debug)]
struct Layout {
    stages: usize,
    replicas: usize,
    micro_batches: usize,
    remat: Remat,
    backward: Backward,
    zero: u8,
    accumulation: usize,
}

impl Layout {
    fn new(stages: usize, replicas: usize, micro_batches: usize) -> Self {
        Self {
            stages,
            replicas,
            micro_batches,
            remat: Remat::Never,
            backward: Backward::default(),
            zero: 0,
            accumulation: 1,
        }
    }
}

/// Single-device training in `precision`, micro-batch by micro-batch in the order the pipeline
/// cuts each optimizer step's batches (`chunks` per step).
fn reference<L: Layer>(
    init: &[L],
    optimizer: &OptimizerConfig,
    lr: f64,
    steps: &[Vec<Batch>],
    chunks: usize,
    precision: Precision,
    ties: &[Tie],
) -> Vec<Vec<f32>> {
    let mut single = SingleDevice::new(init.to_vec(), &Device::flex(), optimizer)
        .with_precision(precision)
        .with_ties(ties)
        .unwrap();
    for batches in steps {
        let (inputs, targets): (Vec<_>, Vec<_>) = batches
            .iter()
            .map(|b| (b.inputs.clone(), b.targets.clone()))
            .unzip();
        single
            .step_chunked(
                Activation::cat(inputs).unwrap(),
                Activation::cat(targets).unwrap(),
                chunks,
                &CrossEntropy,
                lr,
            )
            .unwrap();
    }
    single.parameters()
}

/// A pipeline of `init` in `layout` and `precision`, trained on `steps` (each optimizer step's
/// batches, one `train_step` each); every replica's parameters, replica 0's first.
#[allow(clippy::too_many_arguments)]
fn pipelined<L: Layer>(
    init: &[L],
    optimizer: OptimizerConfig,
    lr: f64,
    steps: &[Vec<Batch>],
    layout: Layout,
    schedule: ScheduleKind,
    precision: Precision,
    ties: &[Tie],
) -> Vec<Vec<Vec<f32>>> {
    let balance = Partition::even(init.len(), layout.stages)
        .unwrap()
        .balance();
    let mut builder = Pipeline::builder()
        .layers(init.to_vec())
        .balance(balance)
        .replicas(layout.replicas)
        .micro_batches(layout.micro_batches)
        .schedule(schedule)
        .remat(layout.remat)
        .backward(layout.backward)
        .zero(layout.zero)
        .accumulation(layout.accumulation)
        .bucket_bytes(64)
        .optimizer(optimizer)
        .learning_rate(lr)
        .precision(precision)
        .threads_per_worker(1);
    for tie in ties {
        builder = builder.tie(tie.clone());
    }
    let mut pipeline = builder.build().unwrap();
    for batches in steps {
        for b in batches {
            let report = pipeline.train_step(b).unwrap();
            assert!(report.loss.is_finite(), "{layout:?} {schedule}: loss");
        }
    }
    (0..layout.replicas)
        .map(|r| pipeline.replica_parameters(r))
        .collect()
}

/// Every replica within 1e-5 of `expected`, replica 0's parameters returned.
fn check(case: &str, replicas: Vec<Vec<Vec<f32>>>, expected: &[Vec<f32>]) -> Vec<Vec<f32>> {
    for (r, got) in replicas.iter().enumerate() {
        let d = difference(got, expected);
        assert!(
            d.max_relative <= common::TOLERANCE,
            "{case}, replica {r}: max_rel_diff {:.3e} (max abs {:.3e}) from single-device bf16",
            d.max_relative,
            d.max_absolute
        );
    }
    replicas.into_iter().next().unwrap()
}

/// An optimizer under test: name, config, learning rate.
type OptimizerCase = (&'static str, fn() -> OptimizerConfig, f64);

fn one_batch_per_step(steps: u64) -> Vec<Vec<Batch>> {
    batches(steps).into_iter().map(|b| vec![b]).collect()
}

#[test]
fn bf16_pipelines_match_single_device_bf16_and_schedules_are_bitwise_equal() {
    let init = mlp();
    let data = one_batch_per_step(STEPS);
    let optimizers: [OptimizerCase; 2] = [
        ("sgd", OptimizerConfig::sgd, 0.1),
        ("adam", OptimizerConfig::adam, 1e-2),
    ];
    let mut worst = 0f64;
    for (name, optimizer, lr) in optimizers {
        for replicas in [1, 2] {
            for micro_batches in [1, 4] {
                let chunks = replicas * micro_batches;
                let expected =
                    reference(&init, &optimizer(), lr, &data, chunks, Precision::Bf16, &[]);
                // The casts are real: fp32 training ends far from bf16 training.
                let fp32 = reference(&init, &optimizer(), lr, &data, chunks, Precision::Fp32, &[]);
                let apart = difference(&fp32, &expected).max_relative;
                assert!(
                    apart > 1e-4,
                    "{name}: bf16 must differ from fp32 by its rounding ({apart:.3e})"
                );
                for stages in 1..=3 {
                    for (remat, backward) in [
                        (Remat::Never, Backward::default()),
                        (Remat::Always, Backward::default()),
                        (Remat::Never, Backward::Fused),
                    ] {
                        let layout = Layout {
                            remat,
                            backward,
                            ..Layout::new(stages, replicas, micro_batches)
                        };
                        let mut first: Option<(ScheduleKind, Vec<Vec<f32>>)> = None;
                        for schedule in ScheduleKind::ALL {
                            let case = format!("{name} {schedule} {layout:?}");
                            let got = check(
                                &case,
                                pipelined(
                                    &init,
                                    optimizer(),
                                    lr,
                                    &data,
                                    layout,
                                    schedule,
                                    Precision::Bf16,
                                    &[],
                                ),
                                &expected,
                            );
                            worst = worst.max(difference(&got, &expected).max_relative);
                            match &first {
                                None => first = Some((schedule, got)),
                                Some((them, theirs)) => assert!(
                                    &got == theirs,
                                    "{case}: not bitwise equal to {them} at the same m"
                                ),
                            }
                        }
                    }
                }
            }
        }
    }
    println!("worst max_rel_diff from single-device bf16 over the sweep: {worst:.3e}");
}

#[test]
fn zero_1_and_accumulation_in_bf16_match_single_device_bf16() {
    let init = mlp();
    for layout in [
        Layout {
            zero: 1,
            ..Layout::new(2, 2, 2)
        },
        Layout {
            accumulation: 2,
            ..Layout::new(2, 2, 2)
        },
    ] {
        let k = layout.accumulation as u64;
        let all = batches(2 * k);
        let steps: Vec<Vec<Batch>> = all.chunks(k as usize).map(<[Batch]>::to_vec).collect();
        let chunks = layout.replicas * layout.micro_batches * layout.accumulation;
        let adam = OptimizerConfig::adam;
        let expected = reference(&init, &adam(), 1e-2, &steps, chunks, Precision::Bf16, &[]);
        let got = pipelined(
            &init,
            adam(),
            1e-2,
            &steps,
            layout,
            ScheduleKind::OneFOneB,
            Precision::Bf16,
            &[],
        );
        check(&format!("{layout:?}"), got, &expected);
    }
}

#[test]
fn tied_gpt_and_skipping_unet_in_bf16_match_single_device_bf16() {
    // The GPT: int token ids, a bundle between stages, layer norm and softmax in fp32 inside
    // bf16 blocks, the embedding tied to the head across the first and last stage.
    let gpt = GptConfig::new(16, 8, 8, 2, 2);
    let init: Vec<GptLayer> = common::seeded(5, |d| gpt.init(d));
    let steps: Vec<Vec<Batch>> = (0..2)
        .map(|i| vec![synthetic::tokens(9, i, 8, 8, 16, &Device::flex())])
        .collect();
    let adam = || OptimizerConfig::torch_adam(AdamOptions::adam()).unwrap();
    let ties = [gpt.tie_embeddings()];
    let expected = reference(&init, &adam(), 1e-2, &steps, 4, Precision::Bf16, &ties);
    let fp32 = reference(&init, &adam(), 1e-2, &steps, 4, Precision::Fp32, &ties);
    assert!(difference(&fp32, &expected).max_relative > 1e-4);
    for schedule in ScheduleKind::ALL {
        let got = pipelined(
            &init,
            adam(),
            1e-2,
            &steps,
            Layout::new(4, 1, 4),
            schedule,
            Precision::Bf16,
            &ties,
        );
        check(&format!("gpt {schedule}"), got, &expected);
    }
    // Re-materialized micro-batches send what the training forward computes (at the CLI's
    // default sizes a graph-free first forward rounded otherwise: tests/cli/llama.rs).
    for remat in [Remat::ExceptLast, Remat::Always] {
        let layout = Layout {
            remat,
            ..Layout::new(4, 1, 4)
        };
        let got = pipelined(
            &init,
            adam(),
            1e-2,
            &steps,
            layout,
            ScheduleKind::OneFOneB,
            Precision::Bf16,
            &ties,
        );
        check(&format!("gpt {layout:?}"), got, &expected);
    }
    // The U-Net: skips sent straight from the stashing to the popping stage, in bf16.
    let init: Vec<UNetLayer> = common::seeded(4242, |d| {
        UNetConfig::new(2, 2, CLASSES).with_image(1, 4).init(d)
    });
    let steps: Vec<Vec<Batch>> = (0..2)
        .map(|k| {
            vec![synthetic::images(
                4242,
                k,
                6,
                1,
                4,
                CLASSES,
                &Device::flex(),
            )]
        })
        .collect();
    let sgd = OptimizerConfig::sgd;
    let expected = reference(&init, &sgd(), 0.05, &steps, 6, Precision::Bf16, &[]);
    for remat in [Remat::Never, Remat::Always] {
        let layout = Layout {
            remat,
            ..Layout::new(3, 2, 3)
        };
        let got = pipelined(
            &init,
            sgd(),
            0.05,
            &steps,
            layout,
            ScheduleKind::OneFOneB,
            Precision::Bf16,
            &[],
        );
        check(&format!("unet {layout:?}"), got, &expected);
    }
}

/// A dense layer that refuses to run unless its weight and its input are in `dtype`: proof of
/// what each stage computes in.
#[derive(Module, Debug)]
struct Probe {
    linear: Linear,
    /// 16 for bf16, 32 for fp32.
    bits: usize,
}

impl Layer for Probe {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        let x: Tensor<2> = input.float()?;
        let dtype = if self.bits == 16 {
            DType::BF16
        } else {
            DType::F32
        };
        let weight = self.linear.weight.val().dtype();
        if x.dtype() != dtype || weight != dtype {
            return Err(EngineError::LayerRejected(format!(
                "input in {:?} and weight in {weight:?}, not {dtype:?}",
                x.dtype()
            )));
        }
        Ok(burn::tensor::activation::relu(self.linear.forward(x)).into())
    }
}

#[test]
fn every_stage_computes_in_bf16_and_the_masters_stay_fp32() {
    let probes = |bits: usize| -> Vec<Probe> {
        common::seeded(1, |d| {
            (0..4)
                .map(|i| Probe {
                    linear: LinearConfig::new(WIDTH, if i == 3 { CLASSES } else { WIDTH }).init(d),
                    bits,
                })
                .collect()
        })
    };
    let data = batches(1);
    for (bits, precision) in [(16, Precision::Bf16), (32, Precision::Fp32)] {
        for (remat, backward) in [
            (Remat::Never, Backward::default()),
            (Remat::Always, Backward::Fused),
        ] {
            let mut pipeline = Pipeline::builder()
                .layers(probes(bits))
                .balance([1, 1, 1, 1])
                .replicas(2)
                .micro_batches(2)
                .remat(remat)
                .backward(backward)
                .precision(precision)
                .optimizer(OptimizerConfig::sgd())
                .learning_rate(0.1)
                .build()
                .unwrap();
            pipeline.train_step(&data[0]).unwrap();
            pipeline.forward(data[0].inputs.clone()).unwrap();
            for stage in pipetrain::StageId::range(4) {
                for layer in pipeline.stage_layers(stage).iter() {
                    assert_eq!(layer.linear.weight.val().dtype(), DType::F32, "masters");
                }
            }
        }
    }
    // A bf16 probe in an fp32 pipeline is refused by the layer: the check can fail.
    let mut pipeline = Pipeline::builder()
        .layers(probes(16))
        .balance([2, 2])
        .build()
        .unwrap();
    let e = pipeline.train_step(&data[0]).unwrap_err().to_string();
    assert!(e.contains("not BF16"), "{e}");
}

#[test]
fn a_batch_norm_layer_is_refused_in_bf16_before_any_thread_starts() {
    let layers = common::seeded(1, |d| ResNetConfig::new(4, 2, CLASSES).init(d));
    let e = match Pipeline::builder()
        .layers(layers)
        .balance([2, 2])
        .remat(Remat::Never)
        .precision(Precision::Bf16)
        .build()
    {
        Err(e) => e,
        Ok(_) => panic!("a BatchNorm layer must be refused in bf16"),
    };
    assert!(
        matches!(
            e,
            Error::Engine(EngineError::PrecisionUnsupported { ref module, .. }) if module == "BatchNorm"
        ),
        "{e:?}"
    );
    let shown = e.to_string();
    assert!(
        shown.contains("holds a BatchNorm") && shown.contains("bf16"),
        "{shown}"
    );
}

#[test]
fn bf16_halves_the_bytes_sent_between_stages() {
    let data = batches(1);
    let sent = |precision: Precision, remat: Remat| -> Vec<u64> {
        let mut pipeline = Pipeline::builder()
            .layers(mlp())
            .balance([2, 2, 2])
            .micro_batches(4)
            .remat(remat)
            .precision(precision)
            .optimizer(OptimizerConfig::sgd())
            .build()
            .unwrap();
        let report = pipeline.train_step(&data[0]).unwrap();
        report.workers.iter().map(|w| w.sent_bytes).collect()
    };
    for remat in [Remat::Never, Remat::Always] {
        let (fp32, bf16) = (sent(Precision::Fp32, remat), sent(Precision::Bf16, remat));
        // Stage 0 sends activations, stage 2 input gradients, stage 1 both: 4 micro-batches of
        // 4 rows × 16 values each way, 4 bytes a value in fp32.
        assert_eq!(fp32, [4 * 4 * 16 * 4, 2 * 4 * 4 * 16 * 4, 4 * 4 * 16 * 4]);
        let halves: Vec<u64> = fp32.iter().map(|b| b / 2).collect();
        assert_eq!(bf16, halves, "{remat:?}");
    }
}

#[test]
fn a_bf16_run_checkpoints_fp32_master_weights_and_resumes() {
    let dir = common::scratch("bf16-checkpoint");
    let path = dir.path().join("bf16.safetensors");
    let shown = path.display().to_string();
    let out = common::success(&[
        "train",
        "--width",
        "16",
        "--hidden-layers",
        "2",
        "--batch",
        "16",
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--steps",
        "2",
        "--precision",
        "bf16",
        "--checkpoint",
        &shown,
    ]);
    assert!(out.contains("precision: bf16"), "{out}");
    let bytes = std::fs::read(&path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let weights: Vec<_> = file
        .tensors()
        .into_iter()
        .filter(|(name, _)| name.ends_with("weight") || name.ends_with("bias"))
        .collect();
    assert!(!weights.is_empty());
    for (name, view) in &weights {
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
    }
    // And a bf16 run resumes from it.
    let out = common::success(&[
        "train",
        "--width",
        "16",
        "--hidden-layers",
        "2",
        "--batch",
        "16",
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--steps",
        "3",
        "--precision",
        "bf16",
        "--resume",
        &shown,
    ]);
    assert!(out.contains("step    3/3"), "{out}");
}

#[test]
fn multi_chunk_schedules_in_bf16_match_single_device_bf16_and_gpipe_over_their_chunks() {
    let init: Vec<MlpLayer> = common::seeded(SEED, |d| MlpConfig::new(WIDTH, 7, CLASSES).init(d));
    let data = one_batch_per_step(2);
    let adam = OptimizerConfig::adam;
    let expected = reference(&init, &adam(), 1e-2, &data, 4, Precision::Bf16, &[]);
    let build = |schedule: ScheduleKind, stages: Option<usize>| {
        let mut builder = Pipeline::builder()
            .layers(init.clone())
            .balance([2, 2, 2, 2])
            .micro_batches(4)
            .schedule(schedule)
            .precision(Precision::Bf16)
            .optimizer(adam())
            .learning_rate(1e-2)
            .threads_per_worker(1);
        if let Some(stages) = stages {
            builder = builder.stages(stages);
        }
        let mut pipeline = builder.build().unwrap();
        for batches in &data {
            pipeline.train_step(&batches[0]).unwrap();
        }
        pipeline.parameters()
    };
    let gpipe = build(ScheduleKind::GPipe, None);
    for schedule in [
        ScheduleKind::Interleaved { virtual_stages: 2 },
        ScheduleKind::ZbV,
        ScheduleKind::VMin,
        ScheduleKind::VHalf,
    ] {
        let got = build(schedule, Some(2));
        let d = difference(&got, &expected);
        assert!(d.max_relative <= common::TOLERANCE, "{schedule}: {d:?}");
        assert!(
            got == gpipe,
            "{schedule}: not bitwise equal to GPipe over its chunks"
        );
    }
}
