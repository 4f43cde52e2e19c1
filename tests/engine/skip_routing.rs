//! Skips go straight from the stashing stage to the popping stage: the stages between never
//! receive them, a skip spanning 3 stage boundaries trains like one device under every schedule,
//! remat mode and with replicas (schedules bitwise equal at the same m), and a failure on the
//! popping stage ends the step instead of leaving the stashing stage waiting for the skip's
//! gradient.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{
    Activation, Batch, CrossEntropy, EngineError, Error, Layer, OptimizerConfig, Pipeline, Remat,
    ScheduleKind,
};
use pipetrain_models::{UNetConfig, UNetLayer, synthetic};

const SEED: u64 = 515;
const CLASSES: usize = 3;
const LR: f64 = 0.05;

/// A layer that errors if its input carries `skip0` (`strict` 1), always errors (2), or passes
/// its input on (0: the single-device run, where every skip rides along).
#[derive(Module, Debug)]
struct Probe {
    strict: usize,
}

// A layer enum as a model holds it (burn's Module derive; boxing would change the record).
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
enum Probed {
    Net(UNetLayer),
    Probe(Probe),
}

impl Layer for Probed {
    fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
        match self {
            Probed::Net(layer) => layer.forward(x),
            Probed::Probe(p) => {
                let parts: Vec<String> = match &x {
                    Activation::Bundle(b) => b.parts().iter().map(|p| p.name.clone()).collect(),
                    _ => Vec::new(),
                };
                match p.strict {
                    1 if parts.iter().any(|n| n == "skip0") => Err(EngineError::LayerRejected(
                        format!("skip0 passed through a stage between: {parts:?}"),
                    )),
                    2 => Err(EngineError::LayerRejected("the popping stage fails".into())),
                    _ => Ok(x),
                }
            }
        }
    }
    fn stashes(&self) -> Vec<String> {
        match self {
            Probed::Net(layer) => layer.stashes(),
            Probed::Probe(_) => Vec::new(),
        }
    }
    fn pops(&self) -> Vec<String> {
        match self {
            Probed::Net(layer) => layer.pops(),
            Probed::Probe(_) => Vec::new(),
        }
    }
}

/// `stem, down0 | probe, down1 | probe, up1 | up0, head (, probe)`: `skip0` goes from stage 0
/// to stage 3, past two probes; `skip1` from stage 1 to stage 2.
fn model(strict: usize, fail_last: bool) -> (Vec<Probed>, Vec<usize>) {
    let net = common::seeded(SEED, |d| {
        UNetConfig::new(2, 2, CLASSES).with_image(1, 4).init(d)
    });
    let mut net = net.into_iter().map(Probed::Net);
    let probe = || Probed::Probe(Probe { strict });
    let mut layers = Vec::new();
    layers.extend(net.by_ref().take(2));
    layers.push(probe());
    layers.extend(net.by_ref().take(1));
    layers.push(probe());
    layers.extend(net.by_ref().take(1));
    layers.extend(net);
    let mut balance = vec![2, 2, 2, 2];
    if fail_last {
        layers.push(Probed::Probe(Probe { strict: 2 }));
        balance[3] += 1;
    }
    (layers, balance)
}

fn batches() -> Vec<Batch> {
    (0..2)
        .map(|k| synthetic::images(SEED, k, 10, 1, 4, CLASSES, &Device::flex()))
        .collect()
}

fn train(schedule: ScheduleKind, remat: Remat, replicas: usize) -> Vec<Vec<f32>> {
    let (layers, balance) = model(1, false);
    let mut builder = Pipeline::builder()
        .layers(layers)
        .balance(balance)
        .replicas(replicas)
        .micro_batches(4)
        .schedule(schedule)
        .remat(remat)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(LR);
    if schedule.virtual_stages() > 1 {
        builder = builder.stages(2); // 2 ranks × 2 chunks
    }
    let mut pipeline = builder.build().unwrap();
    for b in &batches() {
        pipeline.train_step(b).unwrap();
    }
    pipeline.parameters()
}

#[test]
fn a_skip_spanning_three_boundaries_skips_the_stages_between_under_every_schedule() {
    let mut single = SingleDevice::new(model(0, false).0, &Device::flex(), &OptimizerConfig::sgd());
    for b in &batches() {
        single
            .step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, LR)
            .unwrap();
    }
    let expected = single.parameters();
    // On one device skip0 does ride through the probes' layers: a strict probe fails there.
    let mut strict = SingleDevice::new(model(1, false).0, &Device::flex(), &OptimizerConfig::sgd());
    let b = &batches()[0];
    let err = strict.step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, LR);
    assert!(format!("{:?}", err.unwrap_err()).contains("skip0 passed through"));
    let schedules = [
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::ZbH1,
        ScheduleKind::Interleaved { virtual_stages: 2 },
        ScheduleKind::ZbV,
        ScheduleKind::LoopedBfs { virtual_stages: 2 },
        ScheduleKind::InterleavedZb { virtual_stages: 2 },
        ScheduleKind::DualPipeV,
    ];
    for replicas in [1, 2] {
        for remat in [Remat::Never, Remat::ExceptLast, Remat::Always] {
            let mut first: Option<Vec<Vec<f32>>> = None;
            for schedule in schedules {
                // The probes on stages 1 and 2 fail the step if skip0 reaches them.
                let got = train(schedule, remat, replicas);
                let case = format!("{schedule:?}, {remat:?}, {replicas} replicas");
                let d = difference(&got, &expected);
                assert!(d.max_relative <= common::TOLERANCE, "{case}: {d:?}");
                match &first {
                    Some(first) => assert_eq!(&got, first, "{case}: bitwise as GPipe"),
                    None => first = Some(got),
                }
            }
        }
    }
}

#[test]
fn a_failure_on_the_popping_stage_wakes_the_stashing_stage() {
    // Stage 3 fails in its forward; stage 0's first wait after its forwards is for skip0's
    // gradient from stage 3, which never comes: the abort must end it.
    for schedule in [ScheduleKind::GPipe, ScheduleKind::OneFOneB] {
        let (layers, balance) = model(1, true);
        let mut pipeline = Pipeline::builder()
            .layers(layers)
            .balance(balance)
            .micro_batches(2)
            .schedule(schedule)
            .optimizer(OptimizerConfig::sgd())
            .build()
            .unwrap();
        let err = pipeline.train_step(&batches()[0]).unwrap_err();
        assert!(matches!(err, Error::Engine(_)), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("stage 3") && text.contains("the popping stage fails"),
            "{schedule:?}: {text}"
        );
    }
}

#[test]
fn inference_sends_skips_straight_too() {
    let (layers, balance) = model(1, false);
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .balance(balance)
        .replicas(2)
        .micro_batches(2)
        .build()
        .unwrap();
    let inputs = batches()[0].inputs.clone();
    // The strict probes on stages 1 and 2 fail the run if skip0 reaches them.
    let got: Tensor<2> = pipeline.forward(inputs.clone()).unwrap().float().unwrap();
    let mut x = inputs;
    for layer in model(0, false).0 {
        x = layer.forward(x).unwrap();
    }
    let expected: Tensor<2> = x.float().unwrap();
    let diff: f32 = (got - expected).abs().max().into_scalar();
    assert!(diff <= 1e-6, "{diff}");
}

/// Stage 0 stashes an int skip (`ids`) and a float one without gradient (`mask`) for stage 2;
/// stage 1 only sees `x`.
#[derive(Module, Debug)]
enum Tiny {
    Stash(burn::nn::Linear),
    Mid(burn::nn::Linear),
    Pop(burn::nn::Linear),
}

impl Layer for Tiny {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        use pipetrain::Bundle;
        Ok(match self {
            Tiny::Stash(linear) => {
                let x: Tensor<2> = input.float()?;
                let mask = x.clone().greater_elem(0.0).float();
                let ids = x.clone().argmax(1);
                Bundle::new()
                    .with("x", linear.forward(x))
                    .with("ids", ids)
                    .with_constant("mask", mask)
                    .into()
            }
            Tiny::Mid(linear) => {
                let mut b = input.bundle()?;
                let x: Tensor<2> = b.take("x")?.float()?;
                Bundle::new()
                    .with("x", linear.forward(x))
                    .with_parts(b)
                    .into()
            }
            Tiny::Pop(linear) => {
                let mut b = input.bundle()?;
                let x: Tensor<2> = b.take("x")?.float()?;
                let mask: Tensor<2> = b.take("mask")?.float()?;
                let ids: Tensor<2, burn::tensor::Int> = b.take("ids")?.int()?;
                (linear.forward(x * mask) + ids.float()).into()
            }
        })
    }
    fn stashes(&self) -> Vec<String> {
        match self {
            Tiny::Stash(_) => vec!["ids".into(), "mask".into()],
            _ => Vec::new(),
        }
    }
    fn pops(&self) -> Vec<String> {
        match self {
            Tiny::Pop(_) => vec!["ids".into(), "mask".into()],
            _ => Vec::new(),
        }
    }
}

#[test]
fn skips_without_gradient_go_straight_and_ask_for_none() {
    use burn::nn::LinearConfig;
    let tiny = || {
        common::seeded(SEED, |d| {
            vec![
                Tiny::Stash(LinearConfig::new(4, 4).init(d)),
                Tiny::Mid(LinearConfig::new(4, 4).init(d)),
                Tiny::Pop(LinearConfig::new(4, 4).init(d)),
            ]
        })
    };
    let device = Device::flex();
    // Under the generator's lock: an unlocked draw races the other tests' seeded inits.
    let inputs: Activation = common::seeded_draw(SEED + 1, |d| {
        Tensor::<2>::random([6, 4], burn::tensor::Distribution::Default, d)
            .sub_scalar(0.5)
            .into()
    });
    let targets: Activation = Tensor::<2>::zeros([6, 4], &device).into();
    let mut single = SingleDevice::new(tiny(), &device, &OptimizerConfig::sgd());
    single
        .step(inputs.clone(), targets.clone(), &pipetrain::Mse, LR)
        .unwrap();
    let batch = Batch { inputs, targets };
    for schedule in [ScheduleKind::GPipe, ScheduleKind::OneFOneB] {
        for remat in [Remat::Never, Remat::Always] {
            let mut pipeline = Pipeline::builder()
                .layers(tiny())
                .stages(3)
                .micro_batches(2)
                .schedule(schedule)
                .remat(remat)
                .loss(pipetrain::Mse)
                .optimizer(OptimizerConfig::sgd())
                .learning_rate(LR)
                .build_with(&batch)
                .unwrap();
            pipeline.train_step(&batch).unwrap();
            let d = difference(&pipeline.parameters(), &single.parameters());
            assert!(
                d.max_relative <= common::TOLERANCE,
                "{schedule:?} {remat:?}: {d:?}"
            );
        }
    }
}
